// The attention sublayer of every type (DESIGN.md §1): projections, per-head materialisation
// or fast-path identities, the backend's attention core, output projection; and its backward.
#include <assert.h>
#include <math.h>

#include "trainer/model/model_internal.h"

AttnPlan attn_plan_for(const Config *cfg, int fast);

AttnPlan attn_plan_for(const Config *cfg, int fast) {
    const int n = cfg->model.heads, d = cfg->model.head_dim;
    AttnPlan p = {0};
    p.q_heads = p.k_heads = p.v_heads = n;
    p.qk_dim = p.v_dim = d;
    switch (cfg->attention.type) {
    case ATTN_MHA: p.qc = p.kc = p.vc = n * d; break;
    case ATTN_SHA:
        p.qc = p.kc = p.vc = d;
        p.q_heads = p.k_heads = p.v_heads = 1;
        break;
    case ATTN_MHE_ADD:
        p.qc = p.kc = p.vc = d;
        if (fast) {
            // score_i = (q·k + e_i^Q·k)/√d and head_i = A_i V + e_i^V (DESIGN.md §1).
            p.q_heads = p.k_heads = p.v_heads = 1;
            p.key_bias = p.out_shift = 1;
        } else {
            p.qhc = p.khc = p.vhc = n * d;
        }
        break;
    case ATTN_MHE_MUL:
        p.qc = p.kc = p.vc = d;
        if (fast) {
            // Q_i K_iᵀ = (Q ⊙ m_i) Kᵀ, m_i = (1+e_i^Q)(1+e_i^K); A_i V_i = (A_i V)(1+e_i^V).
            p.qhc = n * d;
            p.k_heads = p.v_heads = 1;
            p.out_scale = 1;
            p.small = 4 * n * d;
        } else {
            p.qhc = p.khc = p.vhc = n * d;
            p.small = 3 * n * d;
        }
        break;
    case ATTN_MQA:
        p.qc = n * d;
        p.kc = p.vc = d;
        p.k_heads = p.v_heads = 1;
        break;
    case ATTN_GQA:
        p.qc = n * d;
        p.kc = p.vc = cfg->attention.groups * d;
        p.k_heads = p.v_heads = cfg->attention.groups;
        break;
    case ATTN_EL_ATT:
        p.qc = n * d;
        p.el_att = 1;
        break;
    case ATTN_SKV:
        p.qc = p.kc = n * d;
        p.skv = 1;
        break;
    case ATTN_COLLAB: {
        const int Dt = cfg->attention.collab_dim;
        p.qc = p.kc = Dt;
        p.vc = n * d;
        p.qhc = n * Dt;
        p.k_heads = 1;
        p.qk_dim = Dt;
        p.key_bias = 1;
        break;
    }
    default: assert(!"unknown attention type");
    }
    return p;
}

AttnPlan attn_plan(const Config *cfg) { return attn_plan_for(cfg, cfg->attention.fast_path); }

typedef struct {
    AttnShape s;
    const float *Q, *K, *V;
} CoreArgs;

// The core's inputs for layer l, once the forward has filled the layer's buffers.
static CoreArgs core_args(const Model *m, const LayerActs *a, int l) {
    const AttnPlan *pl = &m->plan;
    const int n = m->cfg.model.heads, D = m->cfg.model.hidden;
    const LayerParams *p = &m->lp[l];
    CoreArgs c = {0};
    AttnShape *s = &c.s;
    s->B = m->B;
    s->T = m->T;
    s->n_heads = n;
    s->q_heads = pl->q_heads;
    s->k_heads = pl->k_heads;
    s->v_heads = pl->v_heads;
    s->qk_dim = pl->qk_dim;
    s->v_dim = pl->v_dim;
    s->scale = (float)(1.0 / sqrt((double)m->cfg.model.head_dim));
    s->causal = m->cfg.model.arch == ARCH_GPT;
    s->key_mask = m->has_mask ? m->mask : NULL;
    s->key_bias = pl->key_bias ? a->kbias : NULL;
    s->dropout = m->train ? m->cfg.model.attn_dropout : 0.0f;
    s->seed = m->drop_seed;
    s->offset = m->drop_base + 1 + 3 * (uint64_t)l;
    c.Q = pl->qhc ? a->qh : a->q;
    s->ldq = pl->qhc ? pl->qhc : pl->qc;
    c.K = pl->khc ? a->kh : a->k;
    s->ldk = pl->khc ? pl->khc : pl->kc;
    c.V = pl->vhc ? a->vh : a->v;
    s->ldv = pl->vhc ? pl->vhc : pl->vc;
    if (pl->el_att) {
        c.K = c.V = a->a_in;
        s->ldk = s->ldv = D;
    }
    if (pl->skv) {
        c.V = a->k;
        s->ldv = pl->kc;
    }
    if (pl->out_shift) s->out_shift = MP(m, p->ev);
    if (pl->out_scale) s->out_scale = a->small + 2 * (size_t)n * m->cfg.model.head_dim;
    return c;
}

