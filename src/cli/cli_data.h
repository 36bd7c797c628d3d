/* `dtrain data import|inspect|verify` (src/cli/data.c). Returns the process exit code: 0 done,
 * 1 failed at run time (bad or corrupt data), 2 usage error. */
#ifndef DTRAIN_CLI_DATA_H
#define DTRAIN_CLI_DATA_H

int dt_cli_data(int argc, char **argv);

#endif
