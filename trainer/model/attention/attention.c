// The attention sublayer shared by every variant (DESIGN.md §1): the variant's pre-core
// forward, the backend's attention core, the output projection; and their backward.  What is
// specific to a variant is in its own file (variant.h); this file holds no per-type switch.
#include <math.h>

#include "trainer/model/model_internal.h"

AttnPlan attn_plan_for(const Config *cfg, int fast) {
    return attn_variant(cfg->attention.type)->plan(cfg, fast);
}

AttnPlan attn_plan(const Config *cfg) { return attn_plan_for(cfg, cfg->attention.fast_path); }

AttnPlan attn_plan_base(const Config *cfg) {
    AttnPlan p = {0};
    p.q_heads = p.k_heads = p.v_heads = cfg->model.heads;
    p.qk_dim = p.v_dim = cfg->model.head_dim;
    p.k_src = p.v_src = ATTN_SRC_OWN;
    p.out_tensor = -1;
    return p;
}

int attn_linear(AttnTensor *t, int k, const char *weight, const char *bias, int out, int in) {
    t[k++] = (AttnTensor){weight, PARAM_WEIGHT, out, in, 0.0f};
    t[k++] = (AttnTensor){bias, PARAM_BIAS, out, 0, 0.0f};
    return k;
}

void attn_project(Model *m, int l, int iq, int ik, int iv) {
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    if (pl->qc) linear_forward(m->be, a->a_in, AP(m, l, iq), AP(m, l, iq + 1), N, D, pl->qc, a->q);
    if (pl->kc) linear_forward(m->be, a->a_in, AP(m, l, ik), AP(m, l, ik + 1), N, D, pl->kc, a->k);
    if (pl->vc) linear_forward(m->be, a->a_in, AP(m, l, iv), AP(m, l, iv + 1), N, D, pl->vc, a->v);
}

void attn_project_backward(Model *m, int l, int iq, int ik, int iv, float *d_ain) {
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    Backend *be = m->be;
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    if (pl->qc)
        linear_backward(be, m->dq, a->a_in, AP(m, l, iq), N, D, pl->qc, d_ain, 1, AG(m, l, iq), AG(m, l, iq + 1));
    if (pl->kc)
        linear_backward(be, m->dk, a->a_in, AP(m, l, ik), N, D, pl->kc, d_ain, 1, AG(m, l, ik), AG(m, l, ik + 1));
    if (pl->vc)
        linear_backward(be, m->dv, a->a_in, AP(m, l, iv), N, D, pl->vc, d_ain, 1, AG(m, l, iv), AG(m, l, iv + 1));
}

typedef struct {
    AttnShape s;
    const float *Q, *K, *V;
} CoreArgs;

// The core's inputs for layer l, once the forward has filled the layer's buffers.
static CoreArgs core_args(const Model *m, const LayerActs *a, int l) {
    const AttnPlan *pl = &m->plan;
    const int n = m->cfg.model.heads, D = m->cfg.model.hidden;
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
    if (pl->k_src == ATTN_SRC_INPUT) {
        c.K = a->a_in;
        s->ldk = D;
    }
    if (pl->v_src == ATTN_SRC_INPUT) {
        c.V = a->a_in;
        s->ldv = D;
    } else if (pl->v_src == ATTN_SRC_K) {
        c.V = a->k;
        s->ldv = pl->kc;
    }
    if (pl->out_shift) s->out_shift = AP(m, l, pl->out_tensor);
    if (pl->out_scale) s->out_scale = a->small + pl->out_scale_at;
    return c;
}

AttnShape attn_shape(const Model *m, const LayerActs *a) { return core_args(m, a, (int)(a - m->la)).s; }

void attn_core_forward(Model *m, int l) {
    LayerActs *a = &m->la[l];
    m->variant->forward(m, l);
    CoreArgs c = core_args(m, a, l);
    m->be->attention_forward(m->be, &c.s, c.Q, c.K, c.V, a->ctx, a->att_saved, m->att_scratch);
}

void attn_forward(Model *m, int l, float *out) {
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    const int nd = m->cfg.model.heads * m->cfg.model.head_dim;
    attn_core_forward(m, l);
    linear_forward(m->be, m->la[l].ctx, MP(m, p->wo), MP(m, p->bo), N, nd, D, out);
}

void attn_backward(Model *m, int l, const float *d_out, float *d_ain, int accumulate) {
    Backend *be = m->be;
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    const int nd = m->cfg.model.heads * m->cfg.model.head_dim;
    if (!accumulate) be->zero(be, d_ain, (size_t)N * D * sizeof(float));
    linear_backward(be, d_out, a->ctx, MP(m, p->wo), N, nd, D, m->dctx, 0, MG(m, p->wo), MG(m, p->bo));

    CoreArgs c = core_args(m, a, l);
    float *dQ = pl->qhc ? m->dqh : m->dq;
    float *dK = pl->khc ? m->dkh : m->dk;
    float *dV = pl->vhc ? m->dvh : m->dv;
    float *dscale = pl->out_scale ? AG(m, l, pl->out_tensor) : NULL;
    float *dshift = pl->out_shift ? AG(m, l, pl->out_tensor) : NULL;
    be->attention_backward(be, &c.s, c.Q, c.K, c.V, a->att_saved, m->dctx, dQ, dK, dV,
                           pl->key_bias ? m->dkbias : NULL, dscale, dshift, m->att_scratch);
    m->variant->backward(m, l, d_ain);
}
