// mhetrain prepare: tokenize corpora into shards.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_prepare(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain prepare ...\n\ntokenize corpora into shards (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain prepare: not built yet\n");
    return 1;
}
