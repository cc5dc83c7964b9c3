// Fine-tuning heads (issue 14) on top of the shared encoder (encoder_forward / encoder_backward):
//   BERT classification / regression: pooler h = tanh(W_p x_0 + b_p) on position 0, dropout
//     (task.classifier_dropout), logits = W_c h + b_c (HF BertForSequenceClassification).
//   GPT classification / regression: logits = W_c x_last, x the final-LN state of the last real
//     token, no pooler, no bias, no dropout (HF GPT2ForSequenceClassification's `score`).
//   Span (both): [start, end] = W_qa x_t + b_qa on every token (HF *ForQuestionAnswering).
// Losses (computed on the host in double from the head's few outputs, identical on every backend):
//   classification CE; regression squared error (HF MSELoss with num_labels = 1); span
//   (CE(start) + CE(end)) / 2 per row, the softmax over the row's real (unpadded) positions.
// model_forward_task returns the mean over labelled rows; model_backward_task adds
// d(sum of row losses)/dθ / divisor, as model_backward does for tokens.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/model/model_internal.h"
#include "trainer/model/task_batch.h"

static int is_span(const Model *m) { return m->cfg.task.type == TASK_SPAN; }
static int has_pooler(const Model *m) { return !is_span(m) && m->cfg.model.arch == ARCH_BERT; }

static float head_dropout(const Model *m) {
    if (!m->train || !has_pooler(m)) return 0.0f;
    float p = m->cfg.task.classifier_dropout;
    return p < 0 ? m->cfg.model.dropout : p;
}

// The dropout site after the encoder's (embeddings, 3 per layer): see sites_per_step.
static uint64_t head_site(const Model *m) { return m->drop_base + 1 + 3 * (uint64_t)m->cfg.model.layers; }

static size_t find(const ParamTable *t, const char *name) {
    const ParamTensor *p = param_table_find(t, name);
    return p ? p->offset : NO_PARAM;
}

void task_head_lookup(Model *m) {
    const ParamTable *t = &m->table;
    m->tk_pool_w = find(t, "task.pooler.weight");
    m->tk_pool_b = find(t, "task.pooler.bias");
    m->tk_cls_w = find(t, "task.classifier.weight");
    m->tk_cls_b = find(t, "task.classifier.bias");
    m->tk_qa_w = find(t, "task.qa.weight");
    m->tk_qa_b = find(t, "task.qa.bias");
    if (m->cfg.task.type == TASK_NONE) return;
    m->tk_C = param_task_outputs(&m->cfg);
    m->tk_width = is_span(m) ? 2 * m->max_seq : m->tk_C;
    const size_t outs = (size_t)m->max_batch * m->tk_width;
    m->tk_host_out = mhe_malloc(outs * sizeof(float));
    m->tk_host_g = mhe_malloc(outs * sizeof(float));
    m->tk_host_rows = mhe_malloc((size_t)m->max_batch * sizeof(int32_t));
}

void task_head_layout(Model *m, Bump *b) {
    const size_t BD = (size_t)m->max_batch * m->cfg.model.hidden;
    const size_t outs = (size_t)m->max_batch * (is_span(m) ? 2 * m->max_seq : param_task_outputs(&m->cfg));
    m->tk_rows = (int32_t *)arena_take(b, (size_t)m->max_batch);
    if (!is_span(m)) {
        m->tk_in = arena_take_act(b, BD);
        m->tk_d2 = arena_take_act(b, BD);
        if (has_pooler(m)) {
            m->tk_pre = arena_take_act(b, BD);
            m->tk_pool = arena_take_act(b, BD);
            m->tk_drop = arena_take_act(b, BD);
            m->tk_d1 = arena_take_act(b, BD);
        }
    }
    m->tk_out = arena_take_act(b, outs);
    m->tk_dout = arena_take_act(b, outs);
}

