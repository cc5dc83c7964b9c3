// The subcommands of the mhetrain executable; each lives in its own cmd_*.c file and returns
// the process exit status.  argv[0] is the subcommand name.
#ifndef MHE_TRAINER_COMMANDS_H
#define MHE_TRAINER_COMMANDS_H

#include <stdio.h>

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

#endif
