// defines: the per-head kernels around the bf16 attention cores (cuda_attn_heads.h): per-head
// copies, sums of per-head gradients, out_scale / out_shift and their gradients.  Moved from the
// cuDNN core so the gemm_bf16 core shares them.
#include <cstdint>

#include "kernels/cuda/cuda_attn_heads.h"
#include "kernels/cuda/cuda_colsum.h"

// y = x ⊙ scale[col] + shift[col] over rows of `cols` (either vector may be null: 1, 0).
__global__ void attn_affine_kernel(const __nv_bfloat16 *x, const float *scale, const float *shift, size_t rows,
                                    int cols, __nv_bfloat16 *y) {
    const size_t total = rows * cols;
    GRID_STRIDE(i, total) {
        const int c = (int)(i % cols);
        const float v = __bfloat162float(x[i]) * (scale ? scale[c] : 1.0f) + (shift ? shift[c] : 0.0f);
        y[i] = __float2bfloat16(v);
    }
}

// The affine kernel above on 8 elements per thread with 16-byte loads and stores, where the rows
// allow: the scalar form ran at 28% of an H200's bandwidth on BERT-base mhe_mul (CALIBRATION.md
// run 7).
__global__ void attn_affine_vec_kernel(const __nv_bfloat16 *x, const float *scale, const float *shift, size_t rows,
                                        int cols, __nv_bfloat16 *y) {
    const size_t total8 = rows * cols / 8;
    GRID_STRIDE(i, total8) {
        const int c0 = (int)((i * 8) % cols);
        const uint4 in = reinterpret_cast<const uint4 *>(x)[i];
        const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(&in);
        uint4 out;
        __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++)
            o[k] = __float2bfloat16(__bfloat162float(h[k]) * (scale ? scale[c0 + k] : 1.0f) + (shift ? shift[c0 + k] : 0.0f));
        reinterpret_cast<uint4 *>(y)[i] = out;
    }
}
// dst [rows, n, d] (contiguous) = bf16(src head h / ratio ⊙ scale[h]) for src rows ld apart: the
// per-head copy cuDNN reads (expand_of); scale null: 1.  8 elements per thread, one 16-byte store:
// cuDNN's head dims are multiples of 8 (cudnn_refuses) and each scratch part starts on 64 bytes,
// so a group never crosses a head.  One element per thread ran at 7% of an H200's bandwidth
// (CALIBRATION.md run 7).
__global__ void attn_expand_heads_kernel(const __nv_bfloat16 *src, int ld, int ratio, const float *scale,
                                          size_t rows, int n, int d, __nv_bfloat16 *dst) {
    const size_t total8 = rows * n * d / 8;
    GRID_STRIDE(i, total8) {
        const size_t e = i * 8;
        const int c0 = (int)(e % d), h = (int)((e / d) % n);
        const size_t r = e / ((size_t)n * d);
        const __nv_bfloat16 *from = src + r * ld + (size_t)(h / ratio) * d + c0;
        uint4 out;
        __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float v = __bfloat162float(from[k]);
            if (scale) v *= scale[(size_t)h * d + c0 + k];
            o[k] = __float2bfloat16(v);
        }
        reinterpret_cast<uint4 *>(dst)[i] = out;
    }
}
static bool on16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// dst head g (rows ld apart) = bf16(Σ of the ratio per-head gradients of src [rows, n, d] it
// served), added in head order: the gradient of a shared head.
__global__ void attn_sum_heads_bf16_kernel(const __nv_bfloat16 *src, size_t rows, int n, int d, int ratio, int ld,
                                       __nv_bfloat16 *dst) {
    const int groups = n / ratio;
    const size_t total = rows * groups * d;
    GRID_STRIDE(i, total) {
        const int c = (int)(i % d), g = (int)((i / d) % groups);
        const size_t r = i / ((size_t)groups * d);
        float acc = 0.0f;
        for (int j = 0; j < ratio; j++) acc += __bfloat162float(src[(r * n + (size_t)g * ratio + j) * d + c]);
        dst[r * ld + (size_t)g * d + c] = __float2bfloat16(acc);
    }
}

// The out_scale / out_shift gradients: Σ_rows dout ⊙ O' and Σ_rows dout per column.
struct ScaleShiftVals {
    const __nv_bfloat16 *dout, *o;
    int C;
    __device__ void vals(int r, int c, float *a, float *b) const {
        const size_t i = (size_t)r * C + c;
        const float g = __bfloat162float(dout[i]);
        *a = o ? g * __bfloat162float(o[i]) : 0.0f;
        *b = g;
    }
};


void attn_heads_affine(Backend *be, const __nv_bfloat16 *x, const float *scale, const float *shift, size_t rows,
                       int cols, __nv_bfloat16 *y, MheCost cost) {
    const size_t n = rows * cols;
    if (!n) return;
    if (cols % 8 == 0 && on16(x) && on16(y))
        MHE_LAUNCH(attn_affine_vec_kernel, cuda_grid_for(n / 8), MHE_BLOCK, 0, cuda_stream(be), cost)(x, scale, shift, rows, cols, y);
    else
        MHE_LAUNCH(attn_affine_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(x, scale, shift, rows, cols, y);
    CUDA_CHECK_LAUNCH();
}

void attn_heads_expand(Backend *be, const __nv_bfloat16 *src, int ld, int ratio, const float *scale, size_t rows,
                       int n, int d, __nv_bfloat16 *dst) {
    const size_t total = rows * n * d;
    if (d % 8 || !on16(dst)) mhe_fatal("attn_heads_expand: head dim %d or destination not 16-byte grouped", d);
    MHE_LAUNCH(attn_expand_heads_kernel, cuda_grid_for(total / 8), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)total, 4.0 * total))(src, ld, ratio, scale, rows, n, d, dst);
    CUDA_CHECK_LAUNCH();
}

void attn_heads_sum(Backend *be, const __nv_bfloat16 *src, size_t rows, int n, int d, int ratio, int ld,
                    __nv_bfloat16 *dst) {
    const size_t total = rows * n * d, out = rows * (n / ratio) * d;
    MHE_LAUNCH(attn_sum_heads_bf16_kernel, cuda_grid_for(out), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)total, 2.0 * total + 2.0 * out))(src, rows, n, d, ratio, ld, dst);
    CUDA_CHECK_LAUNCH();
}

void attn_heads_scale_shift_grads(Backend *be, const __nv_bfloat16 *dout, const __nv_bfloat16 *o, int rows, int cols,
                                  float *dscale, float *dshift) {
    if (!dscale && !dshift) return;
    cuda_colsum2(be, ScaleShiftVals{dout, dscale ? o : nullptr, cols}, rows, cols, dscale, dshift,
                 mhe_cost(3.0 * rows * cols, (dscale ? 4.0 : 2.0) * rows * cols));
}