// Softmax cross-entropy of row z[0..n) (stride s) against class y over the positions where
// ok[i] (NULL: all); adds d(loss)/dz * w into g.  Returns the loss.
static double ce_row(const float *z, int n, int s, const int32_t *ok, int y, double w, float *g) {
    double mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++)
        if (!ok || ok[i]) mx = fmax(mx, z[(size_t)i * s]);
    for (int i = 0; i < n; i++)
        if (!ok || ok[i]) sum += exp(z[(size_t)i * s] - mx);
    const double lse = mx + log(sum);
    for (int i = 0; i < n; i++)
        if (!ok || ok[i]) g[(size_t)i * s] += (float)(w * (exp(z[(size_t)i * s] - lse) - (i == y)));
    return w * (lse - z[(size_t)y * s]);
}

// The loss of the downloaded outputs and its gradient d(sum of row losses)/d outputs.
static void task_loss(Model *m, const TaskBatch *b) {
    const int B = b->B, T = b->T, C = m->tk_C;
    const float *out = m->tk_host_out;
    float *g = m->tk_host_g;
    const size_t n = is_span(m) ? (size_t)B * T * 2 : (size_t)B * C;
    memset(g, 0, n * sizeof(float));
    m->label_count = 0;
    m->loss_sum = 0;
    switch (m->cfg.task.type) {
    case TASK_CLASSIFICATION:
        if (!b->label) break;
        for (int r = 0; r < B; r++) {
            if (b->label[r] < 0) continue;  // unlabelled row (e.g. padding of a last batch)
            if (b->label[r] >= C) mhe_fatal("model_forward_task: label %d out of range [0, %d)", b->label[r], C);
            m->loss_sum += ce_row(out + (size_t)r * C, C, 1, NULL, b->label[r], 1.0, g + (size_t)r * C);
            m->label_count++;
        }
        break;
    case TASK_REGRESSION:
        if (!b->target) break;
        for (int r = 0; r < B; r++) {
            if (isnan(b->target[r])) continue;  // unlabelled row
            const double d = (double)out[r] - b->target[r];
            m->loss_sum += d * d;
            g[r] = (float)(2 * d);
            m->label_count++;
        }
        break;
    case TASK_SPAN:
        if (!b->start || !b->end) break;
        for (int r = 0; r < B; r++) {
            if (b->start[r] < 0 || b->end[r] < 0) continue;  // unlabelled row
            const int32_t *ok = b->attn_mask ? b->attn_mask + (size_t)r * T : NULL;
            const int pos[2] = {b->start[r], b->end[r]};
            for (int k = 0; k < 2; k++) {
                if (pos[k] >= T || (ok && !ok[pos[k]]))
                    mhe_fatal("model_forward_task: row %d: answer position %d is not a real token of the %d", r,
                              pos[k], T);
                // [B, T, 2]: column k of row r, stride 2
                const size_t o = (size_t)r * T * 2 + (size_t)k;
                m->loss_sum += ce_row(out + o, T, 2, ok, pos[k], 0.5, g + o);
            }
            m->label_count++;
        }
        break;
    default: break;
    }
}

float model_forward_task(Model *m, const TaskBatch *b, int train) {
    Backend *be = m->be;
    const TaskType type = m->cfg.task.type;
    if (type == TASK_NONE) mhe_fatal("model_forward_task: the model has no task head (task.type: none)");
    const int B = b->B, T = b->T, D = m->cfg.model.hidden, C = m->tk_C, N = B * T;
    encoder_forward(m, b->ids, m->cfg.model.arch == ARCH_BERT ? b->type_ids : NULL, b->attn_mask, B, T, train,
                    "model_forward_task");
    if (type == TASK_SPAN) {
        // [N, 2] row-major is the [B, T, 2] layout of the outputs.
        be->linear_forward(be, m->fin, MP(m, m->tk_qa_w), MP(m, m->tk_qa_b), N, D, 2, m->tk_out);
    } else {
        const int gpt = m->cfg.model.arch == ARCH_GPT;
        if (gpt && !b->last) mhe_fatal("model_forward_task: a gpt classification batch needs `last`");
        for (int r = 0; r < B; r++) {
            const int t = gpt ? b->last[r] : 0;
            if (t < 0 || t >= T) mhe_fatal("model_forward_task: row %d: last position %d outside [0, %d)", r, t, T);
            m->tk_host_rows[r] = r * T + t;
        }
        be->upload(be, m->tk_rows, m->tk_host_rows, (size_t)B * sizeof(int32_t));
        be->gather_rows(be, m->fin, m->tk_rows, B, D, m->tk_in, B * T);
        const Act *x = m->tk_in;
        if (has_pooler(m)) {
            be->linear_forward(be, m->tk_in, MP(m, m->tk_pool_w), MP(m, m->tk_pool_b), B, D, D, m->tk_pre);
            be->tanh_forward(be, m->tk_pre, m->tk_pool, (size_t)B * D);
            be->dropout(be, m->tk_pool, m->tk_drop, (size_t)B * D, head_dropout(m), m->drop_seed, head_site(m));
            x = m->tk_drop;
        }
        be->linear_forward(be, x, MP(m, m->tk_cls_w), m->tk_cls_b != NO_PARAM ? MP(m, m->tk_cls_b) : NULL, B, D, C,
                       m->tk_out);
    }
    const size_t n = type == TASK_SPAN ? (size_t)N * 2 : (size_t)B * C;
    be->download_act(be, m->tk_host_out, m->tk_out, n);
    task_loss(m, b);
    if (m->label_count == 0 && !b->label && !b->target && !b->start) {
        m->label_count = -1;  // no labels given: forward only
        return 0.0f;
    }
    return m->label_count > 0 ? (float)(m->loss_sum / m->label_count) : 0.0f;
}

