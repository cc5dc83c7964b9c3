// Internals shared by model.c, model_forward.c, model_backward.c and attention.c.
#ifndef MHE_TRAINER_MODEL_INTERNAL_H
#define MHE_TRAINER_MODEL_INTERNAL_H

#include "trainer/model/attention/variant.h"
#include "trainer/model/model.h"

#define NO_PARAM ((size_t)-1)

// Offsets (floats) of one layer's tensors: the variant's own (in its tensors() order), then
// the shared output projection, norms and FFN.
typedef struct {
    size_t attn[ATTN_MAX_TENSORS];
    size_t wo, bo;
    size_t ln1_g, ln1_b, ln2_g, ln2_b;
    size_t up_w, up_b, down_w, down_b;
} LayerParams;

// One layer's activations.  With train.recompute the layers share buffers (model.c layout):
// `attention` shares the attention block's (a_in when pre-LN, q ... ctx), `layer` shares all but
// x (and pre-LN r2, the next layer's input); the backward recomputes them (layer_recompute).
typedef struct {
    Act *x;                       // layer input [N, D] (previous output)
    Act *a_in;                    // attention input (pre: LN1(x); post: x)
    float *ln1_mean, *ln1_rstd;
    Act *q, *k, *v;
    Act *qh, *kh, *vh;
    Act *kbias;                   // [N, n]
    float *small;                 // AttnPlan.small floats (layer l at Model.small_ld * l of one block)
    Act *extra;                   // [N, AttnPlan.extra]: the variant's saved latents
    float *att_saved;
    Act *ctx;                     // [N, n*d]
    Act *r1;                      // post: LN1 input x + drop(attn); pre: h = x + drop(attn)
    Act *h;                       // post: LN1(r1); pre: == r1
    Act *f_in;                    // post: == h; pre: LN2(h)
    float *ln2_mean, *ln2_rstd;
    Act *u, *g;                   // FFN pre- and post-activation [N, F]
    Act *r2;                      // post: LN2 input; pre: == layer output
} LayerActs;

struct Model {
    Config cfg;
    ParamTable table;
    Backend *be;
    int max_batch, max_seq;
    double state_per_param;     // optimizer floats per parameter, for the memory check
    int fast_path;
    const AttnVariant *variant;
    AttnPlan plan;
    // Fused projections (attn_qkv_fusable, model_set_fused_qkv): q, k, v are column slices of
    // one [N, qc+kc+vc] buffer, and dq, dk, dv of another, with this row stride; 0: separate
    // buffers, each its own width.
    int qkv_ld;
    float *params, *grads;
    LayerParams *lp;
    size_t word, pos, type, eln_g, eln_b, fln_g, fln_b;
    size_t hd_w, hd_b, hln_g, hln_b, head_bias;
    // task head (task_head.c; NO_PARAM when absent)
    size_t tk_pool_w, tk_pool_b, tk_cls_w, tk_cls_b, tk_qa_w, tk_qa_b;

    // activation arena: Act buffers (Backend.act elements) and fp32 ones (statistics, loss,
    // the attention core's work buffers) and int32 indices, each slice 64-byte aligned
    void *arena;
    size_t arena_bytes;
    int32_t *ids, *types, *mask, *labels;
    Act *emb;                     // bert: embedding sum (LN input)
    float *emb_mean, *emb_rstd;
    Act **xs;                     // [L+1] layer outputs, xs[0] = embeddings
    LayerActs *la;
    int small_ld;                 // floats from one layer's `small` to the next (never shared)
    Act *fin;                     // vector the head starts from
    float *fln_mean, *fln_rstd;
    Act *t1, *t2, *t3;            // bert head: dense, gelu, LN
    float *t3_mean, *t3_rstd;
    Act *logits;                  // rows logits_ld apart (ops_head_ld)
    int logits_ld;
    float *loss, *lse;
    int32_t *rows, *labels_c;     // compact head: labelled positions and their labels
    Act *fin_c;                   // compact head input [M, D]
    int full_logits, head_rows;   // head_rows: rows the head ran on (N, or M when compact)
    int compact;                  // the last forward ran the head on labelled rows only
    int32_t *host_rows;           // [N] host scratch
    // backward scratch
    Act *dA, *dB, *dC, *dY, *dF;
    Act *dq, *dk, *dv, *dqh, *dkh, *dvh, *dkbias, *dctx;
    float *dsmall;
    Act *dextra;                  // [N, AttnPlan.extra]
    float *att_scratch;
    // task head activations ([max_batch, D] unless noted) and host scratch
    int32_t *tk_rows;             // [max_batch] the row each sequence's head reads
    Act *tk_in, *tk_pre, *tk_pool, *tk_drop, *tk_d1, *tk_d2;
    Act *tk_out, *tk_dout;        // [max_batch * tk_width] outputs and their gradient
    float *tk_host_out, *tk_host_g;  // host: outputs; d(sum of row losses)/d outputs
    int32_t *tk_host_rows;
    int tk_width;                 // floats per sequence of tk_out (C, or 2T for span)
    int tk_C;                     // outputs per head row: num_labels, 1 (regression), 2 (span)

