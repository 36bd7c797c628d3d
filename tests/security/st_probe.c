/* Opens each safetensors file named on the command line with dt_st_open and prints one line per
 * file: "<path>\tok" or "<path>\terror\t<message>" (test_safetensors_spec.py reads them). */
#include <stdio.h>
#include "dtrain/safetensors.h"
#include "dtrain/status.h"

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        dt_st_file *f = NULL;
        if (dt_st_open(argv[i], &f) == DT_OK)
            printf("%s\tok\n", argv[i]);
        else
            printf("%s\terror\t%s\n", argv[i], dt_last_error());
        dt_st_close(f);
    }
    return 0;
}
