// mla: multi-head latent attention (DeepSeek-V2, 2024) with learned positions.  Keys and
// values of every head come from one shared low-rank latent c = X W_DKV (D × d_c):
// K_i = c W_UK^(i), V_i = c W_UV^(i).  Queries are per head as in mha, Q_i = X W_Q^(i), or,
// with attention.q_latent_dim = d_q > 0, through their own latent: Q_i = (X W_DQ) W_UQ^(i).
// Every projection carries a bias, like the other variants, except W_UK (it would cancel).  `extra` holds c [N, d_c] and
// then c_q [N, d_q], saved for the backward.
#include "trainer/model/model_internal.h"

// Tensor indices: the query projections first (one linear, or down + up), then the latent.
enum { Q = 0, Q_DOWN = 0, Q_UP = 2 };

static int q_tensors(const Config *c) { return c->attention.q_latent_dim ? 4 : 2; }

static int tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    const int dc = c->attention.latent_dim, dq = c->attention.q_latent_dim;
    int k = 0;
    if (dq) {
        k = attn_linear(t, k, "q_down.weight", "q_down.bias", dq, D);
        k = attn_linear(t, k, "q_up.weight", "q_up.bias", nd, dq);
    } else {
        k = attn_linear(t, k, "q.weight", "q.bias", nd, D);
    }
    k = attn_linear(t, k, "kv_down.weight", "kv_down.bias", dc, D);
    // No bias on W_UK: a key bias adds the same q·b to a whole softmax row, which cancels.
    t[k++] = (AttnTensor){"k_up.weight", PARAM_WEIGHT, nd, dc, 0.0f};
    return attn_linear(t, k, "v_up.weight", "v_up.bias", nd, dc);
}

static AttnPlan plan(const Config *c, int fast) {
    (void)fast;
    const int D = c->model.hidden, nd = c->model.heads * c->model.head_dim;
    const int dc = c->attention.latent_dim, dq = c->attention.q_latent_dim;
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = p.vc = nd;  // the per-head Q, K, V the core reads
    p.extra = dc + dq;
    p.proj_macs = (double)D * dc + 2.0 * dc * nd + (dq ? (double)D * dq + (double)dq * nd : (double)D * nd);
    return p;
}

static void forward(Model *m, int l) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, nd = m->cfg.model.heads * m->cfg.model.head_dim;
    const int dc = m->cfg.attention.latent_dim, dq = m->cfg.attention.q_latent_dim;
    const int kv = q_tensors(&m->cfg);  // kv_down (w, b), k_up (w), v_up (w, b)
    Act *c = a->extra, *cq = AO(m, a->extra, (size_t)N * dc);
    if (dq) {
        be->linear_forward(be, a->a_in, AP(m, l, Q_DOWN), AP(m, l, Q_DOWN + 1), N, D, dq, cq);
        be->linear_forward(be, cq, AP(m, l, Q_UP), AP(m, l, Q_UP + 1), N, dq, nd, a->q);
    } else {
        be->linear_forward(be, a->a_in, AP(m, l, Q), AP(m, l, Q + 1), N, D, nd, a->q);
    }
    be->linear_forward(be, a->a_in, AP(m, l, kv), AP(m, l, kv + 1), N, D, dc, c);
    be->linear_forward(be, c, AP(m, l, kv + 2), NULL, N, dc, nd, a->k);
    be->linear_forward(be, c, AP(m, l, kv + 3), AP(m, l, kv + 4), N, dc, nd, a->v);
}

static void backward(Model *m, int l, Act *d_ain, int accumulate) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, nd = m->cfg.model.heads * m->cfg.model.head_dim;
    const int dc = m->cfg.attention.latent_dim, dq = m->cfg.attention.q_latent_dim;
    const int kv = q_tensors(&m->cfg);
    const Act *c = a->extra, *cq = AO(m, a->extra, (size_t)N * dc);
    Act *d_c = m->dextra, *d_cq = AO(m, m->dextra, (size_t)N * dc);
    // dc = dK W_UK + dV W_UV, then back through the shared down-projection.
    be->linear_backward(be, m->dk, c, AP(m, l, kv + 2), N, dc, nd, d_c, 0, AG(m, l, kv + 2), NULL, m->grads_zero);
    be->linear_backward(be, m->dv, c, AP(m, l, kv + 3), N, dc, nd, d_c, 1, AG(m, l, kv + 3),
                        AG(m, l, kv + 4), m->grads_zero);
    // The first term of d_ain overwrites it or adds as asked (variant.h), the query's adds.
    be->linear_backward(be, d_c, a->a_in, AP(m, l, kv), N, D, dc, d_ain, accumulate, AG(m, l, kv),
                        AG(m, l, kv + 1), m->grads_zero);
    if (dq) {
        be->linear_backward(be, m->dq, cq, AP(m, l, Q_UP), N, dq, nd, d_cq, 0, AG(m, l, Q_UP),
                            AG(m, l, Q_UP + 1), m->grads_zero);
        be->linear_backward(be, d_cq, a->a_in, AP(m, l, Q_DOWN), N, D, dq, d_ain, 1, AG(m, l, Q_DOWN),
                        AG(m, l, Q_DOWN + 1), m->grads_zero);
    } else {
        be->linear_backward(be, m->dq, a->a_in, AP(m, l, Q), N, D, nd, d_ain, 1, AG(m, l, Q),
                            AG(m, l, Q + 1), m->grads_zero);
    }
}

static void export_keys(const Config *c, void (*put)(void *, const char *, double), void *ctx) {
    put(ctx, "latent_dim", c->attention.latent_dim);
    put(ctx, "q_latent_dim", c->attention.q_latent_dim);
}

const AttnVariant attn_mla = {"mla", tensors, plan, forward, backward, export_keys, NULL};
