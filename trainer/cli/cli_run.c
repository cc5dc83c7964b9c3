// The commands that drive the run engine (train, finetune): one parser for the run options, the
// dry run, the communicator and the config around the job's entry point.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/train/precision_auto.h"
#include "trainer/cli/commands.h"
#include "trainer/config/config.h"

static long long parse_count(const char *cmd, const char *opt, const char *v) {
    if (!v) mhe_fail("%s: %s needs a value", cmd, opt);
    // 0 would mean "never" to the loop (stop after step 0 cannot happen): refused, not ignored.
    return cli_int_option(cmd, opt, v, 1, INT64_MAX);
}

int cli_run_command(const char *cmd, int argc, char **argv, void (*usage)(FILE *), CliRunFn run) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    CliConfigArgs args = {0};
    int dry_run = 0;
    RunOptions opt = {.resume = "auto", .stop_after = 0, .inject_nonfinite_step = -1, .no_overlap = 0};
    for (int i = 1; i < argc; i++) {
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--dry-run") == 0) {
            dry_run = 1;
        } else if (strcmp(argv[i], "--resume") == 0) {
            if (!next || !next[0])
                mhe_fail("%s: --resume expects auto, none or a checkpoint path%s", cmd, next ? ", got ''" : "");
            opt.resume = argv[++i];
        } else if (strcmp(argv[i], "--stop-after") == 0) {
            opt.stop_after = parse_count(cmd, "--stop-after", next);
            i += next != NULL;
        } else if (strcmp(argv[i], "--inject-nonfinite") == 0) {
            opt.inject_nonfinite_step = parse_count(cmd, "--inject-nonfinite", next) - 1;
            i += next != NULL;
        } else if (strcmp(argv[i], "--allow-config-change") == 0) {
            opt.allow_config_change = 1;
        } else if (strcmp(argv[i], "--no-overlap") == 0) {
            opt.no_overlap = 1;
        } else {
            cli_take_config_arg(&args, cmd, argv[i], usage);
        }
    }
    cli_require_config(&args, cmd, usage);
    Config cfg;
    if (dry_run) {
        config_load(&cfg, args.path, args.n_overrides, args.overrides);
        config_write_yaml(&cfg, stdout);
        config_free(&cfg);
        return 0;
    }
    Comm *comm = comm_init(&argc, &argv, 0.0f);
    config_load(&cfg, args.path, args.n_overrides, args.overrides);
    comm_set_timeout(comm, cfg.dist.timeout_s);
    precision_resolve(&cfg, comm, cli_resume_from(opt.resume, cfg.train.out_dir));
    int status = run(&cfg, comm, &opt);
    config_free(&cfg);
    comm_finalize(comm);
    return status;
}
