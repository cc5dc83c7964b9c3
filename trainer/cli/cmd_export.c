// mhetrain export: a checkpoint to a Hugging Face directory (see trainer/io/export.h).
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "trainer/cli/commands.h"
#include "trainer/io/export.h"
#include "trainer/io/run_lock.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: mhetrain export CHECKPOINT --out DIR [--force] [--tokenizer PATH | --no-tokenizer]\n"
            "                       [--format auto|hf|mhetrain]\n"
            "\n"
            "Writes DIR/model.safetensors (fp32), DIR/config.json and tokenizer files (tokenizer.json,\n"
            "tokenizer_config.json, special_tokens_map.json, vocab.txt or vocab.json + merges.txt)\n"
            "that Hugging Face transformers loads with from_pretrained(DIR):\n"
            "  bert + mha (post-LN)  BertForMaskedLM   (AutoModelForMaskedLM)\n"
            "  gpt + mha (pre-LN)    GPT2LMHeadModel   (AutoModelForCausalLM)\n"
            "  anything else         model_type mhetrain with modeling_mhe.py copied into DIR:\n"
            "                        AutoModelFor{MaskedLM,CausalLM}.from_pretrained(DIR, trust_remote_code=True);\n"
            "                        AutoModel and AutoModelFor{SequenceClassification,TokenClassification,\n"
            "                        QuestionAnswering} load it too\n"
            "A fine-tuned checkpoint (mhetrain finetune) exports with its head: Bert/GPT2/Mhe\n"
            "ForSequenceClassification (classification, regression) or ForQuestionAnswering (span).\n"
            "\n"
            "  CHECKPOINT        a step_* directory, or a run's output directory (its newest valid checkpoint)\n"
            "  --out DIR         export directory, written beside it and renamed into place when complete\n"
            "  --force           replace a non-empty DIR (whole; a failed export leaves it untouched)\n"
            "  --tokenizer PATH  tokenizer file or folder instead of the config's data.tokenizer\n"
            "  --no-tokenizer    write no tokenizer files\n"
            "  --format F        auto (default): the stock class when the model is one; hf: insist on it;\n"
            "                    mhetrain: always the shipped modeling file\n"
            "  -h, --help        this help\n");
}

int cmd_export(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return 0;
    }
    ExportOptions opt = {0};
    const char *format = "auto";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has_value = i + 1 < argc;
        if (strcmp(a, "--out") == 0 && has_value)
            opt.out_dir = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0 && has_value)
            opt.tokenizer = argv[++i];
        else if (strcmp(a, "--force") == 0)
            opt.force = 1;
        else if (strcmp(a, "--no-tokenizer") == 0)
            opt.no_tokenizer = 1;
        else if (strcmp(a, "--format") == 0 && has_value)
            format = argv[++i];
        else if (a[0] == '-') {
            usage(stderr);
            mhe_fail("export: unknown option or missing value: %s", a);
        } else if (!opt.checkpoint)
            opt.checkpoint = a;
        else {
            usage(stderr);
            mhe_fail("export: unexpected argument %s", a);
        }
    }
    if (!opt.checkpoint || !opt.out_dir) {
        usage(stderr);
        mhe_fail("export: %s", !opt.checkpoint ? "missing the checkpoint" : "missing --out DIR");
    }
    if (opt.tokenizer && opt.no_tokenizer) mhe_fail("export: --tokenizer and --no-tokenizer exclude each other");
    if (strcmp(format, "auto") == 0)
        opt.format = EXPORT_AUTO;
    else if (strcmp(format, "mhetrain") == 0)
        opt.format = EXPORT_MHETRAIN;
    else if (strcmp(format, "hf") == 0)
        opt.format = EXPORT_HF;
    else
        mhe_fail("export: --format must be auto, hf or mhetrain, got %s", format);
    int lock = run_lock_read(opt.checkpoint, "export");
    export_run(&opt);
    run_lock_release(lock);
    return 0;
}
