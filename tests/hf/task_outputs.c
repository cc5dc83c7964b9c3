// hf_task_outputs CHECKPOINT BATCH OUT: mhetrain's outputs of a fine-tuning model (issue 14) on
// a batch, for tests/hf/test_task_export.py to compare with the exported model in transformers.
// CHECKPOINT is a step_* directory or a run directory (its newest checkpoint), whose config has
// a task section; BATCH a safetensors file with int32 input_ids, attention_mask [B, T],
// token_type_ids [B, T] (bert) and last [B] (gpt: each row's last real token).  Writes OUT with
// `outputs`: [B, num_labels] logits, [B] regression values or [B, T, 2] start/end logits
// (model_download_task_outputs), from model_forward_task in eval mode on the CPU backend.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/model.h"

static const int32_t *batch_tensor(const StFile *f, const char *name, int B, int T, const char *path) {
    const StTensor *x = st_find(f, name);
    if (!x) return NULL;
    const int64_t want = T > 0 ? (int64_t)B * T : B;
    if (x->dtype != ST_I32 || (x->ndim == 2 ? x->shape[0] * x->shape[1] : x->shape[0]) != want)
        mhe_fail("%s: %s must be int32 with %lld elements", path, name, (long long)want);
    return x->data;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: hf_task_outputs CHECKPOINT BATCH.safetensors OUT.safetensors\n");
        return 2;
    }
    char *dir = checkpoint_resolve(argv[1]);
    char why[4200], cfg_path[4200];
    if (checkpoint_validate(dir, why, sizeof why) != 0) mhe_fail("hf_task_outputs: %s", why);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.yaml", dir);
    Config cfg;
    config_load(&cfg, cfg_path, 0, NULL);
    if (cfg.task.type == TASK_NONE) mhe_fail("hf_task_outputs: %s has no task section", cfg_path);

    StFile in;
    st_read(&in, argv[2]);
    const StTensor *ids_t = st_find(&in, "input_ids");
    if (!ids_t || ids_t->ndim != 2) mhe_fail("%s: input_ids [B, T] expected", argv[2]);
    const int B = (int)ids_t->shape[0], T = (int)ids_t->shape[1];
    TaskBatch b = {.B = B, .T = T};
    b.ids = batch_tensor(&in, "input_ids", B, T, argv[2]);
    b.attn_mask = batch_tensor(&in, "attention_mask", B, T, argv[2]);
    b.type_ids = batch_tensor(&in, "token_type_ids", B, T, argv[2]);
    b.last = batch_tensor(&in, "last", B, 0, argv[2]);
    if (!b.attn_mask || (cfg.model.arch == ARCH_GPT && cfg.task.type != TASK_SPAN && !b.last))
        mhe_fail("%s: attention_mask (and, gpt classification, last) expected", argv[2]);

    ParamTable t;
    param_table_build(&t, &cfg);
    float *params = mhe_malloc(t.total * sizeof(float));
    checkpoint_load_weights(dir, &t, params);
    Backend *be = backend_cpu_create(2);
    Model *m = model_create(&cfg, be, B, T);
    model_set_params(m, params);
    model_forward_task(m, &b, 0);
    const size_t n = cfg.task.type == TASK_SPAN ? (size_t)B * T * 2
                     : cfg.task.type == TASK_REGRESSION ? (size_t)B : (size_t)B * cfg.task.num_labels;
    float *out = mhe_malloc(n * sizeof(float));
    model_download_task_outputs(m, out);

    StFile f;
    st_init(&f);
    int64_t shape[3] = {B, cfg.task.num_labels, 0};
    int ndim = 2;
    if (cfg.task.type == TASK_SPAN) shape[1] = T, shape[2] = 2, ndim = 3;
    if (cfg.task.type == TASK_REGRESSION) ndim = 1;
    st_add(&f, "outputs", ST_F32, ndim, shape, out);
    if (st_write(&f, argv[3]) != 0) mhe_fatal("hf_task_outputs: cannot write %s", argv[3]);
    st_free(&f);
    printf("%s: %s outputs of %d rows x %d positions\n", argv[3], cfg.task.format, B, T);
    free(out);
    model_free(m);
    be->destroy(be);
    free(params);
    param_table_free(&t);
    st_free(&in);
    config_free(&cfg);
    free(dir);
    return 0;
}
