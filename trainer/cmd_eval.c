// mhetrain eval: evaluate a checkpoint.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_eval(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain eval ...\n\nevaluate a checkpoint (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain eval: not built yet\n");
    return 1;
}
