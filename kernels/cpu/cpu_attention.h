// Shared by the CPU's two attention cores: the fused one (cpu_attention.c, the default) and the
// reference one it is tested against (cpu_attention_ref.c, MHE_CPU_ATTENTION=ref).
#ifndef MHE_KERNELS_CPU_ATTENTION_H
#define MHE_KERNELS_CPU_ATTENTION_H

#include "kernels/ops.h"

// Installs the reference core's sizes, forward and backward.
void cpu_install_attention_ref(Backend *be);
// d out_scale += Σ_rows dO ⊙ (P V), d out_shift += Σ_rows dO (either may be NULL); pv_all is the
// forward's unscaled P V [B*T, n*v_dim], saved after the row log-sum-exps.
void cpu_attention_affine_grads(Backend *be, const AttnShape *s, const float *pv_all, const Act *dout,
                                float *dout_scale, float *dout_shift);

#endif