    // last forward
    int B, T, train, has_types, has_mask;
    int mask_trailing;  // the mask is trailing padding (mask_is_trailing, model_forward.c)
    long label_count;
    double loss_sum;
    uint64_t drop_seed, drop_counter, drop_base;
    ModelBackwardHook bw_hook;   // gradient-readiness notifications (may be NULL)
    // 1 from model_zero_grad to the end of the next backward: every linear layer's backward passes
    // it as ops.h's dW_zero, the promise that its dW and db are still zero.  That holds because
    // each weight has one linear backward per backward pass, and the only tensor with a second
    // writer (the tied word embedding: the head's product, then the embeddings' scatter) meets the
    // linear one first.  A variant that breaks this fails the emulated CUDA tests (the emulation
    // checks the promise).
    int grads_zero;
    void *bw_ctx;
    int sites_per_step;
    RecomputeMode recompute;     // cfg train.recompute: which layer buffers are shared
};

// ops.h weights_steady: the parameters cannot change from a training forward to the end of its
// backward (the optimizer runs after it), so the backend may keep values derived from them for
// that long.  An eval forward ends the promise instead: nothing says a backward follows.
static inline void model_weights_steady(Model *m, int on) {
    Backend *be = m->be;
    if (be->weights_steady) be->weights_steady(be, on ? m->params : NULL, on ? m->table.total : 0);
}

// Embeddings and layers (and GPT's final LayerNorm) of one batch: checks and uploads the inputs,
// sets B, T, train and the dropout base, leaves the encoder output in m->fin [B*T, D].
void encoder_forward(Model *m, const int32_t *ids, const int32_t *type_ids, const int32_t *attn_mask, int B,
                     int T, int train, const char *who);
// Before layer l's backward: recomputes into the shared buffers what train.recompute did not
// keep (nothing for `none` and for the last layer, whose values the forward left there).
void layer_recompute(Model *m, int l);
// Backward from dfin = d loss / d m->fin [B*T, D] (may be m->dA, or m->dY under post-LN) through
// the final LayerNorm, the layers and the embeddings, calling the backward hook as model.h says.
void encoder_backward(Model *m, const Act *dfin);
// Bump allocator over the activation arena; with base == NULL it only measures.
typedef struct Bump {
    char *base;
    size_t used;                  // bytes
    size_t act_size;              // bytes per Act element (the backend's)
} Bump;
float *arena_take(Bump *b, size_t n);      // n floats (or int32), 64-byte aligned; NULL when n == 0 or measuring
Act *arena_take_act(Bump *b, size_t n);    // n Act elements, likewise
// task_head.c: the task head's arena slices and parameter lookup.
void task_head_layout(Model *m, Bump *b);
void task_head_lookup(Model *m);

AttnPlan attn_plan(const Config *cfg);
AttnPlan attn_plan_for(const Config *cfg, int fast);
// AttnShape of layer l for the current (B, T).
AttnShape attn_shape(const Model *m, const LayerActs *a);
// Whether layer l's core applies the plan's per-head query scale itself (no qh to fill).
int attn_core_scales_q(const Model *m, int l);
// out [N, D] = attention sublayer (before dropout) of a->a_in.
void attn_forward(Model *m, int l, Act *out);
// Before the layers of a forward: the variant's per-forward work on parameters only
// (AttnVariant.prepare), for every layer at once.
void attn_prepare(Model *m);
// Its first part alone, what train.recompute: attention recomputes: the variant's pre-core
// forward and the core (q/k/v, per-head copies, key bias, small, extra, att_saved, ctx).
void attn_core_forward(Model *m, int l);
// d_ain = (accumulate: +=) gradient of the attention input, given d_out [N, D] (after dropout
// backward).
void attn_backward(Model *m, int l, const Act *d_out, Act *d_ain, int accumulate);

// u = x Wᵀ + b and g = GELU(u) (ops.h linear_gelu_forward, or the two ops).
void linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N, int in,
                         int out, Act *u, Act *g);
// dx = (dy W) * gelu'(u), dW += dyᵀ x, db += colsum(dy) (ops.h linear_backward_gelu, or the ops).
void linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N, int in,
                          int out, const Act *u, Act *dx, float *dW, float *db, int dW_zero);
// Act pointer p advanced by i elements of the model's backend.
#define AO(m, p, i) act_at((m)->be, (p), (i))
// Bytes of n Act elements (the memory ops count bytes).
#define ACT_BYTES(m, n) ((size_t)(n) * dtype_size((m)->be->act))

// Row strides of the layer's q, k, v and of dq, dk, dv (see Model.qkv_ld).
#define LDQ(m) ((m)->qkv_ld ? (m)->qkv_ld : (m)->plan.qc)
#define LDK(m) ((m)->qkv_ld ? (m)->qkv_ld : (m)->plan.kc)
#define LDV(m) ((m)->qkv_ld ? (m)->qkv_ld : (m)->plan.vc)

#define MP(m, off) ((m)->params + (off))
#define MG(m, off) ((m)->grads + (off))
// Parameter / gradient of tensor i of layer l's attention variant.
#define AP(m, l, i) MP(m, (m)->lp[l].attn[i])
#define AG(m, l, i) MG(m, (m)->lp[l].attn[i])

#endif
