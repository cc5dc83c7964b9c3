// mha: multi-head attention, per-head Q_i, K_i, V_i = X W^(i) (DESIGN.md §1).
#include "trainer/model/model_internal.h"

enum { WQ, WK, WV, BQ, BK, BV };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", nd), ATTN_LINEAR("k", nd), ATTN_LINEAR("v", nd)};
    return attn_qkv_tensors(t, 0, s, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = p.vc = c->model.heads * c->model.head_dim;
    attn_set_proj(&p, WQ, WK, WV, BQ, BK, BV);
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l); }
static void backward(Model *m, int l, Act *d_ain, int acc) { attn_project_backward(m, l, d_ain, acc); }

const AttnVariant attn_mha = {"mha", tensors, plan, forward, backward, NULL, NULL};
