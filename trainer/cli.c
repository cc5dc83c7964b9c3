#include <string.h>

#include "trainer/commands.h"

int cli_wants_help(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    return 0;
}
