// gqa: per-head Q_i; g = attention.groups K/V heads, each shared by n/g query heads.
#include "trainer/model/model_internal.h"

enum { WQ = 0, WK = 2, WV = 4 };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, d = c->model.head_dim, g = c->attention.groups;
    int k = attn_linear(t, 0, "q.weight", "q.bias", c->model.heads * d, D);
    k = attn_linear(t, k, "k.weight", "k.bias", g * d, D);
    return attn_linear(t, k, "v.weight", "v.bias", g * d, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = c->model.heads * c->model.head_dim;
    p.kc = p.vc = c->attention.groups * c->model.head_dim;
    p.k_heads = p.v_heads = c->attention.groups;
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l, WQ, WK, WV); }
static void backward(Model *m, int l, float *d_ain) { attn_project_backward(m, l, WQ, WK, WV, d_ain); }

static void export_keys(const Config *c, void (*put)(void *, const char *, double), void *ctx) {
    put(ctx, "kv_groups", c->attention.groups);
}

const AttnVariant attn_gqa = {"gqa", tensors, plan, forward, backward, export_keys};
