// mqa: per-head Q_i; one K and one V head shared by all (W_K, W_V ∈ R^{D×d}).
#include "trainer/model/model_internal.h"

enum { WQ, WK, WV, BQ, BK, BV };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, d = c->model.head_dim, nd = c->model.heads * d;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", nd), ATTN_LINEAR("k", d), ATTN_LINEAR("v", d)};
    return attn_qkv_tensors(t, 0, s, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = c->model.heads * c->model.head_dim;
    p.kc = p.vc = c->model.head_dim;
    p.k_heads = p.v_heads = 1;
    attn_set_proj(&p, WQ, WK, WV, BQ, BK, BV);
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l); }
static void backward(Model *m, int l, Act *d_ain, int acc) { attn_project_backward(m, l, d_ain, acc); }

const AttnVariant attn_mqa = {"mqa", tensors, plan, forward, backward, NULL, NULL};
