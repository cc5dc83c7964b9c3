// collab: collaborative heads (Cordonnier et al. 2020): shared W̃_Q, W̃_K ∈ R^{D×D̃}, mixing
// vectors m_i ∈ R^{D̃} (init 1 + N(0, embed_std)), content bias W_cb ∈ R^{D×n}, per-head V:
// S_i = (X W̃_Q ⊙ m_i)(X W̃_K)ᵀ/√d + 1·(X W_cb[:,i])ᵀ.
#include "trainer/model/model_internal.h"

// q, k, v weights then biases (one block each: one GEMM), then the mixing and content bias.
enum { WQ, WK, WV, BQ, BK, BV, MIX, WCB };

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, n = c->model.heads, Dt = c->attention.collab_dim;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", Dt), ATTN_LINEAR("k", Dt), ATTN_LINEAR("v", n * c->model.head_dim)};
    int k = attn_qkv_tensors(t, 0, s, D);
    t[k++] = (AttnTensor){"mix", PARAM_HEAD_EMBED, n, Dt, 1.0f};
    t[k++] = (AttnTensor){"content_bias", PARAM_WEIGHT, n, D, 0.0f};
    return k;
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    const int n = c->model.heads, Dt = c->attention.collab_dim;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = Dt;
    p.vc = n * c->model.head_dim;
    p.qhc = n * Dt;
    p.k_heads = 1;
    p.qk_dim = Dt;
    p.key_bias = 1;
    attn_set_proj(&p, WQ, WK, WV, BQ, BK, BV);
    return p;
}

static void forward(Model *m, int l) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, n = m->cfg.model.heads;
    const int Dt = m->cfg.attention.collab_dim;
    attn_project(m, l);
    be->head_expand(be, a->q, LDQ(m), AP(m, l, MIX), NULL, N, n, Dt, a->qh);
    // Content bias: the key's own score for head h, X W_cb[:, h] (not scaled).
    be->matmul(be, 0, 1, N, n, D, 1.0f, mat_act(a->a_in, D), mat_f32(AP(m, l, WCB), D), 0.0f, out_act(a->kbias, n));
}

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, n = m->cfg.model.heads;
    const int Dt = m->cfg.attention.collab_dim;
    be->head_expand_backward(be, m->dqh, a->q, LDQ(m), AP(m, l, MIX), N, n, Dt, m->dq, 0, AG(m, l, MIX), NULL);
    attn_project_backward(m, l, d_ain, accumulate);  // the first term; the content bias's adds
    be->linear_backward(be, m->dkbias, a->a_in, AP(m, l, WCB), N, D, n, d_ain, 1, AG(m, l, WCB), NULL, m->grads_zero);
}

static void export_keys(const Config *c, void (*put)(void *, const char *, double), void *ctx) {
    put(ctx, "collab_dim", c->attention.collab_dim);
}

const AttnVariant attn_collab = {"collab", tensors, plan, forward, backward, export_keys, NULL};
