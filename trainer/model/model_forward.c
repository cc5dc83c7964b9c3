// The forward pass: embeddings, post-LN (bert) or pre-LN (gpt) layers (encoder_forward, shared
// with the task heads of task_head.c), then the pretraining head and its loss.
#include "common/error.h"
#include "trainer/model/model_internal.h"

static GeluKind gelu_kind(const Model *m) {
    return m->cfg.model.activation == ACT_GELU_TANH ? GELU_TANH : GELU_ERF;
}

static float hidden_p(const Model *m) { return m->train ? m->cfg.model.dropout : 0.0f; }

// r = x + dropout(r), then y = LayerNorm(r): one backend call where the backend fuses them.
static void residual_layernorm(Backend *be, const Act *x, Act *r, float p, uint64_t seed, uint64_t site,
                               const float *gamma, const float *beta, int N, int D, float eps, Act *y,
                               float *mean, float *rstd) {
    if (be->residual_layernorm_forward) {
        be->residual_layernorm_forward(be, x, r, p, seed, site, gamma, beta, N, D, eps, r, y, mean, rstd);
        return;
    }
    be->dropout(be, r, r, (size_t)N * D, p, seed, site);
    be->add(be, x, r, r, (size_t)N * D);
    be->layernorm_forward(be, r, gamma, beta, N, D, eps, y, mean, rstd);
}

// Layer l from a->x.  again != 0 is its recomputation before the backward (layer_recompute):
// the post-LN output goes to the free scratch dB (xs[l+1] already holds it and the LayerNorm
// is only rerun for its input r2 and statistics), and pre-LN stops after the GELU (the backward
// reads nothing later: the down projection's output is the next layer's input, kept).
static void layer_forward(Model *m, int l, int again) {
    Backend *be = m->be;
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    const ModelConfig *mc = &m->cfg.model;
    const int N = m->B * m->T, D = mc->hidden, F = mc->ffn;
    const float pd = hidden_p(m);
    const uint64_t site = m->drop_base + 1 + 3 * (uint64_t)l;
    // Pre-LN: LN1 of a layer after the first ran in the previous layer's residual step, except
    // in a recomputation (the previous layer is not rerun).
    if (mc->norm == NORM_PRE && (l == 0 || again))
        be->layernorm_forward(be, a->x, MP(m, p->ln1_g), MP(m, p->ln1_b), N, D, mc->ln_eps, a->a_in,
                              a->ln1_mean, a->ln1_rstd);
    attn_forward(m, l, a->r1);
    // r1 = x + drop(attention), then LN1 (post-LN: h) or LN2 (pre-LN, where h is r1: f_in).
    if (mc->norm == NORM_POST)
        residual_layernorm(be, a->x, a->r1, pd, m->drop_seed, site + 1, MP(m, p->ln1_g), MP(m, p->ln1_b), N, D,
                           mc->ln_eps, a->h, a->ln1_mean, a->ln1_rstd);
    else
        residual_layernorm(be, a->x, a->r1, pd, m->drop_seed, site + 1, MP(m, p->ln2_g), MP(m, p->ln2_b), N, D,
                           mc->ln_eps, a->f_in, a->ln2_mean, a->ln2_rstd);
    linear_gelu_forward(be, gelu_kind(m), a->f_in, MP(m, p->up_w), MP(m, p->up_b), N, D, F, a->u, a->g);
    if (again && mc->norm == NORM_PRE) return;
    be->linear_forward(be, a->g, MP(m, p->down_w), MP(m, p->down_b), N, F, D, a->r2);
    if (mc->norm == NORM_POST) {
        residual_layernorm(be, a->h, a->r2, pd, m->drop_seed, site + 2, MP(m, p->ln2_g), MP(m, p->ln2_b), N, D,
                           mc->ln_eps, again ? m->dB : m->xs[l + 1], a->ln2_mean, a->ln2_rstd);
    } else {
        // The next layer's input h + drop(FFN), and the LayerNorm that reads it first — the next
        // layer's LN1 or the final one — in one residual step.
        const int last = l == mc->layers - 1;
        const LayerParams *q = last ? NULL : &m->lp[l + 1];
        LayerActs *b = last ? NULL : &m->la[l + 1];
        residual_layernorm(be, a->h, a->r2, pd, m->drop_seed, site + 2, MP(m, last ? m->fln_g : q->ln1_g),
                           MP(m, last ? m->fln_b : q->ln1_b), N, D, mc->ln_eps, last ? m->fin : b->a_in,
                           last ? m->fln_mean : b->ln1_mean, last ? m->fln_rstd : b->ln1_rstd);
    }
}

