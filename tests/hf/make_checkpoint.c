// hf_make_checkpoint ARCH TYPE RUN_DIR SEED WEIGHTS [TASK]: a run directory with one checkpoint of a small
// model (2 layers, D = 64, 4 heads, the real bert-base-uncased / GPT-2 vocabularies, 64 positions,
// the type's keys at the registry's test values, collab_dim 48), for the Python tests of this
// folder to `mhetrain export` and load with transformers.
//   WEIGHTS random: every tensor random and non-trivial (biases, LayerNorms, head embeddings
//                   included, as tests/export does), so a misplaced tensor changes the outputs;
//   WEIGHTS init:   param_init (N(0, 0.02)), what training starts from.
//   TASK (default none): classification (format mnli: 3 labels, pairs), regression (stsb),
//   span (squad2) or single (sst2: 2 labels, single sentences) gives the model the fine-tuning head of issue 14 (task.* tensors) instead of the
//   LM head, as `mhetrain finetune` saves it; the task files are named, never read.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "tests/common/test_util.h"
#include "trainer/io/checkpoint.h"
#include "trainer/model/params.h"

int main(int argc, char **argv) {
    // TaskType's order (config.h), then "single": a single-text classification format.
    static const char *tasks[][2] = {{"none", NULL},         {"classification", "mnli"}, {"regression", "stsb"},
                                     {"span", "squad2"}, {"single", "sst2"}};
    int task = argc == 7 ? -1 : 0;
    for (int i = 0; argc == 7 && i < 5; i++)
        if (strcmp(argv[6], tasks[i][0]) == 0) task = i;
    if ((argc != 6 && argc != 7) || (strcmp(argv[5], "random") != 0 && strcmp(argv[5], "init") != 0) || task < 0) {
        fprintf(stderr, "usage: hf_make_checkpoint bert|gpt ATTENTION_TYPE RUN_DIR SEED random|init "
                        "[none|classification|regression|span|single]\n");
        return 2;
    }
    const Arch arch = strcmp(argv[1], "gpt") == 0 ? ARCH_GPT : ARCH_BERT;
    int type = -1;
    for (int t = 0; t < ATTN_TYPE_COUNT; t++)
        if (strcmp(argv[2], attention_type_name((AttentionType)t)) == 0) type = t;
    if (type < 0) {
        fprintf(stderr, "hf_make_checkpoint: unknown attention type %s\n", argv[2]);
        return 2;
    }
    const uint64_t seed = strtoull(argv[4], NULL, 10);
    Config cfg;
    const int vocab = arch == ARCH_BERT ? 30522 : 50257;
    tiny_config(&cfg, arch, (AttentionType)type, (TinyShape){2, 64, 4, 0, 0, vocab, 64, 0.02f});
    cfg.attention.collab_dim = type == ATTN_COLLAB ? 48 : 0;
    const char *src = getenv("MHE_SOURCE_DIR") ? getenv("MHE_SOURCE_DIR") : ".";
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/../shared/data/tokenizers/%s", src,
             arch == ARCH_BERT ? "bert-base-uncased-vocab.txt" : "gpt2-vocab.json");
    free(cfg.data.tokenizer);
    cfg.data.tokenizer = mhe_strdup(tok);
    cfg.data.seq_len = 64;
    cfg.model.dropout = cfg.model.attn_dropout = 0.1f;
    cfg.task.type = task == 4 ? TASK_CLASSIFICATION : (TaskType)task;
    if (task) {
        free(cfg.task.format), free(cfg.task.train_file), free(cfg.task.dev_file);
        cfg.task.format = mhe_strdup(tasks[task][1]);
        cfg.task.train_file = mhe_strdup("never-read-train");
        cfg.task.dev_file = mhe_strdup("never-read-dev");
        if (task == TASK_SPAN) cfg.task.max_query_len = 24;  // leaves the 64 positions room for a context
    }
    config_resolve(&cfg, "hf_make_checkpoint");

    ParamTable t;
    param_table_build(&t, &cfg);
    float *params = mhe_malloc(t.total * sizeof(float));
    if (strcmp(argv[5], "random") == 0)
        test_fill_params(&t, params, seed, 0xF7);
    else
        param_init(&t, &cfg, params, seed);
    char *yaml = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&yaml, &len);
    config_write_yaml(&cfg, f);
    fclose(f);
    CheckpointState st = {.step = 1, .world_size = 1, .loss_scale = 1.0, .config_yaml = yaml};
    if (checkpoint_save(argv[3], &st, &t, params, NULL, 0) != 0) mhe_fatal("hf_make_checkpoint: cannot save %s", argv[3]);
    printf("%s: %s %s%s%s, %zu parameters\n", argv[3], argv[1], argv[2], task ? " + " : "", task ? argv[6] : "",
           t.total);
    free(yaml);
    free(params);
    param_table_free(&t);
    config_free(&cfg);
    return 0;
}
