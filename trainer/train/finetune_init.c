// train.init_from for fine-tuning: a pretraining checkpoint's weights copied into a task model
// by parameter name.  Every encoder tensor (embeddings, layers, final LayerNorm) must be present
// with the same shape; the pretraining head (head.*) and any other tensor the task model lacks
// are ignored; the task head (task.*) keeps its seeded initialisation.
#include "trainer/train/finetune_init.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/safetensors.h"

static void shape_text(char *buf, size_t n, int ndim, const int64_t *shape) {
    if (ndim == 1) snprintf(buf, n, "[%lld]", (long long)shape[0]);
    else snprintf(buf, n, "[%lld, %lld]", (long long)shape[0], (long long)shape[1]);
}

int finetune_load_encoder(const char *path, const ParamTable *t, float *params, char *dir_out, size_t dir_len) {
    char *dir = checkpoint_resolve(path);
    char why[1024];
    if (checkpoint_validate(dir, why, sizeof why) != 0) mhe_fail("%s: not a valid checkpoint: %s", dir, why);
    char file[4200];
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    StFile st;
    st_read(&st, file);
    int copied = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        if (strncmp(p->name, "task.", 5) == 0) continue;  // the new head: seeded, not loaded
        const StTensor *s = st_find(&st, p->name);
        if (!s)
            mhe_fail("%s: no tensor %s: train.init_from must be a pretraining checkpoint of the same "
                     "model (model.* and attention.* as in its config.yaml)", file, p->name);
        int64_t want[2] = {p->shape[0], p->shape[1]};
        int same = s->dtype == ST_F32 && s->ndim == p->ndim && s->shape[0] == want[0] &&
                   (p->ndim == 1 || s->shape[1] == want[1]);
        if (!same) {
            char a[64], b[64];
            shape_text(a, sizeof a, s->ndim, s->shape);
            shape_text(b, sizeof b, p->ndim, want);
            mhe_fail("%s: %s is %s %s but the fine-tuning model expects F32 %s: model.* and attention.* must "
                     "match the pretraining run", file, p->name, s->dtype == ST_F32 ? "F32" : "non-F32", a, b);
        }
        memcpy(params + p->offset, s->data, p->numel * sizeof(float));
        copied++;
    }
    int ignored = st.count - copied;
    if (dir_out) snprintf(dir_out, dir_len, "%s", dir);
    st_free(&st);
    free(dir);
    return ignored;
}
