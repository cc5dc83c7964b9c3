// defines: the activations and dropout: GELU (erf and tanh forms) forward and backward, tanh
// (the fine-tuning pooler) forward and backward, dropout; fp32, or bf16 in and out in bf16 mode.
#include <cmath>

#include "kernels/cuda/cuda_internal.h"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_INV_SQRT_2 0.7071067811865476f
#define GELU_INV_SQRT_2PI 0.3989422804014327f
// Cost model: erf/tanh/exp count as ~10 FLOPs (a polynomial on the fp32 pipes).
#define GELU_FWD_FLOPS 16.0
#define GELU_BWD_FLOPS 28.0

template <typename X>
__global__ void gelu_forward_kernel(int tanh_form, const X *x, float *y, __nv_bfloat16 *yb, size_t n) {
    GRID_STRIDE(i, n) {
        float v = ld_float(x, i);
        if (tanh_form)
            store_dual(y, yb, i, 0.5f * v * (1.0f + tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v))));
        else
            store_dual(y, yb, i, 0.5f * v * (1.0f + erff(v * GELU_INV_SQRT_2)));
    }
}
// erf:  gelu'(x) = Φ(x) + x φ(x)
// tanh: gelu'(x) = (1 + t)/2 + x/2 (1 - t²) √(2/π) (1 + 3·0.044715 x²),  t = tanh(u(x))
// dx may alias dy (each element read, then written, by one thread).  X: float or bf16 (x, dy).
template <typename X>
__global__ void gelu_backward_kernel(int tanh_form, const X *x, const X *dy, float *dx, __nv_bfloat16 *dxb, size_t n) {
    GRID_STRIDE(i, n) {
        float v = ld_float(x, i), g;
        if (tanh_form) {
            float t = tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v));
            g = 0.5f * (1.0f + t) +
                0.5f * v * (1.0f - t * t) * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
        } else {
            g = 0.5f * (1.0f + erff(v * GELU_INV_SQRT_2)) + v * GELU_INV_SQRT_2PI * expf(-0.5f * v * v);
        }
        store_dual(dx, dxb, i, ld_float(dy, i) * g);
    }
}
// Elements of E (float, or bf16 for an Act of a bf16-activation backend), fp32 arithmetic
// inside; yb: the weight copy of an fp32 output (cuda_fp32_copy_out), nullptr otherwise.
template <typename E>
__global__ void tanh_forward_kernel(const E *x, E *y, __nv_bfloat16 *yb, size_t n) {
    GRID_STRIDE(i, n) store_dual(y, yb, i, tanhf(ld_float(x, i)));
}
// tanh' = 1 - tanh², from the saved output.
template <typename E>
__global__ void tanh_backward_kernel(const E *y, const E *dy, E *dx, __nv_bfloat16 *dxb, size_t n) {
    GRID_STRIDE(i, n) {
        const float t = ld_float(y, i);
        store_dual(dx, dxb, i, ld_float(dy, i) * (1.0f - t * t));
    }
}
static void act_tanh_forward(Backend *be, const Act *x, Act *y, size_t n) {
    double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    if (!n) {
    } else if (act16(be)) {
        MHE_LAUNCH(tanh_forward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, mhe_cost(10.0 * n, 4.0 * n))(ab(x), ab(y), nullptr, n);
    } else {
        __nv_bfloat16 *yb = cuda_fp32_copy_out(be, af(y), n);
        MHE_LAUNCH(tanh_forward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(10.0 * n, 8.0 * n), yb, n))(af(x), af(y), yb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void act_tanh_backward(Backend *be, const Act *y, const Act *dy, Act *dx, size_t n) {
    double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    if (!n) {
    } else if (act16(be)) {
        MHE_LAUNCH(tanh_backward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, mhe_cost(3.0 * n, 6.0 * n))(ab(y), ab(dy), ab(dx), nullptr, n);
    } else {
        __nv_bfloat16 *dxb = cuda_fp32_copy_out(be, af(dx), n);
        MHE_LAUNCH(tanh_backward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(3.0 * n, 12.0 * n), dxb, n))(af(y), af(dy), af(dx), dxb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// GELU and dropout: fp32 in fp32 mode, bf16 in and out in bf16 mode (xb and yb set, yw null).
static void cuda_gelu_forward(Backend *be, GeluKind kind, const float *x, float *y, size_t n) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x);
    float *yw;
    __nv_bfloat16 *yb = act_out(be, y, &yw);
    const MheCost cost = with_act_store(mhe_cost(GELU_FWD_FLOPS * n, (xb ? 6.0 : 8.0) * n), yb, yw, n);
    cudaStream_t st = cuda_stream(be);
    if (xb && yb && cuda_gelu_forward_vec(be, kind, xb, yb, n)) {  // bf16, 16-byte groups (cuda_gelu.cu)
    } else if (n && xb)
        MHE_LAUNCH(gelu_forward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, cost)(kind == GELU_TANH, xb, yw, yb, n);
    else if (n)
        MHE_LAUNCH(gelu_forward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, cost)(kind == GELU_TANH, x, yw, yb, n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_gelu_backward(Backend *be, GeluKind kind, const float *x, const float *dy, float *dx, size_t n) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x), *dyb = act_in(be, dy);
    float *dxw;
    __nv_bfloat16 *dxb = act_out(be, dx, &dxw);
    const MheCost cost = with_act_store(mhe_cost(GELU_BWD_FLOPS * n, (xb ? 2.0 : 4.0) * n + (dyb ? 2.0 : 4.0) * n + 4.0 * n), dxb, dxw, n);
    const int tf = kind == GELU_TANH;
    cudaStream_t st = cuda_stream(be);
    const unsigned grid = cuda_grid_for(n);
    if (!n) {
    } else if (xb && dyb && dxb && cuda_gelu_backward_vec(be, kind, xb, dyb, dxb, n)) {  // cuda_gelu.cu
    } else if (xb) {
        MHE_LAUNCH(gelu_backward_kernel<__nv_bfloat16>, grid, MHE_BLOCK, 0, st, cost)(tf, xb, dyb, dxw, dxb, n);
    } else {
        MHE_LAUNCH(gelu_backward_kernel<float>, grid, MHE_BLOCK, 0, st, cost)(tf, x, dy, dxw, dxb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

template <typename X>
__global__ void dropout_kernel(const X *x, float *y, __nv_bfloat16 *yb, size_t n, float p, uint64_t seed,
                               uint64_t offset) {
    float inv = 1.0f / (1.0f - p);
    GRID_STRIDE(i, n) store_dual(y, yb, i, ops_dropout_keep(seed, offset, i, p) ? ld_float(x, i) * inv : 0.0f);
}
// Activations in bf16 (bf16 mode) or fp32; y may alias x.
static void cuda_dropout(Backend *be, const float *x, float *y, size_t n, float p, uint64_t seed, uint64_t offset) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x);
    // p = 0 is a copy (nothing when in place): fp32 by memcpy, bf16 through the kernel (every draw
    // keeps, the scale is 1).
    float *yw = y;
    __nv_bfloat16 *yb = p > 0.0f || x != y ? act_out(be, y, &yw) : nullptr;
    if (p <= 0.0f && !yb && !(xb && x != y)) {
        if (x != y) cuda_memcpy_d2d(be, y, x, n * sizeof(float));
    } else if (n) {
        const MheCost cost = with_act_store(mhe_cost((double)n, (xb ? 6.0 : 8.0) * n), yb, yw, n);
        if (xb)
            MHE_LAUNCH(dropout_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
                xb, yw, yb, n, p > 0.0f ? p : 0.0f, seed, offset);
        else
            MHE_LAUNCH(dropout_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
                x, yw, yb, n, p > 0.0f ? p : 0.0f, seed, offset);
        CUDA_CHECK_LAUNCH();
    }
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void act_gelu_forward(Backend *be, GeluKind kind, const Act *x, Act *y, size_t n) {
    cuda_gelu_forward(be, kind, af(x), af(y), n);
}
static void act_gelu_backward(Backend *be, GeluKind kind, const Act *x, const Act *dy, Act *dx, size_t n) {
    cuda_gelu_backward(be, kind, af(x), af(dy), af(dx), n);
}
static void act_dropout(Backend *be, const Act *x, Act *y, size_t n, float p, uint64_t seed, uint64_t offset) {
    cuda_dropout(be, af(x), af(y), n, p, seed, offset);
}
void cuda_install_activation(Backend *be) {
    be->gelu_forward = act_gelu_forward;
    be->gelu_backward = act_gelu_backward;
    be->tanh_forward = act_tanh_forward;
    be->tanh_backward = act_tanh_backward;
    be->dropout = act_dropout;
}
