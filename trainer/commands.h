// The subcommands of the mhetrain executable; each lives in its own cmd_*.c file and returns
// the process exit status.  argv[0] is the subcommand name.
#ifndef MHE_TRAINER_COMMANDS_H
#define MHE_TRAINER_COMMANDS_H

int cmd_prepare(int argc, char **argv);
int cmd_tokenizer(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_params(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_info(int argc, char **argv);

// True when any argument is -h or --help.
int cli_wants_help(int argc, char **argv);

#endif
