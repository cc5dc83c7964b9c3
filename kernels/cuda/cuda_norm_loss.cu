// Row kernels with block reductions (warp shuffles + shared memory): LayerNorm forward and
// backward.  One block per row.  (The softmax cross-entropy: cuda_loss.cu.)
#include <cmath>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

// Two passes over the row (mean, then centred variance) as torch does: no cancellation.
__global__ void layernorm_forward_kernel(const float *x, const float *gamma, const float *beta,
                                         int C, float eps, float *y, __nv_bfloat16 *yb, float *mean,
                                         float *rstd) {
    __shared__ float buf[32];
    const float *xr = x + (size_t)blockIdx.x * C;
    float *yr = y + (size_t)blockIdx.x * C;
    float s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += xr[c];
    float mu = block_sum(s, buf) / (float)C;
    float v = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float d = xr[c] - mu;
        v += d * d;
    }
    float rs = rsqrtf(block_sum(v, buf) / (float)C + eps);
    // Each thread rewrites only the elements it read, so y may alias x.
    __nv_bfloat16 *ybr = yb ? yb + (size_t)blockIdx.x * C : nullptr;
    for (int c = threadIdx.x; c < C; c += blockDim.x) store_twin(yr, ybr, c, (xr[c] - mu) * rs * gamma[c] + beta[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

// A layer's residual step: s = x + dropout(r) (the dropout kernel's formula and element
// index), stored, then LayerNorm(s) as layernorm_forward_kernel.  Each thread reads back only
// the s it wrote, so s may alias r and y may alias s.  One pass instead of three kernels
// (dropout, add, LayerNorm) re-reading the row from memory.
// r in fp32, or bf16 from a lean twin (the branch's output projection, once only this reads it:
// the residual add of the bf16 branch output, as autocast computes it).  s may alias r: each
// element is read, then written, by one thread.
__device__ __forceinline__ float branch(const float *r, size_t i) { return r[i]; }
__device__ __forceinline__ float branch(const __nv_bfloat16 *r, size_t i) { return __bfloat162float(r[i]); }
template <typename R>
__global__ void residual_layernorm_kernel(const float *x, const R *r, float p, uint64_t key, uint32_t threshold,
                                          const float *gamma, const float *beta, int C, float eps, float *s,
                                          float *y, __nv_bfloat16 *yb, float *mean, float *rstd) {
    __shared__ float buf[32];
    const size_t off = (size_t)blockIdx.x * C;
    const float inv = 1.0f / (1.0f - p);
    float sum = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const size_t i = off + c;
        const float d = p <= 0.0f || ops_dropout_keep_fast(key, i, threshold) ? branch(r, i) * inv : 0.0f;
        const float v = x[i] + d;
        s[i] = v;
        sum += v;
    }
    const float mu = block_sum(sum, buf) / (float)C;
    float var = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = s[off + c] - mu;
        var += d * d;
    }
    const float rs = rsqrtf(block_sum(var, buf) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        store_twin(y, yb, off + c, (s[off + c] - mu) * rs * gamma[c] + beta[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

// dgamma[c] += sum_r dy·xhat;  dbeta[c] += sum_r dy   (two-stage column sums, cuda_colsum.h)
struct LnDparamVals {
    const float *dy, *x, *mean, *rstd;
    int C;
    __device__ void vals(int r, int c, float *a, float *b) const {
        const float g = dy[(size_t)r * C + c];
        *a = g * (x[(size_t)r * C + c] - mean[r]) * rstd[r];
        *b = g;
    }
};

// dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  g = dy * gamma
__global__ void layernorm_dx_kernel(const float *dy, const float *x, const float *gamma,
                                    const float *mean, const float *rstd, int C, float *dx,
                                    __nv_bfloat16 *dxb, int accumulate) {
    __shared__ float buf[32];
    size_t off = (size_t)blockIdx.x * C;
    float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    float sg = 0, sgx = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dy[off + c] * gamma[c];
        sg += g;
        sgx += g * (x[off + c] - mu) * rs;
    }
    float mg = block_sum(sg, buf) / (float)C;
    float mgx = block_sum(sgx, buf) / (float)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float g = dy[off + c] * gamma[c];
        float d = rs * (g - mg - (x[off + c] - mu) * rs * mgx);
        store_twin(dx, dxb, off + c, accumulate ? dx[off + c] + d : d);
    }
}

static void cuda_layernorm_forward(Backend *be, const float *x, const float *gamma,
                                   const float *beta, int N, int C, float eps, float *y,
                                   float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    cuda_mirror_wrote(be, mean, (size_t)N * sizeof(float));
    cuda_mirror_wrote(be, rstd, (size_t)N * sizeof(float));
    __nv_bfloat16 *yb = cuda_mirror_out(be, y, (size_t)N * C);
    if (N) MHE_LAUNCH(layernorm_forward_kernel, N, MHE_BLOCK, 0, cuda_stream(be), with_twin(mhe_cost(8.0 * N * C, 8.0 * N * C + 8.0 * C + 8.0 * N), yb, (double)N * C))(x, gamma, beta, C, eps, y, yb, mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cuda_residual_layernorm_forward(Backend *be, const float *x, const float *r, float p, uint64_t seed,
                                            uint64_t offset, const float *gamma, const float *beta, int N, int C,
                                            float eps, float *s, float *y, float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    const size_t n = (size_t)N * C;
    // r's twin segment (without rounding), so its producer can learn to write it lean; taken
    // before s is accounted for, since s may alias r (the twin still holds r's values then).
    cuda_mirror_track(be, r, n);
    const __nv_bfloat16 *rb = cuda_mirror_stale_twin(be, r, n);
    cuda_mirror_overwrote(be, s, n * sizeof(float));  // every element of s is written
    cuda_mirror_wrote(be, mean, (size_t)N * sizeof(float));
    cuda_mirror_wrote(be, rstd, (size_t)N * sizeof(float));
    __nv_bfloat16 *yb = cuda_mirror_out(be, y, n);
    const float q = p > 0.0f ? p : 0.0f;
    // Reads x and r, writes s and y (16 B per element, 14 with r in bf16; s is re-read from
    // cache), gamma, beta, mean, rstd as layernorm_forward; ~10 FLOPs per element (dropout, add,
    // LayerNorm's 8).
    const MheCost cost = with_twin(mhe_cost(10.0 * n, (rb ? 14.0 : 16.0) * n + 8.0 * C + 8.0 * N), yb, (double)n);
    const uint64_t key = ops_dropout_key(seed, offset);
    const uint32_t thr = ops_dropout_threshold(q);
    if (N && rb)
        MHE_LAUNCH(residual_layernorm_kernel<__nv_bfloat16>, N, MHE_BLOCK, 0, cuda_stream(be), cost)(x, rb, q, key, thr, gamma, beta, C, eps, s, y, yb, mean, rstd);
    else if (N)
        MHE_LAUNCH(residual_layernorm_kernel<float>, N, MHE_BLOCK, 0, cuda_stream(be), cost)(x, r, q, key, thr, gamma, beta, C, eps, s, y, yb, mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cuda_layernorm_backward(Backend *be, const float *dy, const float *x,
                                    const float *gamma, const float *mean, const float *rstd,
                                    int N, int C, float *dx, int accumulate, float *dgamma,
                                    float *dbeta) {
    double t0 = cuda_prof_begin(be);
    cudaStream_t s = cuda_stream(be);
    // Parameter gradients first: dx may overwrite dy.
    if (dgamma) cuda_mirror_wrote(be, dgamma, (size_t)C * sizeof(float));
    if (dbeta) cuda_mirror_wrote(be, dbeta, (size_t)C * sizeof(float));
    __nv_bfloat16 *dxb = dx ? cuda_mirror_out(be, dx, (size_t)N * C) : nullptr;
    if (N && (dgamma || dbeta))
        cuda_colsum2(be, LnDparamVals{dy, x, mean, rstd, C}, N, C, dgamma, dbeta,
                     mhe_cost(4.0 * N * C, 8.0 * N * C + 8.0 * N));
    if (N && dx) MHE_LAUNCH(layernorm_dx_kernel, N, MHE_BLOCK, 0, s, with_twin(mhe_cost(10.0 * N * C, (accumulate ? 16.0 : 12.0) * N * C + 4.0 * C + 8.0 * N), dxb, (double)N * C))(dy, x, gamma, mean, rstd, C, dx, dxb, accumulate);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

void cuda_install_norm_loss(Backend *be) {
    be->layernorm_forward = cuda_layernorm_forward;
    be->residual_layernorm_forward = cuda_residual_layernorm_forward;
    be->layernorm_backward = cuda_layernorm_backward;
}
