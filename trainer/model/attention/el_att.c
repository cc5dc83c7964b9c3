// el_att: per-head Q_i; no K/V projections: K_i = V_i = X[:, i·d:(i+1)·d] (needs nd = D).
#include "trainer/model/model_internal.h"

enum { WQ, BQ };

static int tensors(const Config *c, AttnTensor *t) {
    return attn_linear(t, 0, "q.weight", "q.bias", c->model.heads * c->model.head_dim, c->model.hidden);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = c->model.heads * c->model.head_dim;
    p.k_src = p.v_src = ATTN_SRC_INPUT;
    attn_set_proj(&p, WQ, -1, -1, BQ, -1, -1);
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l); }

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    // The core wrote dK, dV in the input's [N, D] layout: both flow straight into it, after
    // the projection's term (which writes d_ain first).
    const size_t ND = (size_t)m->B * m->T * m->cfg.model.hidden;
    attn_project_backward(m, l, d_ain, accumulate);
    m->be->add(m->be, d_ain, m->dk, d_ain, ND);
    m->be->add(m->be, d_ain, m->dv, d_ain, ND);
}

const AttnVariant attn_el_att = {"el_att", tensors, plan, forward, backward, NULL, NULL};
