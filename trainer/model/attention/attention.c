// The attention sublayer shared by every variant (DESIGN.md §1): the variant's pre-core
// forward, the backend's attention core, the output projection; and their backward.  What is
// specific to a variant is in its own file (variant.h); this file holds no per-type switch.
#include <math.h>

#include "trainer/model/model_internal.h"

AttnPlan attn_plan_for(const Config *cfg, int fast) {
    return attn_variant(cfg->attention.type)->plan(cfg, fast);
}

AttnPlan attn_plan(const Config *cfg) { return attn_plan_for(cfg, cfg->attention.fast_path); }

// Only tested for non-NULL by the cores' choice and sizes: the markers of attn_plan_shape.
static const float attn_marker = 1.0f;

AttnShape attn_plan_shape(const Config *cfg, const AttnPlan *p, int B, int T) {
    AttnShape s = {0};
    s.B = B, s.T = T, s.n_heads = cfg->model.heads;
    s.q_heads = p->q_heads, s.k_heads = p->k_heads, s.v_heads = p->v_heads;
    s.qk_dim = p->qk_dim, s.v_dim = p->v_dim;
    s.key_bias = p->key_bias ? (const Act *)&attn_marker : NULL;
    s.out_scale = p->out_scale ? &attn_marker : NULL;
    s.out_shift = p->out_shift ? &attn_marker : NULL;
    return s;
}

AttnPlan attn_plan_on(const Config *cfg, Backend *be, int fast, int B, int T) {
    AttnPlan p = attn_plan_for(cfg, fast);
    if (!p.key_bias || !p.key_bias_as_q || !be->attention_key_bias) return p;
    const AttnShape s = attn_plan_shape(cfg, &p, B, T);
    if (be->attention_key_bias(be, &s)) return p;
    p.key_bias = 0;
    p.q_heads = cfg->model.heads;
    p.qhc = cfg->model.heads * p.qk_dim;
    return p;
}

AttnPlan attn_plan_base(const Config *cfg) {
    AttnPlan p = {0};
    p.q_heads = p.k_heads = p.v_heads = cfg->model.heads;
    p.qk_dim = p.v_dim = cfg->model.head_dim;
    p.k_src = p.v_src = ATTN_SRC_OWN;
    p.out_tensor = -1;
    for (int j = 0; j < 3; j++) p.proj_w[j] = p.proj_b[j] = -1;
    return p;
}

int attn_linear(AttnTensor *t, int k, const char *weight, const char *bias, int out, int in) {
    t[k++] = (AttnTensor){weight, PARAM_WEIGHT, out, in, 0.0f};
    t[k++] = (AttnTensor){bias, PARAM_BIAS, out, 0, 0.0f};
    return k;
}

int attn_qkv_tensors(AttnTensor *t, int k, const AttnLinearSpec spec[3], int in) {
    for (int j = 0; j < 3; j++)
        if (spec[j].weight) t[k++] = (AttnTensor){spec[j].weight, PARAM_WEIGHT, spec[j].out, in, 0.0f};
    for (int j = 0; j < 3; j++)
        if (spec[j].weight) t[k++] = (AttnTensor){spec[j].bias, PARAM_BIAS, spec[j].out, 0, 0.0f};
    return k;
}

static void widths(const AttnPlan *p, int w[3]) {
    w[0] = p->qc;
    w[1] = p->kc;
    w[2] = p->vc;
}

int attn_qkv_fusable(const Model *m) {
    const AttnPlan p = attn_plan_for(&m->cfg, 0), f = attn_plan_for(&m->cfg, 1);
    const int D = m->cfg.model.hidden;
    int w[3], wf[3], present = 0;
    widths(&p, w);
    widths(&f, wf);
    if (p.k_src != ATTN_SRC_OWN || p.v_src != ATTN_SRC_OWN || f.k_src != ATTN_SRC_OWN || f.v_src != ATTN_SRC_OWN)
        return 0;
    for (int j = 0; j < 3; j++) {
        // One layout serves both paths (model_set_fast_path switches freely).
        if (w[j] != wf[j] || p.proj_w[j] != f.proj_w[j] || p.proj_b[j] != f.proj_b[j]) return 0;
        if (p.proj_w[j] < 0 || w[j] == 0) continue;
        if (p.proj_b[j] < 0) return 0;  // the fused GEMM adds one bias vector over all columns
        present++;
    }
    if (present < 2) return 0;
    for (int l = 0; l < m->cfg.model.layers; l++) {
        const size_t *at = m->lp[l].attn;
        size_t wn = NO_PARAM, bn = NO_PARAM;  // where the next weight / bias must start
        for (int j = 0; j < 3; j++) {
            if (p.proj_w[j] < 0 || w[j] == 0) continue;
            if (wn != NO_PARAM && (at[p.proj_w[j]] != wn || at[p.proj_b[j]] != bn)) return 0;
            wn = at[p.proj_w[j]] + (size_t)w[j] * D;
            bn = at[p.proj_b[j]] + (size_t)w[j];
        }
    }
    return 1;
}

