// The interface every attention variant implements (one file each in this folder) and the
// registry that lists them.  A variant is a set of projections around the generic attention
// core (kernels/ops.h AttnShape): it names its parameter tensors, plans how its Q/K/V feed the
// core, computes them (pre-core forward) and takes their gradients back to the layer input
// (post-core backward).  The output projection `o`, the core and dropout are shared
// (attention.c).  Its config keys and checks are its spec in trainer/config/attention_types.c.
#ifndef MHE_TRAINER_MODEL_ATTENTION_VARIANT_H
#define MHE_TRAINER_MODEL_ATTENTION_VARIANT_H

#include "kernels/ops.h"
#include "trainer/config/config.h"
#include "trainer/model/params.h"

typedef struct Model Model;

// One of the variant's tensors of a layer, named "layers.<l>.attn.<name>".
typedef struct {
    const char *name;
    ParamKind kind;
    int rows, cols;        // cols 0: a vector
    float init_center;     // PARAM_HEAD_EMBED: init_center + N(0, attention.embed_std)
} AttnTensor;

#define ATTN_MAX_TENSORS 16

// Where the core reads K or V from.
typedef enum {
    ATTN_SRC_OWN,          // its own buffer (projection, or materialised per-head copy)
    ATTN_SRC_INPUT,        // the layer input itself ([N, D]; el_att)
    ATTN_SRC_K,            // the key buffer (V only; skv)
} AttnSource;

// How the sublayer maps onto the core: widths of the projections (0 = none), of the per-head
// tensors materialised before the core (0 = none), and the core's head sharing.
typedef struct {
    int qc, kc, vc;               // projection output columns
    int qhc, khc, vhc;            // materialised per-head columns
    int q_heads, k_heads, v_heads, qk_dim, v_dim;
    AttnSource k_src, v_src;
    int key_bias;                 // core gets a [N, n] key bias
    // The key bias is scale·k·e_h^Q (tensor key_bias_q_tensor): per-head queries q + e_h^Q
    // (head_expand into the qhc = n·d copies) give the same scores.  A backend whose faster core
    // serves the shape only without a key bias (ops.h attention_key_bias) gets that form
    // (attn_plan_on); the variant's forward and backward follow plan.key_bias.
    int key_bias_as_q, key_bias_q_tensor;
    int out_scale, out_shift;     // core output ⊙ small[out_scale_at..] / + tensor out_tensor
    int out_scale_at;             // offset in `small` of the [n, d] output scale
    int out_tensor;               // variant tensor receiving d(out_scale | out_shift)
    // The materialised Q heads are q ⊙ small[q_scale_at..] per head ([n, d]): a backend whose
    // core scales Q itself (ops.h attention_q_scale) reads q and the scale instead, and its dQ
    // is still per head (the qhc-wide gradient).
    int q_scale, q_scale_at;
    int small;                    // floats of per-layer small tensors (1+e, products)
    int extra;                    // columns of a per-layer [N, extra] buffer (latents), saved
    double proj_macs;             // multiply-adds per token of the projections (flop count)
    // The projections of the layer input a_in into q, k, v (widths qc, kc, vc) that
    // attn_project computes: tensor indices of each weight and bias, -1 when the variant has
    // none or fills that buffer itself (mla).  attn_qkv_tensors lays the weights out as one
    // block and the biases as another, so the three can run as one GEMM (attn_qkv_fusable).
    int proj_w[3], proj_b[3];
} AttnPlan;

typedef struct {
    const char *name;             // == its spec's name (checked by the registry)
    // Writes the layer's tensors (before the shared `o`) into out[ATTN_MAX_TENSORS]; returns
    // how many.  Their order is the parameter table's order.
    int (*tensors)(const Config *cfg, AttnTensor *out);
    AttnPlan (*plan)(const Config *cfg, int fast);
    // Pre-core forward of layer l: from a->a_in fill the plan's q/k/v (or per-head copies),
    // the key bias, `small` and `extra`.
    void (*forward)(Model *m, int l);
    // Post-core backward: given dq/dk/dv (and dkbias) from the core, write d_ain — its first
    // term overwrites (accumulate 0) or adds (1, the caller's residual share already there),
    // later ones add: no separate zeroing pass — and accumulate into the variant's parameter
    // gradients.
    void (*backward)(Model *m, int l, Act *d_ain, int accumulate);
    // Extra keys of the exported Hugging Face config.json (besides attention_type).
    void (*export_keys)(const Config *cfg, void (*put)(void *ctx, const char *key, double value),
                        void *ctx);
    // Optional: before the layers of every forward (attn_prepare), what depends on parameters
    // only, for all layers at once (mhe_mul's scales into each layer's `small`); forward then
    // reads it.  NULL: nothing.
    void (*prepare)(Model *m);
} AttnVariant;

// The registry: ATTN_TYPE_COUNT variants in enum order (generated from MHE_ATTENTION_TYPES).
const AttnVariant *attn_variant(AttentionType t);

// Helpers for variant files.
// Appends "<name>.weight" [out, in] and "<name>.bias" [out]; returns the new count.
int attn_linear(AttnTensor *t, int k, const char *weight, const char *bias, int out, int in);
// One projection of the layer input for attn_qkv_tensors (weight NULL: none).
typedef struct {
    const char *weight, *bias;
    int out;
} AttnLinearSpec;
#define ATTN_LINEAR(name, out) ((AttnLinearSpec){name ".weight", name ".bias", (out)})
#define ATTN_NO_LINEAR ((AttnLinearSpec){NULL, NULL, 0})
static inline void attn_set_proj(AttnPlan *p, int wq, int wk, int wv, int bq, int bk, int bv) {
    p->proj_w[0] = wq, p->proj_w[1] = wk, p->proj_w[2] = wv;
    p->proj_b[0] = bq, p->proj_b[1] = bk, p->proj_b[2] = bv;
}
// Appends the q, k, v projections of spec[0..2] from the layer input ([out, in] each): their
// weights first, then their biases, so each forms one contiguous block of the parameter buffer
// and attn_project can run them as one GEMM.  Returns the new count.
int attn_qkv_tensors(AttnTensor *t, int k, const AttnLinearSpec spec[3], int in);
// The shape the plan hands the attention core at B x T, before the model's layout is known (row
// strides 0): head counts and dims, and non-NULL markers, never read, for the key bias,
// out_scale and out_shift; what the cores' choice and attention_sizes look at.
AttnShape attn_plan_shape(const Config *cfg, const AttnPlan *p, int B, int T);
// The variant's plan on backend be for batches of B x T: attn_plan_for, with the key bias turned
// into per-head queries where the backend's core asks for it (AttnPlan.key_bias_as_q).
AttnPlan attn_plan_on(const Config *cfg, Backend *be, int fast, int B, int T);
// A plan with every head separate, widths 0, sources own, qk_dim = v_dim = d, no projections.
AttnPlan attn_plan_base(const Config *cfg);
// The plan's projections (proj_w/proj_b) of a_in into q, k, v: one GEMM over the block when
// the model fuses them (Model.qkv_ld), one per projection otherwise; and their backward into
// d_ain, the first GEMM writing (accumulate 0) or adding (1) as asked, the others adding.
void attn_project(Model *m, int l);
void attn_project_backward(Model *m, int l, Act *d_ain, int accumulate);
// Whether the model's projections can run as one GEMM: at least two, read from a_in, the
// same on the fast and plain paths, weights and biases each adjacent in q, k, v order, and K
// and V the core's own buffers (skv's V is its K: dV comes back in K's layout and would need
// a strided add into dK).
int attn_qkv_fusable(const Model *m);

#endif
