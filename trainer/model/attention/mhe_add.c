// mhe_add: shared Q, K, V; Q_i = Q + 1·e_i^Qᵀ, K_i = K + 1·e_i^Kᵀ, V_i = V + 1·e_i^Vᵀ.
// Fast path (DESIGN.md §1): score_i = (q·k + e_i^Q·k)/√d, head_i = A_i V + e_i^V, so the core
// runs one shared head with a per-head key bias and output shift; e^K gets no gradient.  Where
// the backend's faster core takes no key bias (cuDNN), the same scores come from per-head
// queries q + e_i^Q over the shared K and V (AttnPlan.key_bias_as_q).
#include <math.h>

#include "trainer/model/attention/mhe_common.h"

static AttnPlan plan(const Config *c, int fast) {
    const int n = c->model.heads, d = c->model.head_dim;
    AttnPlan p = mhe_plan_base(c);
    if (fast) {
        p.q_heads = p.k_heads = p.v_heads = 1;
        p.key_bias = p.out_shift = 1;
        p.key_bias_as_q = 1;
        p.key_bias_q_tensor = MHE_EQ;
        p.out_tensor = MHE_EV;
    } else {
        p.qhc = p.khc = p.vhc = n * d;
    }
    return p;
}

static void forward(Model *m, int l) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, n = m->cfg.model.heads, d = m->cfg.model.head_dim;
    const int ldq = LDQ(m), ldk = LDK(m), ldv = LDV(m);  // column slices when fused
    attn_project(m, l);
    if (m->fast_path && m->plan.key_bias) {
        // kbias[r, h] = scale * k_r · e_h^Q
        const float scale = (float)(1.0 / sqrt((double)d));
        be->matmul(be, 0, 1, N, n, d, scale, mat_act(a->k, ldk), mat_f32(AP(m, l, MHE_EQ), d), 0.0f, out_act(a->kbias, n));
    } else if (m->fast_path) {
        // the same scores as per-head queries q + e^Q over the shared K (attn_plan_on)
        be->head_expand(be, a->q, ldq, NULL, AP(m, l, MHE_EQ), N, n, d, a->qh);
    } else {
        be->head_expand(be, a->q, ldq, NULL, AP(m, l, MHE_EQ), N, n, d, a->qh);
        be->head_expand(be, a->k, ldk, NULL, AP(m, l, MHE_EK), N, n, d, a->kh);
        be->head_expand(be, a->v, ldv, NULL, AP(m, l, MHE_EV), N, n, d, a->vh);
    }
}

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, n = m->cfg.model.heads, d = m->cfg.model.head_dim;
    const int ldq = LDQ(m), ldk = LDK(m), ldv = LDV(m);
    if (m->fast_path && !m->plan.key_bias) {
        be->head_expand_backward(be, m->dqh, a->q, ldq, NULL, N, n, d, m->dq, 0, NULL, AG(m, l, MHE_EQ));
    } else if (m->fast_path) {
        // kbias = scale k e^Qᵀ: dk += scale dkbias e^Q; de^Q += scale dkbiasᵀ k.  e^K: none.
        const float scale = (float)(1.0 / sqrt((double)d));
        be->matmul(be, 0, 0, N, d, n, scale, mat_act(m->dkbias, n), mat_f32(AP(m, l, MHE_EQ), d), 1.0f, out_act(m->dk, ldk));
        be->matmul(be, 1, 0, n, d, N, scale, mat_act(m->dkbias, n), mat_act(a->k, ldk), 1.0f, out_f32(AG(m, l, MHE_EQ), d));
    } else {
        be->head_expand_backward(be, m->dqh, a->q, ldq, NULL, N, n, d, m->dq, 0, NULL, AG(m, l, MHE_EQ));
        be->head_expand_backward(be, m->dkh, a->k, ldk, NULL, N, n, d, m->dk, 0, NULL, AG(m, l, MHE_EK));
        be->head_expand_backward(be, m->dvh, a->v, ldv, NULL, N, n, d, m->dv, 0, NULL, AG(m, l, MHE_EV));
    }
    attn_project_backward(m, l, d_ain, accumulate);
}

const AttnVariant attn_mhe_add = {"mhe_add", mhe_tensors, plan, forward, backward, NULL, NULL};