// The forward kept every layer's input xs[l] (and, for `attention`, everything outside the
// attention block); rerunning the same ops on the same inputs with the dropout sites of the same
// forward (m->drop_base) gives every value bit for bit, so the backward cannot tell.
void layer_recompute(Model *m, int l) {
    const ModelConfig *mc = &m->cfg.model;
    if (m->recompute == RECOMPUTE_NONE || l == mc->layers - 1) return;
    if (m->recompute == RECOMPUTE_LAYER) {
        layer_forward(m, l, 1);
        return;
    }
    LayerActs *a = &m->la[l];
    const LayerParams *p = &m->lp[l];
    if (mc->norm == NORM_PRE)
        m->be->layernorm_forward(m->be, a->x, MP(m, p->ln1_g), MP(m, p->ln1_b), m->B * m->T, mc->hidden,
                                 mc->ln_eps, a->a_in, a->ln1_mean, a->ln1_rstd);
    attn_core_forward(m, l);
}

// Each row 1s then 0s, at least one 1: the loaders' trailing padding, which a backend's
// attention core may take as per-sequence key counts (ops.h AttnShape.key_mask_trailing).
static int mask_is_trailing(const int32_t *mask, int B, int T) {
    for (int b = 0; b < B; b++) {
        const int32_t *row = mask + (size_t)b * T;
        if (row[0] != 1) return 0;
        int j = 1;
        while (j < T && row[j] == 1) j++;
        for (; j < T; j++)
            if (row[j] != 0) return 0;
    }
    return 1;
}


void encoder_forward(Model *m, const int32_t *ids, const int32_t *type_ids, const int32_t *attn_mask, int B,
                     int T, int train, const char *who) {
    Backend *be = m->be;
    const ModelConfig *mc = &m->cfg.model;
    if (B < 1 || T < 1 || B > m->max_batch || T > m->max_seq)
        mhe_fatal("%s: batch %d x seq %d exceeds the arena (%d x %d)", who, B, T, m->max_batch, m->max_seq);
    const int N = B * T, D = mc->hidden, V = mc->vocab_size, L = mc->layers;
    for (int i = 0; i < N; i++)
        if (ids[i] < 0 || ids[i] >= V) mhe_fatal("%s: token id %d out of range [0, %d)", who, ids[i], V);
    if (type_ids && mc->arch == ARCH_BERT)
        for (int i = 0; i < N; i++)
            if (type_ids[i] < 0 || type_ids[i] >= mc->type_vocab)
                mhe_fatal("%s: token type %d out of range [0, %d)", who, type_ids[i], mc->type_vocab);
    m->B = B;
    m->T = T;
    m->train = train != 0;
    model_weights_steady(m, m->train);
    m->has_types = type_ids != NULL && mc->arch == ARCH_BERT;
    m->has_mask = attn_mask != NULL;
    m->mask_trailing = m->has_mask && mask_is_trailing(attn_mask, B, T);
    m->drop_base = m->drop_counter++ * (uint64_t)m->sites_per_step;
    be->upload(be, m->ids, ids, (size_t)N * sizeof(int32_t));
    if (m->has_types) be->upload(be, m->types, type_ids, (size_t)N * sizeof(int32_t));
    if (m->has_mask) be->upload(be, m->mask, attn_mask, (size_t)N * sizeof(int32_t));

    const float pd = hidden_p(m);
    const size_t ND = (size_t)N * D;
    if (mc->arch == ARCH_BERT && be->embedding_layernorm_forward) {
        be->embedding_layernorm_forward(be, m->ids, m->has_types ? m->types : NULL, MP(m, m->word), MP(m, m->pos),
                                        MP(m, m->type), MP(m, m->eln_g), MP(m, m->eln_b), B, T, D, mc->ln_eps, pd,
                                        m->drop_seed, m->drop_base, m->emb, m->xs[0], m->emb_mean, m->emb_rstd);
    } else {
        if (mc->arch == ARCH_BERT) {
            be->embedding_forward(be, m->ids, m->has_types ? m->types : NULL, MP(m, m->word),
                                  MP(m, m->pos), MP(m, m->type), B, T, D, m->emb);
            be->layernorm_forward(be, m->emb, MP(m, m->eln_g), MP(m, m->eln_b), N, D, mc->ln_eps,
                                  m->xs[0], m->emb_mean, m->emb_rstd);
        } else {
            be->embedding_forward(be, m->ids, NULL, MP(m, m->word), MP(m, m->pos), NULL, B, T, D, m->xs[0]);
        }
        be->dropout(be, m->xs[0], m->xs[0], ND, pd, m->drop_seed, m->drop_base);
    }
    attn_prepare(m);
    for (int l = 0; l < L; l++) layer_forward(m, l, 0);  // pre-LN: the last one ends with the final LN
}

