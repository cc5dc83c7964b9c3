// mhetrain finetune: fine-tune a (pretrained) model on a task (issue 14).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "common/error.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"
#include "trainer/train/finetune.h"
#include "trainer/train/precision_auto.h"

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
            "predictor's to OUT/finetune_result.json and the last line of stdout.\n"
            "\n"
            "  key.path=value   override a config value, e.g. task.epochs=2 optim.lr=2e-5\n"
            "  --dry-run        print the resolved config as YAML and exit\n"
            "  --resume WHAT    auto (default: the newest valid checkpoint in train.out_dir),\n"
            "                   none, or a checkpoint / run directory\n"
            "  --stop-after N   stop after step N with a checkpoint (resume with the same command)\n"
            "\n"
            "Under mpirun every rank runs this command (data-parallel).  SIGTERM/SIGINT/SIGHUP\n"
            "checkpoint at the next step and exit with 128+signal.  One run per train.out_dir.\n"
            "Exit status: 0 finished, 1 runtime failure, 2 bad input, 128+N stopped by signal N.\n"
            "  -h, --help       this help\n");
}

int cmd_finetune(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    CliConfigArgs args = {0};
    int dry_run = 0;
    FinetuneOptions opt = {.resume = "auto", .stop_after = 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) {
            dry_run = 1;
        } else if (strcmp(argv[i], "--resume") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0])
                mhe_fail("finetune: --resume expects auto, none or a checkpoint path%s", i + 1 < argc ? ", got ''" : "");
            opt.resume = argv[++i];
        } else if (strcmp(argv[i], "--stop-after") == 0) {
            if (i + 1 >= argc) mhe_fail("finetune: --stop-after needs a value");
            opt.stop_after = cli_int_option("finetune", "--stop-after", argv[++i], 1, INT64_MAX);
        } else {
            cli_take_config_arg(&args, "finetune", argv[i], usage);
        }
    }
    cli_require_config(&args, "finetune", usage);
    Config cfg;
    if (dry_run) {
        config_load(&cfg, args.path, args.n_overrides, args.overrides);
        config_write_yaml(&cfg, stdout);
        config_free(&cfg);
        return 0;
    }
    Comm *comm = comm_init(&argc, &argv, 0.0f);
    config_load(&cfg, args.path, args.n_overrides, args.overrides);
    if (cfg.task.type == TASK_NONE)
        mhe_fail("%s: finetune needs a task: section with task.type classification, regression or span", args.path);
    comm_set_timeout(comm, cfg.dist.timeout_s);
    precision_resolve(&cfg, comm, cli_resume_from(opt.resume, cfg.train.out_dir));
    int status = finetune_run(&cfg, comm, &opt);
    config_free(&cfg);
    comm_finalize(comm);
    return status;
}
