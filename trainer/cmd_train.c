// mhetrain train: train a model.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain train ...\n\ntrain a model (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain train: not built yet\n");
    return 1;
}