AttnShape attn_shape(const Model *m, const LayerActs *a) { return core_args(m, a, (int)(a - m->la)).s; }

void attn_forward(Model *m, int l, float *out) {
    Backend *be = m->be;
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, n = m->cfg.model.heads;
    const int d = m->cfg.model.head_dim, nd = n * d;
    if (pl->qc) linear_forward(be, a->a_in, MP(m, p->wq), MP(m, p->bq), N, D, pl->qc, a->q);
    if (pl->kc)
        linear_forward(be, a->a_in, MP(m, pl->skv ? p->wkv : p->wk), MP(m, pl->skv ? p->bkv : p->bk),
                       N, D, pl->kc, a->k);
    if (pl->vc) linear_forward(be, a->a_in, MP(m, p->wv), MP(m, p->bv), N, D, pl->vc, a->v);
    const float scale = (float)(1.0 / sqrt((double)d));
    float *s0 = a->small, *s1 = a->small + nd, *s2 = a->small + 2 * nd, *s3 = a->small + 3 * nd;
    switch (m->cfg.attention.type) {
    case ATTN_MHE_ADD:
        if (m->fast_path) {
            // kbias[r, h] = scale * k_r · e_h^Q
            be->matmul(be, 0, 1, N, n, d, scale, a->k, d, MP(m, p->eq), d, 0.0f, a->kbias, n);
        } else {
            be->head_expand(be, a->q, d, NULL, MP(m, p->eq), N, n, d, a->qh);
            be->head_expand(be, a->k, d, NULL, MP(m, p->ek), N, n, d, a->kh);
            be->head_expand(be, a->v, d, NULL, MP(m, p->ev), N, n, d, a->vh);
        }
        break;
    case ATTN_MHE_MUL:
        be->add_scalar(be, MP(m, p->eq), 1.0f, s0, nd);
        be->add_scalar(be, MP(m, p->ek), 1.0f, s1, nd);
        be->add_scalar(be, MP(m, p->ev), 1.0f, s2, nd);
        if (m->fast_path) {
            be->mul(be, s0, s1, s3, nd);
            be->head_expand(be, a->q, d, s3, NULL, N, n, d, a->qh);
        } else {
            be->head_expand(be, a->q, d, s0, NULL, N, n, d, a->qh);
            be->head_expand(be, a->k, d, s1, NULL, N, n, d, a->kh);
            be->head_expand(be, a->v, d, s2, NULL, N, n, d, a->vh);
        }
        break;
    case ATTN_COLLAB: {
        const int Dt = m->cfg.attention.collab_dim;
        be->head_expand(be, a->q, Dt, MP(m, p->mix), NULL, N, n, Dt, a->qh);
        // Content bias: the key's own score for head h, X W_cb[:, h] (not scaled).
        be->matmul(be, 0, 1, N, n, D, 1.0f, a->a_in, D, MP(m, p->wcb), D, 0.0f, a->kbias, n);
        break;
    }
    default: break;
    }
    CoreArgs c = core_args(m, a, l);
    be->attention_forward(be, &c.s, c.Q, c.K, c.V, a->ctx, a->att_saved, m->att_scratch);
    linear_forward(be, a->ctx, MP(m, p->wo), MP(m, p->bo), N, nd, D, out);
}

