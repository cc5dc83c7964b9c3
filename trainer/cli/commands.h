// The subcommands of the mhetrain executable; each lives in its own cmd_*.c file and returns
// the process exit status.  argv[0] is the subcommand name.
#ifndef MHE_TRAINER_COMMANDS_H
#define MHE_TRAINER_COMMANDS_H

#include <stdio.h>

#include "trainer/train/run_engine.h"

int cmd_prepare(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_finetune(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_params(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);

// True when any argument is -h or --help.
int cli_wants_help(int argc, char **argv);

// The positional arguments shared by the commands that take an experiment: CONFIG.yaml, then
// key.path=value overrides.
#define CLI_MAX_OVERRIDES 256
typedef struct {
    const char *path;
    int n_overrides;
    char *overrides[CLI_MAX_OVERRIDES];
} CliConfigArgs;
// Takes argv[i], which the command did not recognise as one of its own options: an unknown
// --option, or one override too many, prints usage and exits 2.
void cli_take_config_arg(CliConfigArgs *a, const char *cmd, const char *arg, void (*usage)(FILE *));
// Option values, through the one number parser (common/num.h; README "Numbers"): exit 2 with
// "CMD: OPT expects an integer in [LO, HI], got "V"" (or "a number") for anything else.
long long cli_int_option(const char *cmd, const char *opt, const char *v, long long lo, long long hi);
double cli_real_option(const char *cmd, const char *opt, const char *v, double lo, double hi);
// Exits 2 (after usage) when no config file was given.
void cli_require_config(const CliConfigArgs *a, const char *cmd, void (*usage)(FILE *));
// Where --resume WHAT would start from, for runtime.precision: auto to keep the saved choice: NULL
// for "none", out_dir for "auto", else the path given.
const char *cli_resume_from(const char *resume, const char *out_dir);

// train and finetune: CONFIG.yaml, overrides, --dry-run and the run options (CLI_RUN_OPTIONS_HELP),
// then run(cfg, comm, options) under the communicator; returns its exit status.
typedef int (*CliRunFn)(const Config *cfg, Comm *comm, const RunOptions *opt);
int cli_run_command(const char *cmd, int argc, char **argv, void (*usage)(FILE *), CliRunFn run);
#define CLI_RUN_OPTIONS_HELP                                                                        \
    "  key.path=value   override a config value\n"                                                 \
    "  --dry-run        load and validate the config, print it fully resolved as YAML,\n"          \
    "                   and exit without training\n"                                               \
    "  --resume WHAT    auto (default: the newest valid checkpoint in train.out_dir, if\n"         \
    "                   any), none (start afresh), or a checkpoint / run directory\n"              \
    "  --stop-after N   stop after step N with a checkpoint (the schedule still spans\n"           \
    "                   the whole run; resume with the same command)\n"                            \
    "  --allow-config-change  resume although a key that alters the data order or the\n"           \
    "                   model changed (seed, seq_len, global_batch, lr, ...); the change is\n"     \
    "                   printed and recorded in metrics.jsonl\n"                                   \
    "  --no-overlap     all-reduce gradients only after the whole backward pass\n"                 \
    "  --inject-nonfinite N  testing: make the gradient of step N non-finite\n"                    \
    "\n"                                                                                           \
    "Under mpirun every rank runs this command.  SIGTERM/SIGINT/SIGHUP checkpoint at the\n"        \
    "next step boundary and exit with status 128+signal (143/130/129); a second signal\n"          \
    "exits at once without the checkpoint.  One run per train.out_dir (out_dir/.lock).\n"          \
    "Exit status: 0 finished, 1 runtime failure, 2 bad input, 128+N stopped by signal N.\n"        \
    "  -h, --help       this help\n"

#endif