void attn_project(Model *m, int l) {
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    int w[3];
    widths(pl, w);
    Act *y[3] = {a->q, a->k, a->v};
    if (m->qkv_ld) {
        // The weights are one [qc+kc+vc, D] block and the biases one vector (attn_qkv_fusable),
        // and y[j] are column slices of one [N, qc+kc+vc] buffer: a single GEMM writes them all.
        int j0 = 0;
        while (pl->proj_w[j0] < 0 || w[j0] == 0) j0++;
        m->be->linear_forward(m->be, a->a_in, AP(m, l, pl->proj_w[j0]), AP(m, l, pl->proj_b[j0]), N, D, m->qkv_ld, y[j0]);
        return;
    }
    for (int j = 0; j < 3; j++)
        if (pl->proj_w[j] >= 0 && w[j])
            m->be->linear_forward(m->be, a->a_in, AP(m, l, pl->proj_w[j]), AP(m, l, pl->proj_b[j]), N, D, w[j], y[j]);
}

void attn_project_backward(Model *m, int l, Act *d_ain, int accumulate) {
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    Backend *be = m->be;
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    int w[3];
    widths(pl, w);
    Act *dy[3] = {m->dq, m->dk, m->dv};
    for (int j = 0; j < 3; j++) {
        if (pl->proj_w[j] < 0 || w[j] == 0) continue;
        const int out = m->qkv_ld ? m->qkv_ld : w[j];
        be->linear_backward(be, dy[j], a->a_in, AP(m, l, pl->proj_w[j]), N, D, out, d_ain, accumulate,
                        AG(m, l, pl->proj_w[j]), AG(m, l, pl->proj_b[j]), m->grads_zero);
        if (m->qkv_ld) return;  // one GEMM over the block (attn_project)
        accumulate = 1;
    }
}

typedef struct {
    AttnShape s;
    const Act *Q, *K, *V;
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
    s->key_mask_trailing = m->has_mask && m->mask_trailing;
    s->key_bias = pl->key_bias ? a->kbias : NULL;
    s->dropout = m->train ? m->cfg.model.attn_dropout : 0.0f;
    s->seed = m->drop_seed;
    s->offset = m->drop_base + 1 + 3 * (uint64_t)l;
    c.Q = pl->qhc ? a->qh : a->q;
    s->ldq = pl->qhc ? pl->qhc : LDQ(m);
    c.K = pl->khc ? a->kh : a->k;
    s->ldk = pl->khc ? pl->khc : LDK(m);
    c.V = pl->vhc ? a->vh : a->v;
    s->ldv = pl->vhc ? pl->vhc : LDV(m);
    if (pl->k_src == ATTN_SRC_INPUT) {
        c.K = a->a_in;
        s->ldk = D;
    }
    if (pl->v_src == ATTN_SRC_INPUT) {
        c.V = a->a_in;
        s->ldv = D;
    } else if (pl->v_src == ATTN_SRC_K) {
        c.V = a->k;
        s->ldv = LDK(m);
    }
    if (pl->out_shift) s->out_shift = AP(m, l, pl->out_tensor);
    if (pl->out_scale) s->out_scale = a->small + pl->out_scale_at;
    if (pl->q_scale && m->be->attention_q_scale) {
        // The shared q (qc columns) and the scale instead of the per-head copies, where the core
        // can apply it.
        AttnShape t = *s;
        t.q_heads = pl->qc / pl->qk_dim;
        t.ldq = LDQ(m);
        if (m->be->attention_q_scale(m->be, &t)) {
            t.q_scale = a->small + pl->q_scale_at;
            *s = t;
            c.Q = a->q;
        }
    }
    return c;
}

AttnShape attn_shape(const Model *m, const LayerActs *a) { return core_args(m, a, (int)(a - m->la)).s; }

int attn_core_scales_q(const Model *m, int l) { return core_args(m, &m->la[l], l).s.q_scale != NULL; }

void attn_prepare(Model *m) {
    if (m->variant->prepare) m->variant->prepare(m);
}

void attn_core_forward(Model *m, int l) {
    LayerActs *a = &m->la[l];
    m->variant->forward(m, l);
    CoreArgs c = core_args(m, a, l);
    m->be->attention_forward(m->be, &c.s, c.Q, c.K, c.V, a->ctx, a->att_saved, m->att_scratch);
}

void attn_forward(Model *m, int l, Act *out) {
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    const int nd = m->cfg.model.heads * m->cfg.model.head_dim;
    attn_core_forward(m, l);
    m->be->linear_forward(m->be, m->la[l].ctx, MP(m, p->wo), MP(m, p->bo), N, nd, D, out);
}

void attn_backward(Model *m, int l, const Act *d_out, Act *d_ain, int accumulate) {
    Backend *be = m->be;
    const AttnPlan *pl = &m->plan;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const int N = m->B * m->T, D = m->cfg.model.hidden;
    const int nd = m->cfg.model.heads * m->cfg.model.head_dim;
    // No zeroing of d_ain: the variant's backward writes it (its first term overwrites unless
    // the caller accumulates).
    be->linear_backward(be, d_out, a->ctx, MP(m, p->wo), N, nd, D, m->dctx, 0, MG(m, p->wo),
                        MG(m, p->bo), m->grads_zero);

    CoreArgs c = core_args(m, a, l);
    Act *dQ = pl->qhc ? m->dqh : m->dq;
    Act *dK = pl->khc ? m->dkh : m->dk;
    Act *dV = pl->vhc ? m->dvh : m->dv;
    float *dscale = pl->out_scale ? AG(m, l, pl->out_tensor) : NULL;
    float *dshift = pl->out_shift ? AG(m, l, pl->out_tensor) : NULL;
    be->attention_backward(be, &c.s, c.Q, c.K, c.V, a->att_saved, m->dctx, dQ, dK, dV,
                           pl->key_bias ? m->dkbias : NULL, dscale, dshift, m->att_scratch);
    m->variant->backward(m, l, d_ain, accumulate);
}
