// skv: per-head Q_i; one projection serves as both key and value: K_i = V_i = X W_KV^(i).
#include "trainer/model/model_internal.h"

enum { WQ = 0, WKV = 2 };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    int k = attn_linear(t, 0, "q.weight", "q.bias", nd, D);
    return attn_linear(t, k, "kv.weight", "kv.bias", nd, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = c->model.heads * c->model.head_dim;
    p.v_src = ATTN_SRC_K;
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l, WQ, WKV, -1); }

static void backward(Model *m, int l, float *d_ain) {
    m->be->add(m->be, m->dk, m->dv, m->dk, (size_t)m->B * m->T * m->plan.kc);  // K and V are one
    attn_project_backward(m, l, WQ, WKV, -1, d_ain);
}

const AttnVariant attn_skv = {"skv", tensors, plan, forward, backward, NULL};
