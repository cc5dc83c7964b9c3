// mhetrain: one executable, git-style subcommands.
#include <stdio.h>
#include <string.h>

#include "trainer/cli/commands.h"

typedef struct {
    const char *name;
    int (*run)(int, char **);
    const char *summary;
} Command;

static const Command COMMANDS[] = {
    {"prepare", cmd_prepare, "tokenize corpora into Megatron-format shards"},
    {"tokenizer", cmd_tokenizer, "train a WordPiece or BPE tokenizer on a corpus"},
    {"train", cmd_train, "train a model from a YAML experiment"},
    {"finetune", cmd_finetune, "fine-tune a model on a classification, regression or span task"},
    {"eval", cmd_eval, "evaluate a checkpoint on the validation split"},
    {"params", cmd_params, "print the parameter table and counts of a config"},
    {"export", cmd_export, "export a checkpoint to safetensors + Hugging Face config"},
    {"import", cmd_import, "import a Hugging Face BERT / GPT-2 folder as a run directory"},
    {"convert", cmd_convert, "re-parametrize a checkpoint's attention (collab, gqa, mqa)"},
    {"bench", cmd_bench, "time training steps and report tokens/s and MFU"},
    {"info", cmd_info, "print version, backends and libraries"},
};
#define N_COMMANDS (int)(sizeof COMMANDS / sizeof *COMMANDS)

static void usage(FILE *out) {
    fprintf(out, "usage: mhetrain <command> [args] (mhetrain <command> --help for details)\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(out, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) return cmd_info(argc - 1, argv + 1);
    for (int i = 0; i < N_COMMANDS; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "mhetrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