void model_backward_task(Model *m, double loss_divisor) {
    Backend *be = m->be;
    if (m->cfg.task.type == TASK_NONE) mhe_fatal("model_backward_task: the model has no task head");
    if (m->label_count < 0) mhe_fatal("model_backward_task: the last forward had no labels");
    if (loss_divisor <= 0) loss_divisor = m->label_count > 0 ? (double)m->label_count : 1.0;
    const int B = m->B, T = m->T, N = B * T, D = m->cfg.model.hidden, C = m->tk_C;
    const size_t n = is_span(m) ? (size_t)N * 2 : (size_t)B * C;
    // Scaled on the host (the same fp32 product the device would form), then stored once in
    // the activation type.
    const float inv = (float)(1.0 / loss_divisor);
    for (size_t i = 0; i < n; i++) m->tk_host_g[i] *= inv;
    be->upload_act(be, m->tk_dout, m->tk_host_g, n);
    if (is_span(m)) {
        be->linear_backward(be, m->tk_dout, m->fin, MP(m, m->tk_qa_w), N, D, 2, m->dA, 0, MG(m, m->tk_qa_w),
                        MG(m, m->tk_qa_b), m->grads_zero);
    } else {
        if (has_pooler(m)) {
            be->linear_backward(be, m->tk_dout, m->tk_drop, MP(m, m->tk_cls_w), B, D, C, m->tk_d1, 0, MG(m, m->tk_cls_w),
                            MG(m, m->tk_cls_b), m->grads_zero);
            be->dropout(be, m->tk_d1, m->tk_d1, (size_t)B * D, head_dropout(m), m->drop_seed, head_site(m));
            // d pre = d pool ⊙ (1 − pool²)
            be->tanh_backward(be, m->tk_pool, m->tk_d1, m->tk_d1, (size_t)B * D);
            be->linear_backward(be, m->tk_d1, m->tk_in, MP(m, m->tk_pool_w), B, D, D, m->tk_d2, 0, MG(m, m->tk_pool_w),
                            MG(m, m->tk_pool_b), m->grads_zero);
        } else {
            be->linear_backward(be, m->tk_dout, m->tk_in, MP(m, m->tk_cls_w), B, D, C, m->tk_d2, 0, MG(m, m->tk_cls_w),
                            NULL, m->grads_zero);
        }
        // Only the pooled position of each row receives the head's gradient.
        be->zero(be, m->dA, ACT_BYTES(m, (size_t)N * D));
        be->scatter_rows(be, m->tk_d2, m->tk_rows, B, D, m->dA, N);
    }
    encoder_backward(m, m->dA);
}

void model_download_task_outputs(const Model *m, float *host) {
    const size_t n = is_span(m) ? (size_t)m->B * m->T * 2 : (size_t)m->B * m->tk_C;
    memcpy(host, m->tk_host_out, n * sizeof(float));
}
