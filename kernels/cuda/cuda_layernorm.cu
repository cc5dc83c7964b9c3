// defines: LayerNorm forward and backward, and the fused forms around it: the residual step
// (dropout + add + LayerNorm, residual_layernorm_forward), BERT's embedding block (rows +
// LayerNorm + dropout, embedding_layernorm_forward) and the backward that also writes the
// dropped-out branch gradient (layernorm_backward_dropout).  Row kernels with block reductions
// (warp shuffles + shared memory), one block per row, except the backward (a chunk of rows per
// block, which also sums dγ and dβ); bf16 rows of 256..1024 columns by 256 go to the warp-per-row
// kernels of cuda_layernorm_warp.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_layernorm_warp.h"

// Two passes over the row (mean, then centred variance) as torch does: no cancellation.
__global__ void layernorm_forward_kernel(const float *x, const float *gamma, const float *beta,
                                         int C, float eps, float *y, __nv_bfloat16 *yb, float *mean,
                                         float *rstd) {
    MHE_SHARED(float, buf, [32]);
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
    for (int c = threadIdx.x; c < C; c += blockDim.x) store_dual(yr, ybr, c, (xr[c] - mu) * rs * gamma[c] + beta[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

// A layer's residual step: s = x + dropout(r) (the dropout kernel's formula and element
// index), then LayerNorm(s) as layernorm_forward_kernel, s and y stored: one pass instead of
// three kernels (dropout, add, LayerNorm) re-reading the row from memory.
// x and r in fp32 (fp32 mode) or bf16: r is the branch's output projection (the residual add of
// the bf16 branch output, as autocast computes it), x the previous LayerNorm's output (the
// residual stream, bf16 between ops as every activation; the statistics stay fp32, from the fp32
// sums).  s and y may be bf16 (s, y null: sb, yb only), so the statistics cannot re-read s: each thread keeps its first RLN_KEEP sums in registers (C <= RLN_KEEP x block:
// BERT-large's 1024 at 256 threads) and recomputes any others from x and r.  s is stored in
// the last pass, after every read of its row, so it may alias r; y may alias s (stored after it).
#define RLN_KEEP 4
// A row's values kept in registers (the first RLN_KEEP per thread; any others recomputed by
// `val`) and their LayerNorm statistics, in layernorm_forward_kernel's per-thread order (two
// passes: mean, then the centred variance).  Val: float operator()(int c), c < C.
template <typename Val>
struct KeptRow {
    float keep[RLN_KEEP];
    float mu, rs;
    __device__ __forceinline__ KeptRow(const Val &val, int C, float eps, float *buf) {
        const int kept = RLN_KEEP * blockDim.x;
        float sum = 0;
#pragma unroll
        for (int k = 0; k < RLN_KEEP; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            keep[k] = c < C ? val(c) : 0.0f;
            sum += keep[k];
        }
        for (int c = kept + threadIdx.x; c < C; c += blockDim.x) sum += val(c);
        mu = block_sum(sum, buf) / (float)C;
        float var = 0;
#pragma unroll
        for (int k = 0; k < RLN_KEEP; k++) {
            const float d = (int)(threadIdx.x + k * blockDim.x) < C ? keep[k] - mu : 0.0f;
            var += d * d;
        }
        for (int c = kept + threadIdx.x; c < C; c += blockDim.x) {
            const float d = val(c) - mu;
            var += d * d;
        }
        rs = rsqrtf(block_sum(var, buf) / (float)C + eps);
    }
    // store(c, v) for every column with its value, kept or recomputed.
    template <typename Store>
    __device__ __forceinline__ void each(const Val &val, int C, Store store) const {
#pragma unroll
        for (int k = 0; k < RLN_KEEP; k++) {
            const int c = threadIdx.x + k * blockDim.x;
            if (c >= C) break;
            store(c, keep[k]);
        }
        for (int c = RLN_KEEP * blockDim.x + threadIdx.x; c < C; c += blockDim.x) store(c, val(c));
    }
};

// s = x + dropout(r) at column c of the row at off; with round_sum, bf16(s): with bf16
// activations s is stored as bf16 and y is LayerNorm of that stored value, as layernorm_forward
// of s computes it (a recomputation, train.recompute, reruns that op and gets the same bits).
template <typename X, typename R>
struct ResidualVal {
    const X *x;
    const R *r;
    size_t off;
    float p, inv;
    uint64_t key;
    uint32_t threshold;
    int round_sum;
    __device__ __forceinline__ float operator()(int c) const {
        const size_t i = off + c;
        const float d = p <= 0.0f || ops_dropout_keep_fast(key, i, threshold) ? ld_float(r, i) * inv : 0.0f;
        const float v = ld_float(x, i) + d;
        return round_sum ? __bfloat162float(__float2bfloat16(v)) : v;
    }
};
// The kernel's input types by name (the launch macro's argument cannot hold a comma).
template <typename XT, typename RT>
struct RlnIn {
    typedef XT X;
    typedef RT R;
};
typedef RlnIn<float, float> RlnFp32;
typedef RlnIn<__nv_bfloat16, __nv_bfloat16> RlnBf16;
template <typename In>
__global__ void residual_layernorm_kernel(const typename In::X *x, const typename In::R *r, float p, uint64_t key, uint32_t threshold,
                                          const float *gamma, const float *beta, int C, float eps, float *s,
                                          __nv_bfloat16 *sb, float *y, __nv_bfloat16 *yb, float *mean,
                                          float *rstd, int round_sum) {
    MHE_SHARED(float, buf, [32]);
    const size_t off = (size_t)blockIdx.x * C;
    const ResidualVal<typename In::X, typename In::R> val{x, r, off, p, 1.0f / (1.0f - p), key, threshold, round_sum};
    const KeptRow<ResidualVal<typename In::X, typename In::R>> row(val, C, eps, buf);
    const float mu = row.mu, rs = row.rs;
    row.each(val, C, [&](int c, float v) {
        store_dual(s, sb, off + c, v);
        store_dual(y, yb, off + c, (v - mu) * rs * gamma[c] + beta[c]);
    });
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}

// BERT's embedding block (embedding_layernorm_forward): e = word[id] + pos[t] (+ type[tt]), added
// as embedding_forward_kernel adds them, LayerNorm(e) as layernorm_forward_kernel (the same
// per-thread order of the two passes), then the dropout op's mask — one pass instead of three
// kernels writing and re-reading the row.  e (LayerNorm's backward input) and y may be bf16.
struct EmbedVal {
    const float *word_row, *pos_row, *type_row;  // type_row NULL: no token types
    __device__ __forceinline__ float operator()(int c) const {
        float v = word_row[c] + pos_row[c];
        if (type_row) v += type_row[c];
        return v;
    }
};
__global__ void embedding_layernorm_kernel(const int32_t *ids, const int32_t *type_ids, const float *word,
                                           const float *pos, const float *type, const float *gamma,
                                           const float *beta, int T, int D, float eps, float p, uint64_t key,
                                           uint32_t threshold, float *e, __nv_bfloat16 *eb, float *y,
                                           __nv_bfloat16 *yb, float *mean, float *rstd) {
    MHE_SHARED(float, buf, [32]);
    const size_t row_i = blockIdx.x, off = row_i * D;
    const EmbedVal val{word + (size_t)ids[row_i] * D, pos + (size_t)(row_i % T) * D,
                       type ? type + (size_t)(type_ids ? type_ids[row_i] : 0) * D : nullptr};
    const KeptRow<EmbedVal> row(val, D, eps, buf);
    const float mu = row.mu, rs = row.rs, inv = 1.0f / (1.0f - p);
    row.each(val, D, [&](int c, float v) {
        store_dual(e, eb, off + c, v);
        const float yv = (v - mu) * rs * gamma[c] + beta[c];
        store_dual(y, yb, off + c, p <= 0.0f || ops_dropout_keep_fast(key, off + c, threshold) ? yv * inv : 0.0f);
    });
    if (threadIdx.x == 0) {
        mean[row_i] = mu;
        rstd[row_i] = rs;
    }
}

// LayerNorm's backward in one pass over dy and x: each block takes a chunk of rows (at most
// LN_BW_CHUNKS chunks: ceil(N / 256) rows each, 32 at BERT-base's N = 8192), computes each
// row's dx (block reductions as layernorm_forward_kernel) and adds the row's dy·x̂ and dy into
// per-column sums in shared memory, then writes them as the chunk's partials of dγ and dβ;
// cuda_colsum2_finish adds the chunks.  Separate column sums (cuda_colsum.h) re-read dy and x:
// 20 bytes per element (fp32 dx without accumulate) became 12.  256 chunks give both GPUs'
// SMs (108, 132) work and keep the partials small next to the rows (2 x 256 x C floats against
// N x C x 12 B).
#define LN_BW_CHUNKS 256
static int ln_bw_rows(int N) { return (N + LN_BW_CHUNKS - 1) / LN_BW_CHUNKS; }

// Block sums of two values at once (one barrier pair per row instead of two); `buf` is
// __shared__ float[2][32].
__device__ __forceinline__ void block_sum2(float *a, float *b, float (*buf)[32]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    float va = warp_sum(*a), vb = warp_sum(*b);
    __syncthreads();  // buf may still be read for the previous row
    if (lane == 0) {
        buf[0][warp] = va;
        buf[1][warp] = vb;
    }
    __syncthreads();
    *a = warp_sum(lane < n_warps ? buf[0][lane] : 0.0f);
    *b = warp_sum(lane < n_warps ? buf[1][lane] : 0.0f);
}

// dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)),  g = dy * gamma  (when dx != NULL);
// pg[chunk][c] = Σ_{r in chunk} dy·xhat, pb[chunk][c] = Σ_{r in chunk} dy  (when not NULL).
// Thread t owns columns t, t + blockDim.x, ... of the shared sums: the rows are added in row
// order and no other thread touches them, so they need no barrier.  Each thread reads dy[c]
// before it writes dx[c], so dx may alias dy (ops.h: only without accumulate).
// With drop (layernorm_backward_dropout): dr = dropout(dx) as well, dx's final value kept or
// dropped by the dropout kernel's formula and index (dr fp32, drb bf16: one of them set).
// The kernel's input types by name (dy, x: fp32 or bf16), as RlnIn.
template <typename DYT, typename XT>
struct LnbIn {
    typedef DYT DY;
    typedef XT X;
};
typedef LnbIn<float, float> LnbFp32;
typedef LnbIn<__nv_bfloat16, __nv_bfloat16> LnbBf16;
template <typename In>
__global__ void layernorm_backward_kernel(const typename In::DY *dy, const typename In::X *x, const float *gamma,
                                          const float *mean,
                                          const float *rstd, int N, int C, int rows, float *dx,
                                          __nv_bfloat16 *dxb, int accumulate, float *pg, float *pb, LnDrop drop) {
    MHE_SHARED(float, buf, [2][32]);
    MHE_DYNAMIC_SHARED(float, acc);  // [2][C] when pg or pb, else none
    const int sums = pg != nullptr || pb != nullptr;
    const bool want_dx = dx != nullptr || dxb != nullptr;  // dx null and dxb not: bf16 mode
    float *ag = acc, *ab = sums ? acc + C : nullptr;
    if (sums)
        for (int c = threadIdx.x; c < C; c += blockDim.x) ag[c] = ab[c] = 0.0f;
    const int r0 = blockIdx.x * rows, r1 = r0 + rows < N ? r0 + rows : N;
    for (int r = r0; r < r1; r++) {
        const size_t off = (size_t)r * C;
        const float mu = mean[r], rs = rstd[r];
        float mg = 0, mgx = 0;
        if (want_dx) {  // uniform over the block
            for (int c = threadIdx.x; c < C; c += blockDim.x) {
                const float g = ld_float(dy, off + c) * gamma[c];
                mg += g;
                mgx += g * (ld_float(x, off + c) - mu) * rs;
            }
            block_sum2(&mg, &mgx, buf);
            mg /= (float)C;
            mgx /= (float)C;
        }
        for (int c = threadIdx.x; c < C; c += blockDim.x) {
            const float g0 = ld_float(dy, off + c), xh = (ld_float(x, off + c) - mu) * rs;
            if (sums) {
                ag[c] += g0 * xh;
                ab[c] += g0;
            }
            if (want_dx) {
                const float d = rs * (g0 * gamma[c] - mg - xh * mgx), v = accumulate ? ld_old(dx, dxb, off + c) + d : d;
                store_dual(dx, dxb, off + c, v);
                if (drop.on)
                    store_dual(drop.dr, drop.drb, off + c,
                               drop.inv == 1.0f || ops_dropout_keep_fast(drop.key, off + c, drop.threshold) ? v * drop.inv : 0.0f);
            }
        }
    }
    const size_t out = (size_t)blockIdx.x * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (pg) pg[out + c] = ag[c];
        if (pb) pb[out + c] = ab[c];
    }
}

static void cuda_layernorm_forward(Backend *be, const float *x, const float *gamma,
                                   const float *beta, int N, int C, float eps, float *y,
                                   float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote(be, mean, (size_t)N * sizeof(float));
    cuda_fp32_wrote(be, rstd, (size_t)N * sizeof(float));
    __nv_bfloat16 *yb = cuda_fp32_copy_out(be, y, (size_t)N * C);
    if (N) MHE_LAUNCH(layernorm_forward_kernel, N, MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(mhe_cost(8.0 * N * C, 8.0 * N * C + 8.0 * C + 8.0 * N), yb, (double)N * C))(x, gamma, beta, C, eps, y, yb, mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// The outputs of a row op ending in LayerNorm: mean and rstd, and two activations [n] — the sum
// the LayerNorm normalised (read by LayerNorm's backward only) and y (the next matmuls' and
// residual step's input), fp32 or bf16 (act_out).
struct LnOuts {
    float *sf, *yf;
    __nv_bfloat16 *sb, *yb;
};
static LnOuts ln_outputs(Backend *be, float *sum, float *y, int N, float *mean, float *rstd) {
    cuda_fp32_wrote(be, mean, (size_t)N * sizeof(float));
    cuda_fp32_wrote(be, rstd, (size_t)N * sizeof(float));
    LnOuts o;
    o.sb = act_out(be, sum, &o.sf);
    o.yb = act_out(be, y, &o.yf);
    return o;
}

static void cuda_residual_layernorm_forward(Backend *be, const float *x, const float *r, float p, uint64_t seed,
                                            uint64_t offset, const float *gamma, const float *beta, int N, int C,
                                            float eps, float *s, float *y, float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    const size_t n = (size_t)N * C;
    const __nv_bfloat16 *rb = act_in(be, r), *xb = act_in(be, x);
    const LnOuts o = ln_outputs(be, s, y, N, mean, rstd);
    float *sf = o.sf, *yf = o.yf;
    __nv_bfloat16 *sb = o.sb, *yb = o.yb;
    const float q = p > 0.0f ? p : 0.0f;
    // Reads x and r (4 B each, 2 in bf16), writes s and y (4 B each, 2 in bf16), gamma, beta, mean, rstd as layernorm_forward; ~10 FLOPs per element (dropout, add,
    // LayerNorm's 8).  Rows longer than RLN_KEEP x block re-read x and r from cache.
    MheCost cost = mhe_cost(10.0 * n, ((xb ? 2.0 : 4.0) + (rb ? 2.0 : 4.0) + 8.0) * n + 8.0 * C + 8.0 * N);
    cost = with_act_store(with_act_store(cost, sb, sf, (double)n), yb, yf, (double)n);
    const uint64_t key = ops_dropout_key(seed, offset);
    const uint32_t thr = ops_dropout_threshold(q);
    const int round_sum = cuda_ctx(be)->act_bf16;
    const dim3 grid(N), block(MHE_BLOCK);
    if (!N) {
    } else if (xb && rb && !sf && !yf && ln_warp_takes(C, {xb, rb, sb, yb})) {
        ln_warp_residual_forward(be, cost, xb, rb, q, key, thr, gamma, beta, N, C, eps, sb, yb, mean, rstd, round_sum);
    } else if (xb) {
        MHE_LAUNCH(residual_layernorm_kernel<RlnBf16>, grid, block, 0, cuda_stream(be), cost)(
            xb, rb, q, key, thr, gamma, beta, C, eps, sf, sb, yf, yb, mean, rstd, round_sum);
    } else {
        MHE_LAUNCH(residual_layernorm_kernel<RlnFp32>, grid, block, 0, cuda_stream(be), cost)(
            x, r, q, key, thr, gamma, beta, C, eps, sf, sb, yf, yb, mean, rstd, round_sum);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cuda_embedding_layernorm_forward(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                             const float *word, const float *pos, const float *type,
                                             const float *gamma, const float *beta, int B, int T, int D, float eps,
                                             float p, uint64_t seed, uint64_t offset, float *e, float *y, float *mean,
                                             float *rstd) {
    double t0 = cuda_prof_begin(be);
    const int N = B * T;
    const size_t n = (size_t)N * D;
    const LnOuts o = ln_outputs(be, e, y, N, mean, rstd);
    float *ef = o.sf, *yf = o.yf;
    __nv_bfloat16 *eb = o.sb, *yb = o.yb;
    const float q = p > 0.0f ? p : 0.0f;
    // Reads the word, position (and type) rows (4 B each per element, as embedding_forward
    // counts them) and the ids; gamma, beta, mean, rstd as layernorm_forward; writes e and y (4 B
    // each, 2 in bf16).  ~11 FLOPs per element (the adds, LayerNorm's 8, the
    // dropout's scale).
    MheCost cost = mhe_cost(11.0 * n, 4.0 * ((type ? 3.0 : 2.0) * n + (type_ids ? 2.0 : 1.0) * N) + 8.0 * n +
                                          8.0 * D + 8.0 * N);
    cost = with_act_store(with_act_store(cost, eb, ef, (double)n), yb, yf, (double)n);
    if (N > 0 && D > 0)
        MHE_LAUNCH(embedding_layernorm_kernel, N, MHE_BLOCK, 0, cuda_stream(be), cost)(
            ids, type_ids, word, pos, type, gamma, beta, T, D, eps, q, ops_dropout_key(seed, offset),
            ops_dropout_threshold(q), ef, eb, yf, yb, mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dr (when not NULL) = dropout(dx): layernorm_backward_dropout.
static void layernorm_backward(Backend *be, const float *dy, const float *x, const float *gamma, const float *mean,
                               const float *rstd, int N, int C, float *dx, int accumulate, float *dgamma,
                               float *dbeta, float p, uint64_t seed, uint64_t offset, float *dr) {
    double t0 = cuda_prof_begin(be);
    const double n = (double)N * C;
    // bf16 mode: x (the saved residual sum) and dy (the residual stream's gradient) in bf16, x̂
    // from bf16(s) and the fp32 statistics of s.
    const __nv_bfloat16 *xb = act_in(be, x), *dyb = act_in(be, dy);
    if (dgamma) cuda_fp32_wrote(be, dgamma, (size_t)C * sizeof(float));
    if (dbeta) cuda_fp32_wrote(be, dbeta, (size_t)C * sizeof(float));
    // dx (and dr) fp32 or bf16; in bf16 mode an accumulated dx adds to its bf16 value.
    float *dxw = dx;
    __nv_bfloat16 *dxb = dx ? act_out(be, dx, &dxw) : nullptr;
    LnDrop drop{dr != nullptr, 1.0f, 0, 0, dr, nullptr};
    if (dr) {
        const float q = p > 0.0f ? p : 0.0f;
        drop.inv = 1.0f / (1.0f - q);
        drop.key = ops_dropout_key(seed, offset);
        drop.threshold = ops_dropout_threshold(q);
        drop.drb = act_out(be, dr, &drop.dr);
    }
    // bf16 rows of BERT-base's and GPT-2's widths: one warp per row (cuda_layernorm_warp.cu)
    const bool warp_rows = xb && dyb && !dxw && !(drop.on && drop.dr) && ln_warp_takes(C, {dyb, xb, dxb, drop.drb});
    if (N > 0 && C > 0 && (dx || dgamma || dbeta)) {
        // The warp-per-row kernel: 16 rows a block (two per warp), up to 1024 blocks.
        const int rows = warp_rows ? std::max(16, (N + 1023) / 1024) : ln_bw_rows(N);
        const int chunks = (N + rows - 1) / rows;
        float *pg = nullptr, *pb = nullptr;
        if (dgamma || dbeta) {
            float *p = cuda_colsum_space(be, 2 * (size_t)chunks * C);
            pg = dgamma ? p : nullptr;
            pb = dbeta ? p + (size_t)chunks * C : nullptr;
        }
        const size_t smem = pg || pb ? 2 * (size_t)C * sizeof(float) : 0;
        // Per element: reads dy and x (4 B each, 2 in bf16), writes dx (4 B, 2 in bf16; + 4 B read
        // with accumulate); per row mean, rstd; gamma; per chunk and column the partials written
        // (4 B each).  FLOPs per element: dx's 10 as before (x̂ alone: 2), dy·x̂ summed 2, dy 1;
        // the dropout's 1 and its store (4 B, 2 in bf16) with dr.
        const double outs = (pg != nullptr) + (pb != nullptr);
        const double bytes = ((dyb ? 2.0 : 4.0) + (xb ? 2.0 : 4.0) + (dx ? (accumulate ? 8.0 : 4.0) : 0.0)) * n +
                             8.0 * N + (dx ? 4.0 * C : 0.0) + 4.0 * outs * chunks * C;
        MheCost cost = mhe_cost_blocks(
            ((dx ? 10.0 : 2.0) + (pg ? 2.0 : 0.0) + (pb ? 1.0 : 0.0) + (dr ? 1.0 : 0.0)) * n, bytes, chunks);
        if (dx) cost = with_act_store(cost, dxb, dxw, n);
        if (dr) {
            cost.bytes += 4.0 * n;
            cost = with_act_store(cost, drop.drb, drop.dr, n);
        }
        cudaStream_t st = cuda_stream(be);
        // More than 48 KB of shared memory in all — the partial sums plus the kernel's 256 B of
        // static block sums (buf), so from C = 6,113 — needs the opt-in (sm_80 allows 163 KB per
        // block, sm_90 227 KB).
#define LNB_LAUNCH(IN, DYP, XP)                                                                              \
    do {                                                                                                     \
        if (smem + sizeof(float[2][32]) > 48 * 1024)                                                         \
            CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<IN>,                                   \
                                            cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));        \
        MHE_LAUNCH(layernorm_backward_kernel<IN>, chunks, MHE_BLOCK, smem, st, cost)(                        \
            DYP, XP, gamma, mean, rstd, N, C, rows, dxw, dxb, accumulate, pg, pb, drop);                     \
    } while (0)
        if (warp_rows)
            ln_warp_backward(be, cost, dyb, xb, gamma, mean, rstd, N, C, rows, chunks, dxb, accumulate, pg, pb, drop,
                             smem);
        else if (xb)
            LNB_LAUNCH(LnbBf16, dyb, xb);
        else
            LNB_LAUNCH(LnbFp32, dy, x);
#undef LNB_LAUNCH
        CUDA_CHECK_LAUNCH();
        cuda_colsum2_finish(be, pg, pb, chunks, C, dgamma, dbeta);
    }
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cuda_layernorm_backward(Backend *be, const float *dy, const float *x, const float *gamma,
                                    const float *mean, const float *rstd, int N, int C, float *dx, int accumulate,
                                    float *dgamma, float *dbeta) {
    layernorm_backward(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta, 0.0f, 0, 0, nullptr);
}

static void cuda_layernorm_backward_dropout(Backend *be, const float *dy, const float *x, const float *gamma,
                                            const float *mean, const float *rstd, int N, int C, float *dx,
                                            int accumulate, float *dgamma, float *dbeta, float p, uint64_t seed,
                                            uint64_t offset, float *dr) {
    layernorm_backward(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta, p, seed, offset, dr);
}

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_layernorm_forward(Backend *be, const Act *x, const float *gamma, const float *beta, int N, int C,
                                  float eps, Act *y, float *mean, float *rstd) {
    cuda_layernorm_forward(be, af(x), gamma, beta, N, C, eps, af(y), mean, rstd);
}
static void act_residual_layernorm_forward(Backend *be, const Act *x, const Act *r, float p, uint64_t seed,
                                           uint64_t offset, const float *gamma, const float *beta, int N, int C,
                                           float eps, Act *s, Act *y, float *mean, float *rstd) {
    cuda_residual_layernorm_forward(be, af(x), af(r), p, seed, offset, gamma, beta, N, C, eps, af(s), af(y), mean,
                                    rstd);
}
static void act_embedding_layernorm_forward(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                            const float *word, const float *pos, const float *type,
                                            const float *gamma, const float *beta, int B, int T, int D, float eps,
                                            float p, uint64_t seed, uint64_t offset, Act *e, Act *y, float *mean,
                                            float *rstd) {
    cuda_embedding_layernorm_forward(be, ids, type_ids, word, pos, type, gamma, beta, B, T, D, eps, p, seed, offset,
                                     af(e), af(y), mean, rstd);
}
static void act_layernorm_backward(Backend *be, const Act *dy, const Act *x, const float *gamma, const float *mean,
                                   const float *rstd, int N, int C, Act *dx, int accumulate, float *dgamma,
                                   float *dbeta) {
    cuda_layernorm_backward(be, af(dy), af(x), gamma, mean, rstd, N, C, af(dx), accumulate, dgamma, dbeta);
}
static void act_layernorm_backward_dropout(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                           const float *mean, const float *rstd, int N, int C, Act *dx,
                                           int accumulate, float *dgamma, float *dbeta, float p, uint64_t seed,
                                           uint64_t offset, Act *dr) {
    cuda_layernorm_backward_dropout(be, af(dy), af(x), gamma, mean, rstd, N, C, af(dx), accumulate, dgamma, dbeta, p,
                                    seed, offset, af(dr));
}

void cuda_install_layernorm(Backend *be) {
    be->layernorm_forward = act_layernorm_forward;
    be->residual_layernorm_forward = act_residual_layernorm_forward;
    be->embedding_layernorm_forward = act_embedding_layernorm_forward;
    be->layernorm_backward = act_layernorm_backward;
    be->layernorm_backward_dropout = act_layernorm_backward_dropout;
}

// bf16 activations (bf16 mode): layernorm_forward on the pre-LN residual stream's bf16 rows
// (the fused forms above take bf16 already).
// layernorm_forward_kernel (above) on a bf16 row: the same two passes in fp32 over the
// widened values, one rounding per stored element; each thread rewrites only what it read, so y
// may alias x.
__global__ void act_layernorm_forward_kernel(const __nv_bfloat16 *x, const float *gamma, const float *beta, int C,
                                             float eps, __nv_bfloat16 *y, float *mean, float *rstd) {
    MHE_SHARED(float, buf, [32]);
    const size_t off = (size_t)blockIdx.x * C;
    float s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += __bfloat162float(x[off + c]);
    const float mu = block_sum(s, buf) / (float)C;
    float v = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = __bfloat162float(x[off + c]) - mu;
        v += d * d;
    }
    const float rs = rsqrtf(block_sum(v, buf) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[off + c] = __float2bfloat16((__bfloat162float(x[off + c]) - mu) * rs * gamma[c] + beta[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}
static void bf16_layernorm_forward(Backend *be, const Act *x, const float *gamma, const float *beta, int N, int C,
                                   float eps, Act *y, float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote_alloc(be, mean);
    cuda_fp32_wrote_alloc(be, rstd);
    if (N) MHE_LAUNCH(act_layernorm_forward_kernel, N, MHE_BLOCK, 0, cuda_stream(be), mhe_cost(8.0 * N * C, 4.0 * N * C + 8.0 * C + 8.0 * N))(ab(x), gamma, beta, C, eps, ab(y), mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
void cuda_install_layernorm_bf16(Backend *be) { be->layernorm_forward = bf16_layernorm_forward; }
