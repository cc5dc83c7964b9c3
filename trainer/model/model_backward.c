// The hand-written backward pass, mirroring model_forward.c in reverse: the pretraining head,
// then encoder_backward (shared with the task heads of task_head.c).
#include "common/error.h"
#include "trainer/model/model_internal.h"

static GeluKind gelu_kind(const Model *m) {
    return m->cfg.model.activation == ACT_GELU_TANH ? GELU_TANH : GELU_ERF;
}

// dx = LayerNorm's backward (as layernorm_backward), then dr = dropout(dx): one backend call
// where the backend fuses them (no second pass over dx).
static void layernorm_backward_dropout(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                       const float *mean, const float *rstd, int N, int D, Act *dx, int accumulate,
                                       float *dgamma, float *dbeta, float p, uint64_t seed, uint64_t site, Act *dr) {
    if (be->layernorm_backward_dropout) {
        be->layernorm_backward_dropout(be, dy, x, gamma, mean, rstd, N, D, dx, accumulate, dgamma, dbeta, p, seed,
                                       site, dr);
        return;
    }
    be->layernorm_backward(be, dy, x, gamma, mean, rstd, N, D, dx, accumulate, dgamma, dbeta);
    be->dropout(be, dx, dr, (size_t)N * D, p, seed, site);
}

// dy = d(layer output) on entry, d(layer input) on return.  Pre-LN: on entry dC already holds
// the FFN branch's gradient drop(dy) (made by the op above, in its pass), and the layer's last
// op makes the one below it likewise: *below = dropout(d(layer input)) at below_site.
static void layer_backward(Model *m, int l, Act *dy, Act *below, uint64_t below_site) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const ModelConfig *mc = &m->cfg.model;
    const int N = m->B * m->T, D = mc->hidden, F = mc->ffn;
    const float pd = m->train ? mc->dropout : 0.0f;
    const uint64_t site = m->drop_base + 1 + 3 * (uint64_t)l;
    Act *dA = m->dA, *dB = m->dB, *dC = m->dC, *dF = m->dF;
    if (mc->norm == NORM_POST) {
        // out = LN2(r2), r2 = h + drop(FFN(h)), h = LN1(r1), r1 = x + drop(Attn(x))
        layernorm_backward_dropout(be, dy, a->r2, MP(m, p->ln2_g), a->ln2_mean, a->ln2_rstd, N, D, dB, 0,
                                   MG(m, p->ln2_g), MG(m, p->ln2_b), pd, m->drop_seed, site + 2, dC);
        linear_backward_gelu(be, gelu_kind(m), dC, a->g, MP(m, p->down_w), N, F, D, a->u, dF, MG(m, p->down_w),
                             MG(m, p->down_b), m->grads_zero);
        be->linear_backward(be, dF, a->h, MP(m, p->up_w), N, D, F, dB, 1, MG(m, p->up_w),
                            MG(m, p->up_b), m->grads_zero);
        // d x = d r1 (the residual path; dy is free once LN2's backward has read it), plus the
        // attention path's share, added by the projections' backward: no zeroing, no add pass.
        layernorm_backward_dropout(be, dB, a->r1, MP(m, p->ln1_g), a->ln1_mean, a->ln1_rstd, N, D, dy, 0,
                                   MG(m, p->ln1_g), MG(m, p->ln1_b), pd, m->drop_seed, site + 1, dA);
        attn_backward(m, l, dA, dy, 1);
    } else {
        // h = x + drop(Attn(LN1(x))), out = h + drop(FFN(LN2(h)))
        linear_backward_gelu(be, gelu_kind(m), dC, a->g, MP(m, p->down_w), N, F, D, a->u, dF, MG(m, p->down_w),
                             MG(m, p->down_b), m->grads_zero);
        be->linear_backward(be, dF, a->f_in, MP(m, p->up_w), N, D, F, dB, 0, MG(m, p->up_w),
                            MG(m, p->up_b), m->grads_zero);
        layernorm_backward_dropout(be, dB, a->h, MP(m, p->ln2_g), a->ln2_mean, a->ln2_rstd, N, D, dy, 1,
                                   MG(m, p->ln2_g), MG(m, p->ln2_b), pd, m->drop_seed, site + 1, dA);
        attn_backward(m, l, dA, dB, 0);
        layernorm_backward_dropout(be, dB, a->x, MP(m, p->ln1_g), a->ln1_mean, a->ln1_rstd, N, D, dy, 1,
                                   MG(m, p->ln1_g), MG(m, p->ln1_b), pd, m->drop_seed, below_site, below);
    }
}

