// mhetrain train: train a model.
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "trainer/commands.h"
#include "trainer/config.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain train CONFIG.yaml [key.path=value ...] [--dry-run]\n"
            "\n"
            "Trains the model an experiment file describes (configs/README.md lists every key).\n"
            "\n"
            "  key.path=value   override a config value, e.g. train.steps=50 optim.lr=3e-4\n"
            "  --dry-run        load and validate the config, print it fully resolved as YAML,\n"
            "                   and exit without training\n"
            "  -h, --help       this help\n");
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    const char *path = NULL;
    int dry_run = 0;
    char *overrides[256];
    int n_overrides = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) {
            dry_run = 1;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            usage(stderr);
            mhe_fail("train: unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            if (n_overrides == (int)(sizeof overrides / sizeof *overrides))
                mhe_fail("train: too many overrides");
            overrides[n_overrides++] = argv[i];
        }
    }
    if (!path) {
        usage(stderr);
        mhe_fail("train: missing the config file");
    }
    if (dry_run) {
        Config cfg;
        config_load(&cfg, path, n_overrides, overrides);
        config_write_yaml(&cfg, stdout);
        config_free(&cfg);
        return 0;
    }
    fprintf(stderr, "mhetrain train: not built yet\n");
    return 1;
}
