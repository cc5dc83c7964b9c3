// AdamW and LAMB on host fp32 buffers, and global-norm gradient clipping.
//
// The parameters, gradients and the two moments are flat fp32 arrays laid out by the parameter
// table.  An OptimState owns the moments of one contiguous range [begin, end) of that flat
// buffer: the whole buffer for plain data parallelism, one shard of it under ZeRO-1.  The
// update reads params/grads at their global offsets and m/v at (offset - begin), so a shard's
// state is only (end - begin) floats wide.  The CUDA backend mirrors these semantics in kernels.
//
// LAMB needs per-tensor norms of the weights and of the Adam update; a tensor may straddle two
// shards.  optim_step computes the norms over its own range into `norms` and, when given a
// reducer, lets the caller sum them across ranks (e.g. MPI_Allreduce) before the weights move.
// With one range covering everything the reducer is unnecessary.  Summation order differs
// between shardings, so LAMB is bit-exact only for a fixed world size (as resume needs).
#ifndef MHE_TRAINER_OPTIM_H
#define MHE_TRAINER_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/config/config.h"
#include "trainer/io/optim_state.h"
#include "trainer/model/params.h"

// OptimState (trainer/io/optim_state.h): begin, end, m, v, step, LAMB norm scratch.

// Zeroed moments for [begin, end) of `t`'s buffer (begin = 0, end = t->total when unsharded).
void optim_state_init(OptimState *s, const ParamTable *t, size_t begin, size_t end);
void optim_state_free(OptimState *s);

// Sums `norms[0 .. n)` across ranks in place (an all-reduce).  NULL when unsharded.
typedef void (*OptimReduceFn)(double *norms, int n, void *ctx);

// Which tensors get weight decay (and, for LAMB, the trust ratio): weights only, every tensor
// with o->decay_all.
int optim_decays(const OptimConfig *o, const ParamTensor *p);

// One update with learning rate `lr` of params[begin, end) from grads (same global offsets).
//
// AdamW (Loshchilov & Hutter; identical to torch.optim.AdamW):
//   t += 1;  w *= 1 - lr*wd  (decayed tensors);  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// LAMB (You et al. 2020, Algorithm 2 with bias correction, as NVIDIA's BERT recipe):
//   m, v as above;  u = (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps) + wd w
//   r = ||w|| / ||u|| per tensor when both norms are > 0, else 1;  w -= lr r u
//   Tensors excluded from weight decay (biases, LayerNorm, embeddings unless decay_all) are
//   also excluded from the trust ratio (r = 1), as Google's BERT LAMB and apex's FusedLAMB
//   (use_nvlamb=False) do.
void optim_step(OptimState *s, const OptimConfig *o, const ParamTable *t, float *params,
                const float *grads, float lr, OptimReduceFn reduce, void *reduce_ctx);
// optim_step with the gradients multiplied by grad_scale as they are read (the clip
// coefficient): the same bits as scaling them in place first (the product is rounded before
// any other use), without that pass over every gradient.  The gradients are left as they were.
void optim_step_scaled(OptimState *s, const OptimConfig *o, const ParamTable *t, float *params,
                       const float *grads, float lr, float grad_scale, OptimReduceFn reduce, void *reduce_ctx);

// The same update in a backend's memory (the CUDA path), through kernels/ops.h:
// adamw_update, or lamb_direction + sum_squares + axpy.  params/grads are indexed by global
// offset; m, v and the LAMB scratch u ((end - begin) floats, unused by AdamW) by offset - begin,
// all in the backend's space.  `s` supplies the range, the step counter and the host norm
// scratch; its host m/v are not touched (download into them before a checkpoint).  Gradients
// are multiplied by grad_scale first (a clip coefficient or 1/loss-scale).  Agrees with
// optim_step bit for bit on the CPU backend (both use kernels/optim_math.h), to fp32 rounding on
// CUDA (nvcc contracts multiply-adds).
struct Backend;
void optim_step_backend(struct Backend *be, OptimState *s, const OptimConfig *o, const ParamTable *t,
                        float *params, const float *grads, float *m, float *v, float *u, float lr,
                        float grad_scale, OptimReduceFn reduce, void *reduce_ctx);

// Sum of squares of g[0 .. n) in double (the caller all-reduces it when sharded).
double optim_sq_sum(const float *g, size_t n);
// Multiplier torch.nn.utils.clip_grad_norm_ applies for a global norm: min(1, max/(norm+1e-6));
// 1 when clipping is off (max_norm <= 0) or the norm is not finite (the caller skips the step).
float optim_clip_coef(double norm, float max_norm);
// Clips g[0 .. n) to global norm max_norm in place and returns the pre-clip norm.
double optim_clip_grad_norm(float *g, size_t n, float max_norm);

#endif
