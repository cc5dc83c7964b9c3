// mhetrain train: train a model (pretraining on the run engine, trainer/train/trainer.h).
#include <stdio.h>

#include "trainer/cli/commands.h"
#include "trainer/train/trainer.h"

static void usage(FILE *out) {
    fprintf(out, "usage: mhetrain train CONFIG.yaml [key.path=value ...] [--dry-run]\n"
                 "\n"
                 "Trains the model an experiment file describes (configs/README.md lists every key),\n"
                 "e.g. train.steps=50 optim.lr=3e-4.\n"
                 "\n" CLI_RUN_OPTIONS_HELP);
}

int cmd_train(int argc, char **argv) { return cli_run_command("train", argc, argv, usage, trainer_run); }
