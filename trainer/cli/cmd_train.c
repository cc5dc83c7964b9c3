// mhetrain train: train a model.
#include <stdio.h>
#include <string.h>

#include <stdlib.h>

#include "comm/comm.h"
#include "common/error.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"
#include "trainer/train/precision_auto.h"
#include "trainer/train/trainer.h"

static long long parse_count(const char *opt, const char *v) {
    if (!v) mhe_fail("train: %s needs a value", opt);
    // 0 would mean "never" to the loop (stop after step 0 cannot happen): refused, not ignored.
    return cli_int_option("train", opt, v, 1, INT64_MAX);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain train CONFIG.yaml [key.path=value ...] [--dry-run]\n"
            "\n"
            "Trains the model an experiment file describes (configs/README.md lists every key).\n"
            "\n"
            "  key.path=value   override a config value, e.g. train.steps=50 optim.lr=3e-4\n"
            "  --dry-run        load and validate the config, print it fully resolved as YAML,\n"
            "                   and exit without training\n"
            "  --resume WHAT    auto (default: the newest valid checkpoint in train.out_dir, if\n"
            "                   any), none (start afresh), or a checkpoint / run directory\n"
            "  --stop-after N   stop after step N with a checkpoint (the schedule still spans\n"
            "                   the whole run; resume with the same command)\n"
            "  --allow-config-change  resume although a key that alters the data order or the\n"
            "                   model changed (seed, seq_len, global_batch, lr, ...); the change is\n"
            "                   printed and recorded in metrics.jsonl\n"
            "  --no-overlap     all-reduce gradients only after the whole backward pass\n"
            "  --inject-nonfinite N  testing: make the gradient of step N non-finite\n"
            "\n"
            "Under mpirun every rank runs this command.  SIGTERM/SIGINT/SIGHUP checkpoint at the\n"
            "next step boundary and exit with status 128+signal (143/130/129); a second signal\n"
            "exits at once without the checkpoint.  One trainer per train.out_dir (out_dir/.lock).\n"
            "Exit status: 0 finished, 1 runtime failure, 2 bad input, 128+N stopped by signal N.\n"
            "  -h, --help       this help\n");
}

int cmd_train(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    CliConfigArgs args = {0};
    int dry_run = 0;
    TrainOptions opt = {.resume = "auto", .stop_after = 0, .inject_nonfinite_step = -1, .no_overlap = 0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dry-run") == 0) {
            dry_run = 1;
        } else if (strcmp(argv[i], "--resume") == 0) {
            if (i + 1 >= argc || !argv[i + 1][0])
                mhe_fail("train: --resume expects auto, none or a checkpoint path%s", i + 1 < argc ? ", got ''" : "");
            opt.resume = argv[++i];
        } else if (strcmp(argv[i], "--stop-after") == 0) {
            opt.stop_after = parse_count("--stop-after", i + 1 < argc ? argv[++i] : NULL);
        } else if (strcmp(argv[i], "--inject-nonfinite") == 0) {
            opt.inject_nonfinite_step = parse_count("--inject-nonfinite", i + 1 < argc ? argv[++i] : NULL) - 1;
        } else if (strcmp(argv[i], "--allow-config-change") == 0) {
            opt.allow_config_change = 1;
        } else if (strcmp(argv[i], "--no-overlap") == 0) {
            opt.no_overlap = 1;
        } else {
            cli_take_config_arg(&args, "train", argv[i], usage);
        }
    }
    cli_require_config(&args, "train", usage);
    const char *path = args.path;
    if (dry_run) {
        Config cfg;
        config_load(&cfg, path, args.n_overrides, args.overrides);
        config_write_yaml(&cfg, stdout);
        config_free(&cfg);
        return 0;
    }
    Comm *comm = comm_init(&argc, &argv, 0.0f);
    Config cfg;
    config_load(&cfg, path, args.n_overrides, args.overrides);
    comm_set_timeout(comm, cfg.dist.timeout_s);
    precision_resolve(&cfg, comm, cli_resume_from(opt.resume, cfg.train.out_dir));
    int status = trainer_run(&cfg, comm, &opt);
    config_free(&cfg);
    comm_finalize(comm);
    return status;
}
