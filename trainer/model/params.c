#include "trainer/model/params.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fnv1a.h"
#include "common/rng.h"
#include "trainer/model/attention/variant.h"

static void add(ParamTable *t, ParamKind kind, int layer, int in_attn, int rows, int cols,
                const char *fmt, ...) {
    if (t->count == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->tensors = mhe_realloc(t->tensors, (size_t)t->cap * sizeof *t->tensors);
    }
    ParamTensor *p = &t->tensors[t->count++];
    memset(p, 0, sizeof *p);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = cols > 0 ? 2 : 1;
    p->shape[0] = rows;
    p->shape[1] = cols > 0 ? cols : 0;
    p->numel = (size_t)rows * (size_t)(cols > 0 ? cols : 1);
    p->offset = t->total;
    p->kind = kind;
    p->layer = layer;
    p->in_attention = in_attn;
    t->total += p->numel;
}

// A Linear layer [out, in] with its bias, named "<prefix>.weight" / "<prefix>.bias".
static void linear(ParamTable *t, int layer, int in_attn, int out, int in, const char *prefix) {
    add(t, PARAM_WEIGHT, layer, in_attn, out, in, "%s.weight", prefix);
    add(t, PARAM_BIAS, layer, in_attn, out, 0, "%s.bias", prefix);
}

static void layernorm(ParamTable *t, int layer, int dim, const char *prefix) {
    add(t, PARAM_NORM, layer, 0, dim, 0, "%s.weight", prefix);
    add(t, PARAM_NORM, layer, 0, dim, 0, "%s.bias", prefix);
}

// The layer's attention tensors: the variant's own (trainer/model/attention/), then `o`.
static void attention(ParamTable *t, const Config *cfg, int l) {
    const int D = cfg->model.hidden, nd = cfg->model.heads * cfg->model.head_dim;
    AttnTensor at[ATTN_MAX_TENSORS];
    const int count = attn_variant(cfg->attention.type)->tensors(cfg, at);
    for (int i = 0; i < count; i++) {
        add(t, at[i].kind, l, 1, at[i].rows, at[i].cols, "layers.%d.attn.%s", l, at[i].name);
        t->tensors[t->count - 1].init_center = at[i].init_center;
    }
    char p[PARAM_NAME_MAX];
    snprintf(p, sizeof p, "layers.%d.attn.o", l);
    linear(t, l, 1, D, nd, p);
}

int param_task_outputs(const Config *cfg) {
    switch (cfg->task.type) {
    case TASK_CLASSIFICATION:
        if (cfg->task.num_labels < 1) mhe_fatal("internal error: task.num_labels %d not resolved", cfg->task.num_labels);
        return cfg->task.num_labels;
    case TASK_REGRESSION: return 1;
    case TASK_SPAN: return 2;
    default: return 0;
    }
}

void param_table_build(ParamTable *t, const Config *cfg) {
    memset(t, 0, sizeof *t);
    const ModelConfig *m = &cfg->model;
    const int D = m->hidden, V = m->vocab_size;
    add(t, PARAM_EMBEDDING, -1, 0, V, D, "embed.word");
    add(t, PARAM_EMBEDDING, -1, 0, m->max_seq, D, "embed.pos");
    if (m->arch == ARCH_BERT) {
        add(t, PARAM_EMBEDDING, -1, 0, m->type_vocab, D, "embed.type");
        layernorm(t, -1, D, "embed.ln");
    }
    char p[PARAM_NAME_MAX];
    for (int l = 0; l < m->layers; l++) {
        attention(t, cfg, l);
        snprintf(p, sizeof p, "layers.%d.ln1", l);
        layernorm(t, l, D, p);
        snprintf(p, sizeof p, "layers.%d.ffn.up", l);
        linear(t, l, 0, m->ffn, D, p);
        snprintf(p, sizeof p, "layers.%d.ffn.down", l);
        linear(t, l, 0, D, m->ffn, p);
        snprintf(p, sizeof p, "layers.%d.ln2", l);
        layernorm(t, l, D, p);
    }
    if (m->norm == NORM_PRE) layernorm(t, -1, D, "final_ln");
    if (cfg->task.type != TASK_NONE) {
        // A fine-tuning model (issue 14): the task head replaces the MLM/LM head.
        if (cfg->task.type == TASK_SPAN) {
            linear(t, -1, 0, 2, D, "task.qa");
        } else if (m->arch == ARCH_BERT) {
            linear(t, -1, 0, D, D, "task.pooler");
            linear(t, -1, 0, param_task_outputs(cfg), D, "task.classifier");
        } else {
            // GPT-2's `score`: no pooler, no bias.
            add(t, PARAM_WEIGHT, -1, 0, param_task_outputs(cfg), D, "task.classifier.weight");
        }
        return;
    }
    if (m->arch == ARCH_BERT) {
        linear(t, -1, 0, D, D, "head.dense");
        layernorm(t, -1, D, "head.ln");
        add(t, PARAM_BIAS, -1, 0, V, 0, "head.bias");
    }
}

