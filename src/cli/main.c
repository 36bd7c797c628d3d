/* The dtrain command. */
#include <stdio.h>
#include <string.h>
#include "dtrain/dtrain.h"

int main(int argc, char **argv) {
    if (argc > 1 && (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0)) {
        printf("dtrain %s\n", dt_version());
        return 0;
    }
    fprintf(stderr, "usage: dtrain --version\n");
    return 2;
}
