// The transformer (DESIGN.md §1-§2): BERT (post-LN encoder + MLM head) and GPT (pre-LN decoder +
// LM head) with every attention variant, forward and hand-written backward, written once
// against kernels/ops.h.  A Model owns its parameter and gradient buffers (one contiguous
// buffer each, laid out by the ParamTable) and one activation arena sized up front from
// (max_batch, max_seq): nothing is allocated inside a step.
//
// Gradient accumulation: model_backward ADDS d(sum of token losses)/dθ / loss_divisor into the
// gradient buffer.  For one micro-batch, loss_divisor = model_label_count() gives the gradient
// of the mean loss that model_forward returned.  Over several micro-batches (and workers),
// pass the total number of labelled positions of the global batch to every call so the
// accumulated gradient is that of the global mean.  model_zero_grad clears it.
#ifndef MHE_TRAINER_MODEL_H
#define MHE_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/ops.h"
#include "trainer/config/config.h"
#include "trainer/model/params.h"
#include "trainer/model/task_batch.h"

typedef struct Model Model;

// The backend cfg asks for (runtime.device, .precision, .threads, .attention_core) on the GPU of
// `local_rank` when it is cuda; verbose: the backend says which attention core runs each layer
// shape.  A core that does not exist or cannot run here: the message and exit status 2.
Backend *backend_for_config(const Config *cfg, int local_rank, int verbose);

// cfg must be resolved (config_resolve/config_load).  The model keeps its own copy of the
// config and parameter table; `be` must outlive it.  Parameters start at zero: call
// model_init_params or model_set_params.
Model *model_create(const Config *cfg, Backend *be, int max_batch, int max_seq);
// The same, counting `state_per_param` more floats per parameter (the optimizer state the
// caller will allocate in the same memory) in the memory check: before anything is allocated,
// weights + gradients + activation arena + state are compared with the memory available (the
// device's free memory for a device backend, MemAvailable for the CPU), and a model that does
// not fit ends with one line (exit 2) saying how much it needs and has.
Model *model_create_with_state(const Config *cfg, Backend *be, int max_batch, int max_seq,
                               double state_per_param);
void model_free(Model *m);

// param_init on the host (seed) and upload.
void model_init_params(Model *m, uint64_t seed);
// Host <-> parameter buffer, `total` floats in ParamTable order.
void model_set_params(Model *m, const float *host);
void model_get_params(const Model *m, float *host);
void model_get_grads(const Model *m, float *host);

// Buffers in the backend's memory space, for the optimizer and the all-reduce.
float *model_params(Model *m);
float *model_grads(Model *m);
const ParamTable *model_param_table(const Model *m);
size_t model_param_count(const Model *m);
void model_zero_grad(Model *m);

// Selects the mhe_add / mhe_mul fast paths (default: cfg->attention.fast_path).
void model_set_fast_path(Model *m, int on);
// Fused Q/K/V projections (default on wherever the attention type allows, attention/variant.h
// attn_qkv_fusable): one GEMM for the three projections and one for their backward, q, k, v
// laid out as column slices of one buffer.  Off: one GEMM per projection (the same sums; the
// tests compare the two).  Re-lays out the activations: call it between steps (the last
// forward's activations are gone).  model_fused_qkv says whether the model fuses them.
void model_set_fused_qkv(Model *m, int on);
int model_fused_qkv(const Model *m);
// Dropout masks are keyed by (seed, forward call counter); the counter advances per forward
// and model_set_dropout_seed resets it to 0.  Data-parallel workers should use distinct seeds
// (e.g. mixed with the rank); a resumed run sets the counter it had reached.
void model_set_dropout_seed(Model *m, uint64_t seed);
void model_set_dropout_counter(Model *m, uint64_t counter);
uint64_t model_dropout_counter(const Model *m);

// Host inputs, [B, T] each: ids; type_ids (bert; NULL = 0); attn_mask (1 real, 0 padding;
// NULL = all real); labels (< 0, e.g. -100, = not scored; used as given, the CLM shift is the
// loader's job; NULL = no loss).  train != 0 enables dropout.  Returns the mean loss over the
// labelled positions (0 when none).  B <= max_batch, T <= max_seq.
float model_forward(Model *m, const int32_t *ids, const int32_t *type_ids,
                    const int32_t *attn_mask, const int32_t *labels, int B, int T, int train);
// Accumulates gradients of the last forward (see the top of this file).  Overwrites the
// logits (they become dlogits): read them before.  loss_divisor <= 0 means model_label_count.
void model_backward(Model *m, double loss_divisor);

// Fine-tuning (issue 14): when cfg->task.type != TASK_NONE the model has the task head's
// parameters (task.*, see params.h and task_head.c) instead of the MLM/LM head, and only these
// three calls run it (model_forward / model_backward refuse).  model_forward_task returns the mean
// loss over the labelled rows (0 when no labels; a row is unlabelled when its label < 0, its
// target is NaN or its start/end < 0).  model_backward_task adds d(sum of row losses)/dθ /
// loss_divisor (<= 0: the labelled rows of the last forward) exactly as model_backward does, so
// accumulation over micro-batches and workers gives the global-batch mean; model_label_count and
// model_loss_sum count rows.  Outputs of the last forward, host copy, row-major: classification
// [B, num_labels] logits; regression [B] values; span [B, T, 2] (start, end) logits.
float model_forward_task(Model *m, const TaskBatch *b, int train);
void model_backward_task(Model *m, double loss_divisor);
void model_download_task_outputs(const Model *m, float *host);

// Full logits (default on): the head runs on every position and model_download_logits gives [B, T, V].
// Off: when labels are given, the head (MLM transform, decoder, loss) runs only on the
// labelled positions — same loss and gradients, far fewer flops for MLM — and model_download_logits
// holds model_label_count() rows [M, V] in (b, t) order.  Needs the backend's gather_rows.
void model_set_full_logits(Model *m, int on);
int model_full_logits(const Model *m);  // whether the head runs on every position (see above)

// Called during model_backward as parameter gradients become final, so the caller can start
// reducing them while the rest of the backward pass runs: stage = layers after the output head
// (and final LayerNorm), stage = l after layer l, stage = -1 after the embeddings.  NULL clears.
typedef void (*ModelBackwardHook)(void *ctx, int stage);
void model_set_backward_hook(Model *m, ModelBackwardHook hook, void *ctx);

// Labelled positions of the last forward.
long model_label_count(const Model *m);
// Sum of token losses of the last forward (exact numerator for global means).
double model_loss_sum(const Model *m);
// Logits [B, T, V] (or [M, V], see model_set_full_logits) of the last forward, as fp32 rows of V
// (the backend keeps them with rows ops_head_ld apart); valid until model_backward.
void model_download_logits(const Model *m, float *host);

// Bytes of the activation arena, of parameters+gradients, and flops of one forward+backward
// at (B, T) counting matmuls and attention products (multiply-add = 2).
size_t model_arena_bytes(const Model *m);
size_t model_state_bytes(const Model *m);
double model_step_flops(const Model *m, int B, int T);
// The forward flops train.recompute adds to a step at (B, T), counted like model_step_flops but
// not in it: MFU counts the model's work, the step's time includes this (0 for `none`).
double model_recompute_flops(const Model *m, int B, int T);

#endif
