// defines: GELU forward and backward on bf16 activations through 16-byte accesses (gelu_vec_*).
// GELU on bf16 activations at streaming width: 8 elements per thread and iteration through 16-byte
// loads and stores (one uint4 of x, one of dy, one of the result), where the scalar kernels of
// cuda_activation.cu move 2 bytes per access.  The FFN's erf GELU (BERT) is the one its GEMMs
// cannot take as an epilogue (cuBLASLt's GELU epilogues compute the tanh form), so these two
// passes are its whole cost outside the products: 1.0 ms of BERT-base 512x16's 9.1 ms bound step
// on an H100 (`mhetrain bench ... --gpu h100`).
//
// The arithmetic per element is the scalar kernels' (the same float expressions, one rounding to
// bf16 when stored), so results are bit-identical to them; pointers off 16 bytes or a length off
// 8 elements take the scalar kernels (false below).
#include "kernels/cuda/cuda_internal.h"

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_INV_SQRT_2 0.7071067811865476f
#define GELU_INV_SQRT_2PI 0.3989422804014327f
// Cost model: erf/tanh/exp count as ~10 FLOPs (as cuda_elementwise.cu's GELU).
#define GELU_VEC_FWD_FLOPS 16.0
#define GELU_VEC_BWD_FLOPS 28.0

__device__ __forceinline__ float gelu_value(int tanh_form, float v) {
    if (tanh_form) return 0.5f * v * (1.0f + tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v)));
    return 0.5f * v * (1.0f + erff(v * GELU_INV_SQRT_2));
}
__device__ __forceinline__ float gelu_slope(int tanh_form, float v) {
    if (tanh_form) {
        const float t = tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v));
        return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
    }
    return 0.5f * (1.0f + erff(v * GELU_INV_SQRT_2)) + v * GELU_INV_SQRT_2PI * expf(-0.5f * v * v);
}

// y[i] = GELU(x[i]) over n8 groups of 8 bf16.  y may alias x.
__global__ void gelu_vec_forward_kernel(int tanh_form, const uint4 *x, uint4 *y, size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)blockDim.x * gridDim.x) {
        const uint4 in = x[i];
        uint4 out;
        const __nv_bfloat16 *a = reinterpret_cast<const __nv_bfloat16 *>(&in);
        __nv_bfloat16 *b = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++) b[k] = __float2bfloat16(gelu_value(tanh_form, __bfloat162float(a[k])));
        y[i] = out;
    }
}
// dx[i] = dy[i] * gelu'(x[i]); dx may alias dy (each group read, then written, by one thread).
__global__ void gelu_vec_backward_kernel(int tanh_form, const uint4 *x, const uint4 *dy, uint4 *dx, size_t n8) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n8; i += (size_t)blockDim.x * gridDim.x) {
        const uint4 xin = x[i], gin = dy[i];
        uint4 out;
        const __nv_bfloat16 *a = reinterpret_cast<const __nv_bfloat16 *>(&xin);
        const __nv_bfloat16 *g = reinterpret_cast<const __nv_bfloat16 *>(&gin);
        __nv_bfloat16 *b = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++)
            b[k] = __float2bfloat16(__bfloat162float(g[k]) * gelu_slope(tanh_form, __bfloat162float(a[k])));
        dx[i] = out;
    }
}

static bool vec_ok(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Threads for n8 groups: as many as the scalar kernels' grid would give for the groups.
static unsigned vec_grid(size_t n8) { return cuda_grid_for(n8); }

bool cuda_gelu_forward_vec(Backend *be, GeluKind kind, const __nv_bfloat16 *x, __nv_bfloat16 *y, size_t n) {
    if (!n || n % 8 || !vec_ok(x) || !vec_ok(y)) return false;
    const size_t n8 = n / 8;
    const MheCost cost = mhe_cost(GELU_VEC_FWD_FLOPS * n, 4.0 * n);  // 2 B read + 2 B written
    MHE_LAUNCH(gelu_vec_forward_kernel, vec_grid(n8), MHE_BLOCK, 0, cuda_stream(be), cost)(
        kind == GELU_TANH, reinterpret_cast<const uint4 *>(x), reinterpret_cast<uint4 *>(y), n8);
    CUDA_CHECK_LAUNCH();
    return true;
}

bool cuda_gelu_backward_vec(Backend *be, GeluKind kind, const __nv_bfloat16 *x, const __nv_bfloat16 *dy,
                            __nv_bfloat16 *dx, size_t n) {
    if (!n || n % 8 || !vec_ok(x) || !vec_ok(dy) || !vec_ok(dx)) return false;
    const size_t n8 = n / 8;
    const MheCost cost = mhe_cost(GELU_VEC_BWD_FLOPS * n, 6.0 * n);  // x and dy read, dx written
    MHE_LAUNCH(gelu_vec_backward_kernel, vec_grid(n8), MHE_BLOCK, 0, cuda_stream(be), cost)(
        kind == GELU_TANH, reinterpret_cast<const uint4 *>(x), reinterpret_cast<const uint4 *>(dy),
        reinterpret_cast<uint4 *>(dx), n8);
    CUDA_CHECK_LAUNCH();
    return true;
}
