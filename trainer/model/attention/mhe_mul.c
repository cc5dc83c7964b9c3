// mhe_mul: shared Q, K, V; Q_i = Q ⊙ (1 + e_i^Q), K_i = K ⊙ (1 + e_i^K), V_i = V ⊙ (1 + e_i^V).
// Fast path (DESIGN.md §1): Q_i K_iᵀ = (Q ⊙ m_i) Kᵀ with m_i = (1+e_i^Q)(1+e_i^K), and
// A_i V_i = (A_i V)(1+e_i^V): K and V stay one head, the core scales its output per head.
// `small` holds 1+e^Q, 1+e^K, 1+e^V and (fast) m, each [n, d], for every layer at once (prepare).
// Fast, on a backend whose core scales Q per head (ops.h AttnShape.q_scale), Q ⊙ m_i is never
// stored: the core reads Q and m; the backward still gets the per-head dQ_i.
#include "trainer/model/attention/mhe_common.h"

static AttnPlan plan(const Config *c, int fast) {
    const int n = c->model.heads, d = c->model.head_dim;
    AttnPlan p = mhe_plan_base(c);
    if (fast) {
        p.qhc = n * d;
        p.q_scale = 1;
        p.q_scale_at = 3 * n * d;  // m
        p.k_heads = p.v_heads = 1;
        p.out_scale = 1;
        p.out_scale_at = 2 * n * d;
        p.out_tensor = MHE_EV;  // d(1 + e^V) = d e^V
        p.small = 4 * n * d;
    } else {
        p.qhc = p.khc = p.vhc = n * d;
        p.small = 3 * n * d;
    }
    return p;
}

// 1 + e^Q, 1 + e^K, 1 + e^V and (fast) m of every layer into its `small`: they depend on the
// parameters only, so one head_scales call per forward instead of four small ops per layer —
// when e^Q, e^K, e^V are adjacent in every layer (mhe_tensors' order) at one stride from layer
// to layer, and the layers' `small` too (model.c).  The same values either way.
static void prepare(Model *m) {
    Backend *be = m->be;
    const int L = m->cfg.model.layers, nd = m->cfg.model.heads * m->cfg.model.head_dim, prod = m->fast_path;
    const ptrdiff_t lde = L > 1 ? AP(m, 1, MHE_EQ) - AP(m, 0, MHE_EQ) : 0;
    int strided = be->head_scales != NULL && lde >= 0;
    for (int l = 0; l < L && strided; l++)
        strided = AP(m, l, MHE_EQ) == AP(m, 0, MHE_EQ) + l * lde && AP(m, l, MHE_EK) == AP(m, l, MHE_EQ) + nd &&
                  AP(m, l, MHE_EV) == AP(m, l, MHE_EK) + nd && m->la[l].small == m->la[0].small + (size_t)l * m->small_ld;
    if (strided) {
        be->head_scales(be, AP(m, 0, MHE_EQ), (size_t)lde, L, nd, prod, m->la[0].small, m->small_ld);
        return;
    }
    for (int l = 0; l < L; l++) {
        float *s = m->la[l].small;
        be->add_scalar(be, AP(m, l, MHE_EQ), 1.0f, s, nd);
        be->add_scalar(be, AP(m, l, MHE_EK), 1.0f, s + nd, nd);
        be->add_scalar(be, AP(m, l, MHE_EV), 1.0f, s + 2 * nd, nd);
        if (prod) be->mul(be, s, s + nd, s + 3 * nd, nd);
    }
}

static void forward(Model *m, int l) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, n = m->cfg.model.heads, d = m->cfg.model.head_dim, nd = n * d;
    const int ldq = LDQ(m), ldk = LDK(m), ldv = LDV(m);  // column slices when fused
    const float *s0 = a->small, *s1 = a->small + nd, *s2 = a->small + 2 * nd, *s3 = a->small + 3 * nd;
    attn_project(m, l);  // `small` is prepare's
    if (m->fast_path) {
        if (!attn_core_scales_q(m, l)) be->head_expand(be, a->q, ldq, s3, NULL, N, n, d, a->qh);
    } else {
        be->head_expand(be, a->q, ldq, s0, NULL, N, n, d, a->qh);
        be->head_expand(be, a->k, ldk, s1, NULL, N, n, d, a->kh);
        be->head_expand(be, a->v, ldv, s2, NULL, N, n, d, a->vh);
    }
}

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, n = m->cfg.model.heads, d = m->cfg.model.head_dim, nd = n * d;
    const int ldq = LDQ(m), ldk = LDK(m), ldv = LDV(m);
    const float *s0 = a->small, *s1 = a->small + nd, *s2 = a->small + 2 * nd, *s3 = a->small + 3 * nd;
    if (m->fast_path) {
        // dm from the query scale; m = (1+e^Q)(1+e^K) splits by the product rule.
        if (be->head_expand_backward_prod) {
            be->head_expand_backward_prod(be, m->dqh, a->q, ldq, s3, s0, s1, N, n, d, m->dq, 0, AG(m, l, MHE_EQ),
                                          AG(m, l, MHE_EK));
        } else {
            be->zero(be, m->dsmall, (size_t)nd * sizeof(float));
            be->head_expand_backward(be, m->dqh, a->q, ldq, s3, N, n, d, m->dq, 0, m->dsmall, NULL);
            be->mul_acc(be, m->dsmall, s1, AG(m, l, MHE_EQ), nd);
            be->mul_acc(be, m->dsmall, s0, AG(m, l, MHE_EK), nd);
        }
    } else {
        be->head_expand_backward(be, m->dqh, a->q, ldq, s0, N, n, d, m->dq, 0, AG(m, l, MHE_EQ), NULL);
        be->head_expand_backward(be, m->dkh, a->k, ldk, s1, N, n, d, m->dk, 0, AG(m, l, MHE_EK), NULL);
        be->head_expand_backward(be, m->dvh, a->v, ldv, s2, N, n, d, m->dv, 0, AG(m, l, MHE_EV), NULL);
    }
    attn_project_backward(m, l, d_ain, accumulate);
}

const AttnVariant attn_mhe_mul = {"mhe_mul", mhe_tensors, plan, forward, backward, NULL, prepare};
