// mhetrain finetune: fine-tune a (pretrained) model on a task (issue 14).
#include <stdio.h>

#include "trainer/cli/commands.h"
#include "trainer/train/finetune.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain finetune CONFIG.yaml [key.path=value ...] [--dry-run]\n"
            "\n"
            "Fine-tunes on the task the config's task: section describes (classification,\n"
            "regression or span; configs/README.md lists the keys).  train.init_from names the\n"
            "pretraining checkpoint (a checkpoint or a run's out_dir): its encoder is copied by\n"
            "parameter name, its MLM/LM head ignored, the task head initialised from train.seed;\n"
            "empty means random initialisation.  task.epochs epochs (train.steps > 0 caps the\n"
            "steps); the dev split is scored after every epoch (and every train.eval_every\n"
            "steps); the best evaluation's weights go to OUT/best, its scores and the trivial\n"
            "predictor's to OUT/finetune_result.json and the last line of stdout\n"
            "(e.g. task.epochs=2 optim.lr=2e-5).\n"
            "\n" CLI_RUN_OPTIONS_HELP);
}

int cmd_finetune(int argc, char **argv) { return cli_run_command("finetune", argc, argv, usage, finetune_run); }
