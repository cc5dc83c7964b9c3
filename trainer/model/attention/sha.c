// sha: one shared head Q, K, V = X W (W ∈ R^{D×d}); all n heads identical (DESIGN.md §1).
#include "trainer/model/model_internal.h"

enum { WQ = 0, WK = 2, WV = 4 };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, d = c->model.head_dim;
    int k = attn_linear(t, 0, "q.weight", "q.bias", d, D);
    k = attn_linear(t, k, "k.weight", "k.bias", d, D);
    return attn_linear(t, k, "v.weight", "v.bias", d, D);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = p.vc = c->model.head_dim;
    p.q_heads = p.k_heads = p.v_heads = 1;
    return p;
}

static void forward(Model *m, int l) { attn_project(m, l, WQ, WK, WV); }
static void backward(Model *m, int l, float *d_ain) { attn_project_backward(m, l, WQ, WK, WV, d_ain); }

const AttnVariant attn_sha = {"sha", tensors, plan, forward, backward, NULL};
