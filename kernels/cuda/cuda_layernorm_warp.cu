// defines: the LayerNorm kernels for bf16 rows of C = 256..1024 columns by 256 (BERT-base, GPT-2
// small): the backward (dx, the dγ/dβ partials, the dropped-out branch) and the residual step's
// forward, one warp per row.  Each lane holds VPL 16-byte vectors (8 bf16) of the row, so the
// row's sums are warp shuffles and each element is read once; cuda_layernorm.cu's block-per-row
// kernels serve every other width and fp32.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_layernorm_warp.h"

#define LN_WARP_MAX_VPL 4

bool ln_warp_takes(int C, std::initializer_list<const void *> buffers) {
    if (C % 256 || C / 256 < 1 || C / 256 > LN_WARP_MAX_VPL) return false;
    for (const void *p : buffers)
        if (p && reinterpret_cast<uintptr_t>(p) % 16) return false;
    return true;
}

// The same backward for bf16 rows whose width C is a multiple of 256 up to 1024 (BERT-base and
// GPT-2's 768): one warp per row, VPL 16-byte vectors per lane, the row's reductions by warp
// shuffles.  The block-per-row kernel above serialises each block's rows behind two block barriers
// and two dependent trips to memory per row; measured on an H200 it ran at 6-7% of the memory
// bandwidth and was the largest kernel of a step (CALIBRATION.md run 7: 2.3 ms of BERT-base's,
// 6.1 ms of GPT-2 small's).  Here a lane's columns are fixed, so its dγ/dβ sums stay in registers
// over its rows; the warps of a block add theirs into the block's partials in warp order (one
// fixed order: deterministic).  bf16 out (no fp32 dx), dropout's mask as the kernel above.
template <int VPL>
__global__ void layernorm_backward_warp_kernel(const __nv_bfloat16 *dy, const __nv_bfloat16 *x, const float *gamma,
                                               const float *mean, const float *rstd, int N, int C, int rows,
                                               __nv_bfloat16 *dxb, int accumulate, float *pg, float *pb,
                                               LnDrop drop) {
    MHE_DYNAMIC_SHARED(float, acc);  // [2][C] when pg or pb, else none
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    const bool sums = pg != nullptr || pb != nullptr;
    float gam[VPL * 8], sg[VPL * 8], sb[VPL * 8];
#pragma unroll
    for (int v = 0; v < VPL; v++)
#pragma unroll
        for (int k = 0; k < 8; k++) {
            gam[v * 8 + k] = gamma[(v * 32 + lane) * 8 + k];
            sg[v * 8 + k] = sb[v * 8 + k] = 0.0f;
        }
    const int r0 = blockIdx.x * rows, r1 = r0 + rows < N ? r0 + rows : N;
    for (int r = r0 + warp; r < r1; r += n_warps) {
        const size_t off = (size_t)r * C;
        const float mu = mean[r], rs = rstd[r];
        float g[VPL * 8], xh[VPL * 8], mg = 0.0f, mgx = 0.0f;
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const size_t at = off + (size_t)(v * 32 + lane) * 8;
            const uint4 dyv = *reinterpret_cast<const uint4 *>(dy + at), xv = *reinterpret_cast<const uint4 *>(x + at);
            const __nv_bfloat16 *dyh = reinterpret_cast<const __nv_bfloat16 *>(&dyv);
            const __nv_bfloat16 *xhh = reinterpret_cast<const __nv_bfloat16 *>(&xv);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int j = v * 8 + k;
                g[j] = __bfloat162float(dyh[k]);
                xh[j] = (__bfloat162float(xhh[k]) - mu) * rs;
                const float gg = g[j] * gam[j];
                mg += gg;
                mgx += gg * xh[j];
                sg[j] += g[j] * xh[j];
                sb[j] += g[j];
            }
        }
        if (!dxb) continue;  // uniform over the warp
        mg = warp_sum(mg) / (float)C;
        mgx = warp_sum(mgx) / (float)C;
#pragma unroll
        for (int v = 0; v < VPL; v++) {
            const size_t at = off + (size_t)(v * 32 + lane) * 8;
            uint4 old = make_uint4(0, 0, 0, 0), out, dro;
            if (accumulate) old = *reinterpret_cast<const uint4 *>(dxb + at);
            const __nv_bfloat16 *oh = reinterpret_cast<const __nv_bfloat16 *>(&old);
            __nv_bfloat16 *w = reinterpret_cast<__nv_bfloat16 *>(&out), *wd = reinterpret_cast<__nv_bfloat16 *>(&dro);
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const int j = v * 8 + k;
                const float d = rs * (g[j] * gam[j] - mg - xh[j] * mgx);
                const float val = accumulate ? __bfloat162float(oh[k]) + d : d;
                w[k] = __float2bfloat16(val);
                if (drop.on)
                    wd[k] = __float2bfloat16(
                        drop.inv == 1.0f || ops_dropout_keep_fast(drop.key, at + k, drop.threshold) ? val * drop.inv : 0.0f);
            }
            *reinterpret_cast<uint4 *>(dxb + at) = out;
            if (drop.on) *reinterpret_cast<uint4 *>(drop.drb + at) = dro;
        }
    }
    if (!sums) return;
    for (int w = 0; w < n_warps; w++) {
        if (warp == w)
#pragma unroll
            for (int v = 0; v < VPL; v++)
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const int c = (v * 32 + lane) * 8 + k, j = v * 8 + k;
                    acc[c] = w ? acc[c] + sg[j] : sg[j];
                    acc[C + c] = w ? acc[C + c] + sb[j] : sb[j];
                }
        __syncthreads();
    }
    const size_t out = (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (pg) pg[out + c] = acc[c];
        if (pb) pb[out + c] = acc[C + c];
    }
}


