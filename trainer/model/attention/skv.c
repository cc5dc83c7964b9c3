// skv: per-head Q_i; one projection serves as both key and value: K_i = V_i = X W_KV^(i).
#include "trainer/model/model_internal.h"

// Not fused into one GEMM (attn_qkv_fusable: V is K's buffer), laid out like the others anyway.
enum { WQ, WKV, BQ, BKV };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", nd), ATTN_LINEAR("kv", nd), ATTN_NO_LINEAR};
    return attn_qkv_tensors(t, 0, s, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = c->model.heads * c->model.head_dim;
    p.v_src = ATTN_SRC_K;
    attn_set_proj(&p, WQ, WKV, -1, BQ, BKV, -1);
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l); }

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    m->be->add(m->be, m->dk, m->dv, m->dk, (size_t)m->B * m->T * m->plan.kc);  // K and V are one
    attn_project_backward(m, l, d_ain, accumulate);
}

const AttnVariant attn_skv = {"skv", tensors, plan, forward, backward, NULL, NULL};
