// mhetrain bench: benchmark training steps.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_bench(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain bench ...\n\nbenchmark training steps (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain bench: not built yet\n");
    return 1;
}
