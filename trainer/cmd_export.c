// mhetrain export: export a checkpoint.
#include <stdio.h>

#include "trainer/commands.h"

int cmd_export(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        printf("usage: mhetrain export ...\n\nexport a checkpoint (not built yet).\n");
        return 0;
    }
    fprintf(stderr, "mhetrain export: not built yet\n");
    return 1;
}
