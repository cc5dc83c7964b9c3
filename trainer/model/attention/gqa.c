// gqa: per-head Q_i; g = attention.groups K/V heads, each shared by n/g query heads.
#include "trainer/model/model_internal.h"

enum { WQ, WK, WV, BQ, BK, BV };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, d = c->model.head_dim, g = c->attention.groups;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", c->model.heads * d), ATTN_LINEAR("k", g * d), ATTN_LINEAR("v", g * d)};
    return attn_qkv_tensors(t, 0, s, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = c->model.heads * c->model.head_dim;
    p.kc = p.vc = c->attention.groups * c->model.head_dim;
    p.k_heads = p.v_heads = c->attention.groups;
    attn_set_proj(&p, WQ, WK, WV, BQ, BK, BV);
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l); }
static void backward(Model *m, int l, Act *d_ain, int acc) { attn_project_backward(m, l, d_ain, acc); }

static void export_keys(const Config *c, void (*put)(void *, const char *, double), void *ctx) {
    put(ctx, "kv_groups", c->attention.groups);
}

const AttnVariant attn_gqa = {"gqa", tensors, plan, forward, backward, export_keys, NULL};
