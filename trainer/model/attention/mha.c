// mha: multi-head attention, per-head Q_i, K_i, V_i = X W^(i) (DESIGN.md §1).
#include "trainer/model/model_internal.h"

enum { WQ = 0, WK = 2, WV = 4 };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    int k = attn_linear(t, 0, "q.weight", "q.bias", nd, D);
    k = attn_linear(t, k, "k.weight", "k.bias", nd, D);
    return attn_linear(t, k, "v.weight", "v.bias", nd, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = p.vc = c->model.heads * c->model.head_dim;
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l, WQ, WK, WV); }
static void backward(Model *m, int l, float *d_ain) { attn_project_backward(m, l, WQ, WK, WV, d_ain); }

const AttnVariant attn_mha = {"mha", tensors, plan, forward, backward, NULL};
