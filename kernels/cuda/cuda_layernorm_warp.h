// defines: the warp-per-row LayerNorm kernels' interface (bf16 rows of 256..1024 by 256).
// The LayerNorm kernels for bf16 rows of 256 to 1024 columns by 256 (BERT-base's and GPT-2 small's
// 768), one warp per row (cuda_layernorm_warp.cu), and what cuda_layernorm.cu shares with them.
#ifndef MHE_KERNELS_CUDA_LAYERNORM_WARP_H
#define MHE_KERNELS_CUDA_LAYERNORM_WARP_H

#include <initializer_list>

#include "kernels/cuda/cuda_internal.h"

// The dropped-out branch of layernorm_backward_dropout: off, or dr = dropout(dx) with the
// dropout op's scale, key and threshold, into fp32 dr or (bf16) drb.
struct LnDrop {
    int on;
    float inv;
    uint64_t key;
    uint32_t threshold;
    float *dr;
    __nv_bfloat16 *drb;
};

// Whether the warp kernels take rows of C columns whose buffers are all 16-byte aligned (nulls
// allowed).
bool ln_warp_takes(int C, std::initializer_list<const void *> buffers);

// LayerNorm's backward over N bf16 rows, `rows` per block (at least 16; chunks blocks): dx in
// bf16 (dxb, or null), the chunks' dγ/dβ partials (pg, pb, or null; smem: 2 C floats when
// either), dropout(dx) into drop.drb when drop.on.
void ln_warp_backward(Backend *be, MheCost cost, const __nv_bfloat16 *dy, const __nv_bfloat16 *x,
                      const float *gamma, const float *mean, const float *rstd, int N, int C, int rows, int chunks,
                      __nv_bfloat16 *dxb, int accumulate, float *pg, float *pb, const LnDrop &drop, size_t smem);
// The residual step s = x + dropout(r) (rounded to bf16 when round_sum), y = LayerNorm(s), on
// bf16 rows: s and y in bf16, the statistics in fp32.
void ln_warp_residual_forward(Backend *be, MheCost cost, const __nv_bfloat16 *x, const __nv_bfloat16 *r, float p,
                              uint64_t key, uint32_t threshold, const float *gamma, const float *beta, int N, int C,
                              float eps, __nv_bfloat16 *sb, __nv_bfloat16 *yb, float *mean, float *rstd,
                              int round_sum);

#endif