void param_table_free(ParamTable *t) {
    free(t->tensors);
    memset(t, 0, sizeof *t);
}

const ParamTensor *param_table_find(const ParamTable *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->tensors[i].name, name) == 0) return &t->tensors[i];
    return NULL;
}

size_t param_offset(const ParamTable *t, const char *name) {
    const ParamTensor *p = param_table_find(t, name);
    if (!p) mhe_fatal("internal error: no parameter named %s", name);
    return p->offset;
}

size_t param_attention_weights(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->tensors[i].in_attention && t->tensors[i].kind != PARAM_BIAS) n += t->tensors[i].numel;
    return n;
}

size_t param_attention_weights_per_layer(const ParamTable *t) {
    size_t n = 0;
    for (int i = 0; i < t->count; i++)
        if (t->tensors[i].in_attention && t->tensors[i].layer == 0 &&
            t->tensors[i].kind != PARAM_BIAS)
            n += t->tensors[i].numel;
    return n;
}

static int is_residual_projection(const char *name) {
    size_t n = strlen(name);
    return (n > 14 && strcmp(name + n - 14, ".attn.o.weight") == 0) ||
           (n > 16 && strcmp(name + n - 16, ".ffn.down.weight") == 0);
}

uint64_t param_layout_fingerprint(const ParamTable *t) {
    uint64_t h = FNV1A_BASIS;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        const int64_t fields[4] = {p->ndim, p->shape[0], p->shape[1], (int64_t)p->offset};
        h = fnv1a(h, p->name, strlen(p->name) + 1);
        h = fnv1a(h, fields, sizeof fields);
    }
    return h;
}

void param_init(const ParamTable *t, const Config *cfg, float *params, uint64_t seed) {
    const double std = cfg->model.init_std;
    // GPT-2 scales the projections that write into the residual stream by 1/sqrt(2L).
    const double resid_std = cfg->model.arch == ARCH_GPT ? std / sqrt(2.0 * cfg->model.layers) : std;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        float *w = params + p->offset;
        // One stream per tensor, keyed by its name: adding or reordering tensors (e.g. the
        // attention projections' weights laid out as one block) changes no other tensor's values.
        Rng r = rng_stream(seed, 0x1417, fnv1a(FNV1A_BASIS, p->name, strlen(p->name)));
        int is_gain = p->kind == PARAM_NORM && strstr(p->name, ".weight") != NULL;
        for (size_t j = 0; j < p->numel; j++) {
            switch (p->kind) {
            case PARAM_BIAS: w[j] = 0.0f; break;
            case PARAM_NORM: w[j] = is_gain ? 1.0f : 0.0f; break;
            case PARAM_HEAD_EMBED:
                // Centred where the variant says (collab's mixing vectors at 1: every head
                // starts seeing the full shared space; MHE's embeddings at 0).
                w[j] = (float)((double)p->init_center + cfg->attention.embed_std * rng_next_normal(&r));
                break;
            default:
                w[j] = (float)((is_residual_projection(p->name) ? resid_std : std) * rng_next_normal(&r));
            }
        }
    }
}