// The residual step (cuda_layernorm.cu's residual_layernorm_kernel, one warp per row): the same
// per-element values (dropout's mask by element index, the bf16 rounding of s with round_sum),
// the mean then the centred variance, both as warp sums.  Reads x and r once, then writes s and
// y, so s may alias r and y may alias s.
template <int VPL>
__global__ void residual_layernorm_warp_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *r, float p, uint64_t key,
                                               uint32_t threshold, const float *gamma, const float *beta, int N,
                                               int C, float eps, __nv_bfloat16 *sb, __nv_bfloat16 *yb, float *mean,
                                               float *rstd, int round_sum) {
    const int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= N) return;  // a whole warp leaves
    const size_t off = (size_t)row * C;
    const float inv = 1.0f / (1.0f - p);
    float v[VPL * 8], sum = 0.0f;
#pragma unroll
    for (int q = 0; q < VPL; q++) {
        const size_t at = off + (size_t)(q * 32 + lane) * 8;
        const uint4 xv = *reinterpret_cast<const uint4 *>(x + at), rv = *reinterpret_cast<const uint4 *>(r + at);
        const __nv_bfloat16 *xh = reinterpret_cast<const __nv_bfloat16 *>(&xv);
        const __nv_bfloat16 *rh = reinterpret_cast<const __nv_bfloat16 *>(&rv);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float d = p <= 0.0f || ops_dropout_keep_fast(key, at + k, threshold) ? __bfloat162float(rh[k]) * inv
                                                                                     : 0.0f;
            const float s = __bfloat162float(xh[k]) + d;
            v[q * 8 + k] = round_sum ? __bfloat162float(__float2bfloat16(s)) : s;
            sum += v[q * 8 + k];
        }
    }
    const float mu = warp_sum(sum) / (float)C;
    float var = 0.0f;
#pragma unroll
    for (int j = 0; j < VPL * 8; j++) var += (v[j] - mu) * (v[j] - mu);
    const float rs = rsqrtf(warp_sum(var) / (float)C + eps);
#pragma unroll
    for (int q = 0; q < VPL; q++) {
        const int c0 = (q * 32 + lane) * 8;
        const size_t at = off + c0;
        uint4 so, yo;
        __nv_bfloat16 *sh = reinterpret_cast<__nv_bfloat16 *>(&so), *yh = reinterpret_cast<__nv_bfloat16 *>(&yo);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            sh[k] = __float2bfloat16(v[q * 8 + k]);
            yh[k] = __float2bfloat16((v[q * 8 + k] - mu) * rs * gamma[c0 + k] + beta[c0 + k]);
        }
        *reinterpret_cast<uint4 *>(sb + at) = so;
        *reinterpret_cast<uint4 *>(yb + at) = yo;
    }
    if (lane == 0) {
        mean[row] = mu;
        rstd[row] = rs;
    }
}

#define LN_WARP_SWITCH(C, LAUNCH) \
    switch ((C) / 256) {           \
        case 1: LAUNCH(1); break;  \
        case 2: LAUNCH(2); break;  \
        case 3: LAUNCH(3); break;  \
        default: LAUNCH(4); break; \
    }

void ln_warp_backward(Backend *be, MheCost cost, const __nv_bfloat16 *dy, const __nv_bfloat16 *x,
                      const float *gamma, const float *mean, const float *rstd, int N, int C, int rows, int chunks,
                      __nv_bfloat16 *dxb, int accumulate, float *pg, float *pb, const LnDrop &drop, size_t smem) {
#define LNW_BWD(VPL)                                                                                     \
    MHE_LAUNCH(layernorm_backward_warp_kernel<VPL>, chunks, MHE_BLOCK, smem, cuda_stream(be), cost)(     \
        dy, x, gamma, mean, rstd, N, C, rows, dxb, accumulate, pg, pb, drop)
    LN_WARP_SWITCH(C, LNW_BWD)
#undef LNW_BWD
    CUDA_CHECK_LAUNCH();
}

void ln_warp_residual_forward(Backend *be, MheCost cost, const __nv_bfloat16 *x, const __nv_bfloat16 *r, float p,
                              uint64_t key, uint32_t threshold, const float *gamma, const float *beta, int N, int C,
                              float eps, __nv_bfloat16 *sb, __nv_bfloat16 *yb, float *mean, float *rstd,
                              int round_sum) {
    const int warps = MHE_BLOCK / 32, blocks = (N + warps - 1) / warps;
#define LNW_FWD(VPL)                                                                                         \
    MHE_LAUNCH(residual_layernorm_warp_kernel<VPL>, blocks, MHE_BLOCK, 0, cuda_stream(be), cost)(            \
        x, r, p, key, threshold, gamma, beta, N, C, eps, sb, yb, mean, rstd, round_sum)
    LN_WARP_SWITCH(C, LNW_FWD)
#undef LNW_FWD
    CUDA_CHECK_LAUNCH();
}