void encoder_backward(Model *m, const Act *dfin) {
    Backend *be = m->be;
    const ModelConfig *mc = &m->cfg.model;
    const int B = m->B, T = m->T, N = B * T, D = mc->hidden, L = mc->layers;
    const size_t ND = (size_t)N * D;
    const int pre = mc->norm == NORM_PRE;
    const float pd = m->train ? mc->dropout : 0.0f;
    Act *dy = m->dY;
    // Pre-LN: every LayerNorm backward also drops its dx out for the dropout below it (the FFN
    // branch of the layer below, at its site; below layer 0, the embeddings' into dA).
    const uint64_t ffn_site = m->drop_base + 1 + 3 * (uint64_t)(L - 1) + 2;
    if (pre)
        layernorm_backward_dropout(be, dfin, m->xs[L], MP(m, m->fln_g), m->fln_mean, m->fln_rstd, N, D, dy, 0,
                                   MG(m, m->fln_g), MG(m, m->fln_b), pd, m->drop_seed, ffn_site, m->dC);
    else if (dfin != dy)
        be->copy(be, dy, dfin, ACT_BYTES(m, ND));
    if (m->bw_hook) m->bw_hook(m->bw_ctx, L);
    for (int l = L - 1; l >= 0; l--) {
        layer_recompute(m, l);
        layer_backward(m, l, dy, l > 0 ? m->dC : m->dA, l > 0 ? ffn_site - 3 * (uint64_t)(L - l) : m->drop_base);
        if (m->bw_hook) m->bw_hook(m->bw_ctx, l);
    }

    Act *demb = m->dA;  // d(embedding output), after its dropout's backward
    if (!pre) {
        be->dropout(be, dy, dy, ND, pd, m->drop_seed, m->drop_base);
        demb = dy;
    }
    if (mc->arch == ARCH_BERT) {
        be->layernorm_backward(be, demb, m->emb, MP(m, m->eln_g), m->emb_mean, m->emb_rstd, N, D,
                               m->dA, 0, MG(m, m->eln_g), MG(m, m->eln_b));
        be->embedding_backward(be, m->dA, m->ids, m->has_types ? m->types : NULL, B, T, D,
                               MG(m, m->word), MG(m, m->pos), MG(m, m->type));
    } else {
        be->embedding_backward(be, demb, m->ids, NULL, B, T, D, MG(m, m->word), MG(m, m->pos), NULL);
    }
    m->grads_zero = 0;  // a second micro-batch adds to what this one wrote
    model_weights_steady(m, 0);  // before the last hook: whatever follows may write the weights
    if (m->bw_hook) m->bw_hook(m->bw_ctx, -1);
}

void model_backward(Model *m, double loss_divisor) {
    Backend *be = m->be;
    const ModelConfig *mc = &m->cfg.model;
    if (m->cfg.task.type != TASK_NONE) mhe_fatal("model_backward: this model has a task head: use model_backward_task");
    if (m->label_count < 0) mhe_fatal("model_backward: the last forward had no labels");
    if (loss_divisor <= 0) loss_divisor = m->label_count > 0 ? (double)m->label_count : 1.0;
    const int N = m->B * m->T, D = mc->hidden, V = mc->vocab_size;
    const size_t ND = (size_t)N * D;
    const int R = m->head_rows, compact = m->compact;
    const Act *head_in = compact ? m->fin_c : m->fin;
    if (R > 0) {
        Act *dlogits = m->logits;  // in place: the logits are no longer needed
        be->cross_entropy_backward(be, m->logits, m->lse, compact ? m->labels_c : m->labels, R, V, m->logits_ld,
                                   (float)(1.0 / loss_divisor), dlogits);
        const Act *last = mc->arch == ARCH_BERT ? m->t3 : head_in;
        // logits = last · wordᵀ (+ bias): d last = dlogits · word, d word += dlogitsᵀ · last
        be->linear_backward_ld(be, dlogits, last, MP(m, m->word), R, D, V, m->logits_ld, m->dA, 0, MG(m, m->word),
                               m->head_bias != NO_PARAM ? MG(m, m->head_bias) : NULL, m->grads_zero);
        if (mc->arch == ARCH_BERT) {
            const size_t RD = (size_t)R * D;
            be->layernorm_backward(be, m->dA, m->t2, MP(m, m->hln_g), m->t3_mean, m->t3_rstd, R, D,
                                   m->dB, 0, MG(m, m->hln_g), MG(m, m->hln_b));
            be->gelu_backward(be, gelu_kind(m), m->t1, m->dB, m->dB, RD);
            be->linear_backward(be, m->dB, head_in, MP(m, m->hd_w), R, D, D, m->dA, 0, MG(m, m->hd_w),
                            MG(m, m->hd_b), m->grads_zero);
        }
    }
    Act *dfin = m->dA;
    if (compact) {
        // Unlabelled positions get no gradient from the head.  Post-LN scatters straight into the
        // encoder's running gradient (no copy of the head's rows, none of the N x D result).
        if (mc->norm != NORM_PRE) {
            dfin = m->dY;
            be->zero(be, dfin, ACT_BYTES(m, ND));
            if (R > 0) be->scatter_rows(be, m->dA, m->rows, R, D, dfin, N);
        } else {
            if (R > 0) be->copy(be, m->dC, m->dA, ACT_BYTES(m, (size_t)R * D));
            be->zero(be, m->dA, ACT_BYTES(m, ND));
            if (R > 0) be->scatter_rows(be, m->dC, m->rows, R, D, m->dA, N);
        }
    }
    encoder_backward(m, dfin);
}