void attn_backward(Model *m, int l, const float *d_out, float *d_ain) {
    Backend *be = m->be;
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden, n = m->cfg.model.heads;
    const int d = m->cfg.model.head_dim, nd = n * d;
    be->zero(be, d_ain, (size_t)N * D * sizeof(float));
    linear_backward(be, d_out, a->ctx, MP(m, p->wo), N, nd, D, m->dctx, 0, MG(m, p->wo), MG(m, p->bo));

    CoreArgs c = core_args(m, a, l);
    float *dQ = pl->qhc ? m->dqh : m->dq;
    float *dK = pl->khc ? m->dkh : m->dk;
    float *dV = pl->vhc ? m->dvh : m->dv;
    float *dscale = pl->out_scale ? MG(m, p->ev) : NULL;  // d(1 + e^V) = d e^V
    float *dshift = pl->out_shift ? MG(m, p->ev) : NULL;
    be->attention_backward(be, &c.s, c.Q, c.K, c.V, a->att_saved, m->dctx, dQ, dK, dV,
                           pl->key_bias ? m->dkbias : NULL, dscale, dshift, m->att_scratch);

    const float scale = c.s.scale;
    const float *s0 = a->small, *s1 = a->small + nd, *s2 = a->small + 2 * nd, *s3 = a->small + 3 * nd;
    switch (m->cfg.attention.type) {
    case ATTN_MHE_ADD:
        if (m->fast_path) {
            // kbias = scale k e^Qᵀ: dk += scale dkbias e^Q; de^Q += scale dkbiasᵀ k.  e^K: none.
            be->matmul(be, 0, 0, N, d, n, scale, m->dkbias, n, MP(m, p->eq), d, 1.0f, m->dk, d);
            be->matmul(be, 1, 0, n, d, N, scale, m->dkbias, n, a->k, d, 1.0f, MG(m, p->eq), d);
        } else {
            be->head_expand_backward(be, m->dqh, a->q, d, NULL, N, n, d, m->dq, 0, NULL, MG(m, p->eq));
            be->head_expand_backward(be, m->dkh, a->k, d, NULL, N, n, d, m->dk, 0, NULL, MG(m, p->ek));
            be->head_expand_backward(be, m->dvh, a->v, d, NULL, N, n, d, m->dv, 0, NULL, MG(m, p->ev));
        }
        break;
    case ATTN_MHE_MUL:
        if (m->fast_path) {
            // dm from the query scale; m = (1+e^Q)(1+e^K) splits by the product rule.
            be->zero(be, m->dsmall, (size_t)nd * sizeof(float));
            be->head_expand_backward(be, m->dqh, a->q, d, s3, N, n, d, m->dq, 0, m->dsmall, NULL);
            be->mul_acc(be, m->dsmall, s1, MG(m, p->eq), nd);
            be->mul_acc(be, m->dsmall, s0, MG(m, p->ek), nd);
        } else {
            be->head_expand_backward(be, m->dqh, a->q, d, s0, N, n, d, m->dq, 0, MG(m, p->eq), NULL);
            be->head_expand_backward(be, m->dkh, a->k, d, s1, N, n, d, m->dk, 0, MG(m, p->ek), NULL);
            be->head_expand_backward(be, m->dvh, a->v, d, s2, N, n, d, m->dv, 0, MG(m, p->ev), NULL);
        }
        break;
    case ATTN_COLLAB: {
        const int Dt = m->cfg.attention.collab_dim;
        be->head_expand_backward(be, m->dqh, a->q, Dt, MP(m, p->mix), N, n, Dt, m->dq, 0,
                                 MG(m, p->mix), NULL);
        linear_backward(be, m->dkbias, a->a_in, MP(m, p->wcb), N, D, n, d_ain, 1, MG(m, p->wcb), NULL);
        break;
    }
    case ATTN_SKV:
        be->add(be, m->dk, m->dv, m->dk, (size_t)N * pl->kc);
        break;
    case ATTN_EL_ATT:
        be->axpy(be, 1.0f, m->dk, d_ain, (size_t)N * D);
        be->axpy(be, 1.0f, m->dv, d_ain, (size_t)N * D);
        break;
    default: break;
    }
    (void)s2;
    if (pl->qc) linear_backward(be, m->dq, a->a_in, MP(m, p->wq), N, D, pl->qc, d_ain, 1, MG(m, p->wq), MG(m, p->bq));
    if (pl->kc)
        linear_backward(be, m->dk, a->a_in, MP(m, pl->skv ? p->wkv : p->wk), N, D, pl->kc, d_ain, 1,
                        MG(m, pl->skv ? p->wkv : p->wk), MG(m, pl->skv ? p->bkv : p->bk));
    if (pl->vc) linear_backward(be, m->dv, a->a_in, MP(m, p->wv), N, D, pl->vc, d_ain, 1, MG(m, p->wv), MG(m, p->bv));
}
