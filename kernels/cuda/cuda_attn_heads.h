// defines: the per-head work around an attention core that runs on bf16 operands (the cuDNN
// core, the gemm_bf16 core): per-head copies of shared or scaled heads, the sums of per-head
// gradients back into a shared head, out_scale / out_shift and their gradients.  The kernels
// live in cuda_attn_heads.cu; each call records its cost and runs on the backend's stream.
#ifndef MHE_KERNELS_CUDA_ATTN_HEADS_H
#define MHE_KERNELS_CUDA_ATTN_HEADS_H

#include "kernels/cuda/cuda_internal.h"

// fp32 words rounded up to 64 bytes: where each part of a bf16 core's saved and scratch buffers
// starts (cuDNN's operands need 16-byte alignment, the 8-wide kernels 16-byte groups).
static inline size_t attn_words_up16(size_t words) { return (words + 15) / 16 * 16; }

// y [rows, cols] = bf16(x ⊙ scale[col] + shift[col]) (either vector may be null: 1, 0); x may be y.
void attn_heads_affine(Backend *be, const __nv_bfloat16 *x, const float *scale, const float *shift, size_t rows,
                       int cols, __nv_bfloat16 *y, MheCost cost);
// dst [rows, n, d] (contiguous) = bf16(src head h / ratio ⊙ scale[h]) for src rows ld apart (scale
// null: 1).  d a multiple of 8 and dst 16-byte aligned (one 16-byte store per 8 elements).
void attn_heads_expand(Backend *be, const __nv_bfloat16 *src, int ld, int ratio, const float *scale, size_t rows,
                       int n, int d, __nv_bfloat16 *dst);
// dst head g (rows ld apart) = bf16(Σ of the ratio per-head gradients of src [rows, n, d] it
// served), added in head order: the gradient of a shared head.
void attn_heads_sum(Backend *be, const __nv_bfloat16 *src, size_t rows, int n, int d, int ratio, int ld,
                    __nv_bfloat16 *dst);
// dscale[c] += Σ_rows dout ⊙ o, dshift[c] += Σ_rows dout over [rows, cols] (either output may be
// null; o is read only for dscale): the out_scale / out_shift gradients, deterministic.
void attn_heads_scale_shift_grads(Backend *be, const __nv_bfloat16 *dout, const __nv_bfloat16 *o, int rows, int cols,
                                  float *dscale, float *dshift);

#endif
