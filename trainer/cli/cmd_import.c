// mhetrain import: a Hugging Face BERT / GPT-2 folder to a run directory (trainer/io/import.h).
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "trainer/cli/commands.h"
#include "trainer/io/import.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain import HF_DIR --out RUN_DIR [--force]\n"
            "\n"
            "Reads a Hugging Face folder (config.json, model.safetensors or model.safetensors.index.json\n"
            "with its shards, tokenizer files) holding BertForMaskedLM, BertModel, GPT2LMHeadModel or\n"
            "GPT2Model and writes RUN_DIR/checkpoints/step_00000000 (weights, bit for bit), RUN_DIR/config.yaml\n"
            "and RUN_DIR/tokenizer/.  The checkpoint works with eval, export, params and train.init_from.\n"
            "A pickled pytorch_model.bin is refused (save with safetensors first).\n"
            "\n"
            "  --out RUN_DIR   the run directory to create, written beside it and renamed into place\n"
            "  --force         replace a non-empty RUN_DIR (whole; a failed import leaves it untouched)\n"
            "  -h, --help      this help\n");
}

int cmd_import(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    ImportOptions opt = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            opt.out_dir = argv[++i];
        else if (strcmp(argv[i], "--force") == 0)
            opt.force = 1;
        else if (argv[i][0] == '-') {
            usage(stderr);
            mhe_fail("import: unknown option or missing value: %s", argv[i]);
        } else if (!opt.hf_dir)
            opt.hf_dir = argv[i];
        else {
            usage(stderr);
            mhe_fail("import: unexpected argument %s", argv[i]);
        }
    }
    if (!opt.hf_dir || !opt.out_dir) {
        usage(stderr);
        mhe_fail("import: %s", !opt.hf_dir ? "missing HF_DIR" : "missing --out RUN_DIR");
    }
    import_run(&opt);
    return 0;
}