float model_forward(Model *m, const int32_t *ids, const int32_t *type_ids,
                    const int32_t *attn_mask, const int32_t *labels, int B, int T, int train) {
    Backend *be = m->be;
    const ModelConfig *mc = &m->cfg.model;
    if (m->cfg.task.type != TASK_NONE)
        mhe_fatal("model_forward: this model has a task head (task.type set): use model_forward_task");
    encoder_forward(m, ids, type_ids, attn_mask, B, T, train, "model_forward");
    const int N = B * T, D = mc->hidden, V = mc->vocab_size;
    // Labels first: they decide which rows the head runs on.
    m->label_count = 0;
    m->loss_sum = 0;
    if (labels) {
        for (int i = 0; i < N; i++) {
            if (labels[i] >= V) mhe_fatal("model_forward: label %d out of range [0, %d)", labels[i], V);
            m->label_count += labels[i] >= 0;
        }
        be->upload(be, m->labels, labels, (size_t)N * sizeof(int32_t));
    }
    const int compact = labels && !m->full_logits;
    const int R = compact ? (int)m->label_count : N;
    const Act *head_in = m->fin;
    const int32_t *head_labels = m->labels;
    if (compact) {
        int32_t *rows = m->host_rows, *lab = m->host_rows + N;
        int M = 0;
        for (int i = 0; i < N; i++)
            if (labels[i] >= 0) {
                rows[M] = i;
                lab[M++] = labels[i];
            }
        if (M > 0) {
            be->upload(be, m->rows, rows, (size_t)M * sizeof(int32_t));
            be->upload(be, m->labels_c, lab, (size_t)M * sizeof(int32_t));
            be->gather_rows(be, m->fin, m->rows, M, D, m->fin_c, B * T);
        }
        head_in = m->fin_c;
        head_labels = m->labels_c;
    }
    m->head_rows = R;
    m->compact = compact;
    if (R > 0) {
        const size_t RD = (size_t)R * D;
        const Act *last = head_in;
        if (mc->arch == ARCH_BERT) {
            be->linear_forward(be, head_in, MP(m, m->hd_w), MP(m, m->hd_b), R, D, D, m->t1);
            be->gelu_forward(be, gelu_kind(m), m->t1, m->t2, RD);
            be->layernorm_forward(be, m->t2, MP(m, m->hln_g), MP(m, m->hln_b), R, D, mc->ln_eps,
                                  m->t3, m->t3_mean, m->t3_rstd);
            last = m->t3;
        }
        be->linear_forward_ld(be, last, MP(m, m->word), m->head_bias != NO_PARAM ? MP(m, m->head_bias) : NULL,
                              R, D, V, m->logits_ld, m->logits);
    }
    if (!labels) {
        m->label_count = -1;
        return 0.0f;
    }
    if (R == 0) return 0.0f;
    be->cross_entropy_forward(be, m->logits, head_labels, R, V, m->logits_ld, m->loss, m->lse);
    // R floats back to the host; summing in double keeps the mean exact to float precision.
    float host_loss[4096];
    for (int i0 = 0; i0 < R; i0 += 4096) {
        int c = R - i0 < 4096 ? R - i0 : 4096;
        be->download(be, host_loss, m->loss + i0, (size_t)c * sizeof(float));
        for (int i = 0; i < c; i++) m->loss_sum += host_loss[i];
    }
    return m->label_count ? (float)(m->loss_sum / m->label_count) : 0.0f;
}
