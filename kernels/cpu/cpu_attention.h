// Shared by the CPU's two attention cores: the fused one (cpu_attention.c, the bf16 default) and
// the reference one it is tested against (cpu_attention_ref.c, the fp32 default).
#ifndef MHE_KERNELS_CPU_ATTENTION_H
#define MHE_KERNELS_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu_act.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/ops.h"

// One of q, k, v (or G = dout ⊙ out_scale) as the products read it: fp32 (f) or, in bf16 mode,
// bf16 (h), with its row stride.
typedef struct {
    const float *f;
    const uint16_t *h;
    int ld;
} Src;

// Columns of head h's Q, K, V slices.
static inline size_t qcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->q_heads)) * s->qk_dim; }
static inline size_t kcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->k_heads)) * s->qk_dim; }
static inline size_t vcol(const AttnShape *s, int h) { return (size_t)(h / (s->n_heads / s->v_heads)) * s->v_dim; }
static inline CpuOperand f32_op(const float *x, int ld) { return (CpuOperand){x, NULL, ld}; }
static inline CpuOperand h_op(const uint16_t *x, int ld) { return (CpuOperand){NULL, x, ld}; }
// An activation operand in the backend's storage type.
static inline Src src_of(const Backend *be, const Act *x, int ld) {
    if (act_bf16(be)) return (Src){NULL, act_ch(x), ld};
    return (Src){act_cf(x), NULL, ld};
}
// The forward's products, T x T per head (both cores count the same, so their GFLOP/s compare).
static inline double attention_flops(const AttnShape *s) {
    return 2.0 * s->B * s->n_heads * (double)s->T * s->T * (s->qk_dim + s->v_dim);
}

// Installs the reference core's sizes, forward and backward.
void cpu_install_attention_ref(Backend *be);
// d out_scale += Σ_rows dO ⊙ (P V), d out_shift += Σ_rows dO (either may be NULL); pv_all is the
// forward's unscaled P V [B*T, n*v_dim], saved after the row log-sum-exps.
void cpu_attention_affine_grads(Backend *be, const AttnShape *s, const float *pv_all, const Act *dout,
                                float *dout_scale, float *dout_shift);

#endif
