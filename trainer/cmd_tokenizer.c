// mhetrain tokenizer: train a tokenizer.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_tokenizer(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain tokenizer ...\n\ntrain a tokenizer (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain tokenizer: not built yet\n");
    return 1;
}
