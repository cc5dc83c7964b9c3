// defines: the flash attention core on CUDA cores (fp32 kernels, every feature), its support
// check and sizes, and the hand-off to the tensor-core kernels (cuda_flash_tc.cu).
// Fused ("flash") attention: tiled, online softmax, nothing of size T x T in global memory
// (DESIGN.md §1 semantics, every AttnShape feature).  The forward saves only the row
// log-sum-exp L [B, n, T] and the unscaled output Opre = dropout(P) V [B, T, n, v_dim]; the
// backward recomputes P from L:
//   P_ij = exp(s_ij - L_i),  G = dout ⊙ out_scale,  D_i = G_i · Opre_i,
//   dV_j = Σ_i Pd_ij G_i,  dS_ij = P_ij (keep_ij/(1-p) G_i·v_j - D_i),
//   dK_j = scale Σ_i dS_ij q_i,  dQ_i = scale Σ_j dS_ij k_j,  dkey_bias_j = Σ_i dS_ij.
// Two backward kernels so nothing needs atomics: one block per key tile accumulates dK, dV and
// dkey_bias over all query rows (and over the heads sharing a K/V head); one block per query
// tile accumulates dQ.  Results are deterministic.
// One thread per query row (forward, dQ) or key row (dK/dV); per-row vectors live in shared
// memory (rows padded by one float against bank conflicts), K/V (or Q/G) tiles are staged in
// shared memory and read by all threads at once.  Products run on the fp32 CUDA cores (in bf16
// mode on the fp32 staging of cuda_act_stage.h, for the shapes the tensor-core kernels do not take).
#include <cmath>

#include "kernels/cuda/cuda_attn_idx.h"
#include "kernels/cuda/cuda_colsum.h"

#define FLASH_ROWS 32   // query rows (forward, dQ) or key rows (dK/dV) per block = threads
#define FLASH_TILE 32   // keys per staged tile (forward, dQ)
#define FLASH_QTILE 16  // query rows per staged tile (dK/dV)
#define FLASH_MAX_SMEM (48 * 1024)

struct FlashArgs {
    AttnIdx a;
    float scale;
    int causal;
    const int32_t *key_mask;
    const float *key_bias, *out_scale, *out_shift;
    float drop, inv_keep;
    uint64_t key;
    uint32_t threshold;
};

__device__ __forceinline__ int flash_imin(int x, int y) { return x < y ? x : y; }
// Dropout of P element (b, h, i, j): its keep factor (0 or 1/(1-p)).
__device__ __forceinline__ float flash_keep(const FlashArgs &f, int b, int h, int i, int j) {
    if (f.drop <= 0.0f) return 1.0f;
    return ops_dropout_keep_fast(f.key, p_index(f.a, b, h, i, j), f.threshold) ? f.inv_keep : 0.0f;
}
__device__ __forceinline__ float flash_key_bias(const FlashArgs &f, int b, int j, int h) {
    return f.key_bias ? f.key_bias[((size_t)b * f.a.T + j) * f.a.n + h] : 0.0f;
}

// grid (query tiles, n, B), FLASH_ROWS threads.
__global__ void flash_forward_kernel(FlashArgs f, const float *q, const float *k, const float *v,
                                     float *out, float *opre, float *lse) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int dq = a.dq, dv = a.dv, h = blockIdx.y, b = blockIdx.z, t = threadIdx.x;
    const int i = blockIdx.x * FLASH_ROWS + t;
    const bool live = i < a.T;
    float *qi = sm + t * (dq + 1), *oi = sm + FLASH_ROWS * (dq + 1) + t * (dv + 1);
    float *si = sm + FLASH_ROWS * (dq + dv + 2) + t * (FLASH_TILE + 1);
    float *ks = sm + FLASH_ROWS * (dq + dv + FLASH_TILE + 3), *vs = ks + FLASH_TILE * dq;
    if (live) {
        const float *src = q_row(a, q, b, i, h);
        for (int c = 0; c < dq; c++) qi[c] = src[c];
    }
    for (int c = 0; c < dv; c++) oi[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    // Causal: keys past the tile's last query are hidden from all its rows.
    const int jend = f.causal ? flash_imin(a.T, (int)(blockIdx.x + 1) * FLASH_ROWS) : a.T;
    for (int j0 = 0; j0 < jend; j0 += FLASH_TILE) {
        const int nb = flash_imin(FLASH_TILE, a.T - j0);
        __syncthreads();  // the previous tile is consumed
        for (int e = t; e < nb * dq; e += blockDim.x)
            ks[e] = k_row(a, k, b, j0 + e / dq, h)[e % dq];
        for (int e = t; e < nb * dv; e += blockDim.x)
            vs[e] = v_row(a, v, b, j0 + e / dv, h)[e % dv];
        __syncthreads();
        if (!live) continue;
        float tmax = -INFINITY;
        for (int jj = 0; jj < nb; jj++) {
            float s = -INFINITY;
            if (key_visible(a, f.causal, f.key_mask, b, i, j0 + jj)) {
                float dot = 0.0f;
                for (int c = 0; c < dq; c++) dot += qi[c] * ks[jj * dq + c];
                s = f.scale * dot + flash_key_bias(f, b, j0 + jj, h);
            }
            si[jj] = s;
            tmax = fmaxf(tmax, s);
        }
        if (tmax == -INFINITY) continue;  // nothing visible in this tile
        const float mnew = fmaxf(m, tmax), corr = expf(m - mnew);  // m = -inf: corr = 0
        l *= corr;
        for (int c = 0; c < dv; c++) oi[c] *= corr;
        for (int jj = 0; jj < nb; jj++) {
            if (si[jj] == -INFINITY) continue;
            float p = expf(si[jj] - mnew);
            l += p;
            float pd = p * flash_keep(f, b, h, i, j0 + jj);
            if (pd == 0.0f) continue;
            for (int c = 0; c < dv; c++) oi[c] += pd * vs[jj * dv + c];
        }
        m = mnew;
    }
    if (!live) return;
    // No visible key: all-zero probabilities (l = 0), the output is out_shift; L = +inf makes
    // every recomputed P of the row 0.
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const size_t row = (((size_t)b * a.T + i) * a.n + h) * dv;
    for (int c = 0; c < dv; c++) {
        float o = oi[c] * inv;
        opre[row + c] = o;
        out[row + c] = o * (f.out_scale ? f.out_scale[h * dv + c] : 1.0f) + (f.out_shift ? f.out_shift[h * dv + c] : 0.0f);
    }
    lse[((size_t)b * a.n + h) * a.T + i] = l > 0.0f ? m + logf(l) : INFINITY;
}

// D[b, h, i] = Σ_c dout · out_scale · Opre (one thread per (b, i, h)).  dout in bf16: the
// tensor-core path's G, the bf16 activation, as the dP = G Vᵀ products read it.  gs (non-null:
// the tensor-core path with out_scale) receives G = bf16(bf16(dout) · out_scale), the value the
// tensor-core kernels would otherwise form at every tile they stage.
__device__ __forceinline__ float gval(const float *g, size_t i) { return g[i]; }
__device__ __forceinline__ float gval(const __nv_bfloat16 *g, size_t i) { return __bfloat162float(g[i]); }
template <typename G>
__global__ void flash_rowdot_kernel(FlashArgs f, const G *dout, const float *opre, float *D, __nv_bfloat16 *gs) {
    const AttnIdx &a = f.a;
    const size_t total = (size_t)a.B * a.T * a.n;
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < total; r += (size_t)blockDim.x * gridDim.x) {
        const int h = (int)(r % a.n);
        const size_t bt = r / a.n;
        float acc = 0.0f;
        for (int c = 0; c < a.dv; c++) {
            const float g = gval(dout, r * a.dv + c) * (f.out_scale ? f.out_scale[h * a.dv + c] : 1.0f);
            if (gs) gs[r * a.dv + c] = __float2bfloat16(g);
            acc += g * opre[r * a.dv + c];
        }
        D[((bt / a.T) * a.n + h) * a.T + bt % a.T] = acc;
    }
}

// The row dots and, in the same pass over dout and Opre, the output scale/shift gradients'
// column sums (no second pass re-reading both): D as flash_rowdot_kernel, and per chunk k of
// COLSUM_ROWS token rows the partials Σ dout ⊙ Opre (at partials[k C + h dv + c], C = n dv) and
// Σ dout (at partials[(chunks + k) C + ...]) for cuda_colsum2_finish.  grid (chunks, n): warps
// take rows, lanes the head's dv columns; each warp sums its rows per column in shared memory,
// then the warps are added in order — deterministic.
template <typename G>
__global__ void flash_rowdot_sums_kernel(FlashArgs f, const G *dout, const float *opre, float *D, float *partials,
                                         __nv_bfloat16 *gs) {
    MHE_DYNAMIC_SHARED(float, sm);  // [warps][2 dv]
    const AttnIdx &a = f.a;
    const int h = blockIdx.y, dv = a.dv, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const size_t rows = (size_t)a.B * a.T, r0 = (size_t)blockIdx.x * COLSUM_ROWS;
    const size_t r1 = r0 + COLSUM_ROWS < rows ? r0 + COLSUM_ROWS : rows, C = (size_t)a.n * dv;
    float *sa = sm + (size_t)warp * 2 * dv, *sb = sa + dv;
    for (int c = lane; c < dv; c += 32) sa[c] = sb[c] = 0.0f;
    for (size_t r = r0 + warp; r < r1; r += warps) {  // warp-uniform: every lane reaches warp_sum
        const size_t row = (r * a.n + h) * dv;
        float dot = 0.0f;
        for (int c = lane; c < dv; c += 32) {
            const float g = gval(dout, row + c), o = opre[row + c];
            const float gsc = g * (f.out_scale ? f.out_scale[h * dv + c] : 1.0f);
            if (gs) gs[row + c] = __float2bfloat16(gsc);  // as flash_rowdot_kernel
            dot += gsc * o;
            sa[c] += g * o;
            sb[c] += g;
        }
        dot = warp_sum(dot);
        if (lane == 0) D[((r / a.T) * a.n + h) * a.T + r % a.T] = dot;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < dv; c += blockDim.x) {
        float A = 0.0f, B = 0.0f;
        for (int w = 0; w < warps; w++) {
            A += sm[(size_t)w * 2 * dv + c];
            B += sm[(size_t)w * 2 * dv + dv + c];
        }
        partials[blockIdx.x * C + (size_t)h * dv + c] = A;
        partials[(gridDim.x + blockIdx.x) * C + (size_t)h * dv + c] = B;
    }
}

// grid (key tiles, B), FLASH_ROWS threads, one per key j: loops over every head and query row.
__global__ void flash_dkv_kernel(FlashArgs f, const float *q, const float *k, const float *v,
                                 const float *dout, const float *lse, const float *D, float *dk,
                                 float *dv, float *dkey_bias) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int dq = a.dq, dvd = a.dv, b = blockIdx.y, t = threadIdx.x;
    const int j = blockIdx.x * FLASH_ROWS + t;
    const bool live = j < a.T;
    float *kj = sm + t * (dq + 1), *vj = sm + FLASH_ROWS * (dq + 1) + t * (dvd + 1);
    float *dkj = sm + FLASH_ROWS * (dq + dvd + 2) + t * (dq + 1);
    float *dvj = sm + FLASH_ROWS * (2 * dq + dvd + 3) + t * (dvd + 1);
    float *qs = sm + FLASH_ROWS * (2 * dq + 2 * dvd + 4), *gs = qs + FLASH_QTILE * dq;
    float *Ls = gs + FLASH_QTILE * dvd, *Ds = Ls + FLASH_QTILE;
    for (int c = 0; c < dq; c++) dkj[c] = 0.0f;
    for (int c = 0; c < dvd; c++) dvj[c] = 0.0f;
    // Causal: query rows before the tile's first key see none of its keys.
    const int i_first = f.causal ? (int)blockIdx.x * FLASH_ROWS / FLASH_QTILE * FLASH_QTILE : 0;
    for (int h = 0; h < a.n; h++) {
        if (live && h % a.kr == 0) {
            const float *src = k_row(a, k, b, j, h);
            for (int c = 0; c < dq; c++) kj[c] = src[c];
        }
        if (live && h % a.vr == 0) {
            const float *src = v_row(a, v, b, j, h);
            for (int c = 0; c < dvd; c++) vj[c] = src[c];
        }
        const float kb = live ? flash_key_bias(f, b, j, h) : 0.0f;
        float dkb = 0.0f;
        for (int i0 = i_first; i0 < a.T; i0 += FLASH_QTILE) {
            const int nq = flash_imin(FLASH_QTILE, a.T - i0);
            __syncthreads();
            for (int e = t; e < nq * dq; e += blockDim.x)
                qs[e] = q_row(a, q, b, i0 + e / dq, h)[e % dq];
            for (int e = t; e < nq * dvd; e += blockDim.x) {
                const int c = e % dvd;
                float g = dout[(((size_t)b * a.T + i0 + e / dvd) * a.n + h) * dvd + c] * (f.out_scale ? f.out_scale[h * dvd + c] : 1.0f);
                gs[e] = g;
            }
            for (int e = t; e < nq; e += blockDim.x) {
                Ls[e] = lse[((size_t)b * a.n + h) * a.T + i0 + e];
                Ds[e] = D[((size_t)b * a.n + h) * a.T + i0 + e];
            }
            __syncthreads();
            if (!live) continue;
            for (int ii = 0; ii < nq; ii++) {
                const int i = i0 + ii;
                if (Ls[ii] == INFINITY || !key_visible(a, f.causal, f.key_mask, b, i, j)) continue;
                const float *qi = qs + ii * dq, *gi = gs + ii * dvd;
                float dot = 0.0f, dpd = 0.0f;
                for (int c = 0; c < dq; c++) dot += qi[c] * kj[c];
                for (int c = 0; c < dvd; c++) dpd += gi[c] * vj[c];
                const float p = expf(f.scale * dot + kb - Ls[ii]), keep = flash_keep(f, b, h, i, j);
                const float pd = p * keep, ds = p * (dpd * keep - Ds[ii]);
                if (pd != 0.0f)
                    for (int c = 0; c < dvd; c++) dvj[c] += pd * gi[c];
                for (int c = 0; c < dq; c++) dkj[c] += ds * qi[c];
                dkb += ds;
            }
        }
        if (!live) continue;
        if (dkey_bias) dkey_bias[((size_t)b * a.T + j) * a.n + h] = dkb;
        if (dk && (h + 1) % a.kr == 0) {  // the last head sharing this K head
            float *dst = dk + ((size_t)b * a.T + j) * a.ldk + (size_t)(h / a.kr) * dq;
            for (int c = 0; c < dq; c++) {
                dst[c] = f.scale * dkj[c];
                dkj[c] = 0.0f;
            }
        }
        if (dv && (h + 1) % a.vr == 0) {
            float *dst = dv + ((size_t)b * a.T + j) * a.ldv + (size_t)(h / a.vr) * dvd;
            for (int c = 0; c < dvd; c++) {
                dst[c] = dvj[c];
                dvj[c] = 0.0f;
            }
        }
    }
}

// grid (query tiles, B), FLASH_ROWS threads, one per query i: loops over every head and key.
__global__ void flash_dq_kernel(FlashArgs f, const float *q, const float *k, const float *v,
                                const float *dout, const float *lse, const float *D, float *dq) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int dqd = a.dq, dvd = a.dv, b = blockIdx.y, t = threadIdx.x;
    const int i = blockIdx.x * FLASH_ROWS + t;
    const bool live = i < a.T;
    float *qi = sm + t * (dqd + 1), *gi = sm + FLASH_ROWS * (dqd + 1) + t * (dvd + 1);
    float *dqi = sm + FLASH_ROWS * (dqd + dvd + 2) + t * (dqd + 1);
    float *ks = sm + FLASH_ROWS * (2 * dqd + dvd + 3), *vs = ks + FLASH_TILE * dqd;
    for (int c = 0; c < dqd; c++) dqi[c] = 0.0f;
    const int jend = f.causal ? flash_imin(a.T, (int)(blockIdx.x + 1) * FLASH_ROWS) : a.T;
    for (int h = 0; h < a.n; h++) {
        float L = INFINITY, Di = 0.0f;
        if (live) {
            const float *src = q_row(a, q, b, i, h);
            for (int c = 0; c < dqd; c++) qi[c] = src[c];
            const size_t row = (((size_t)b * a.T + i) * a.n + h) * dvd;
            for (int c = 0; c < dvd; c++)
                gi[c] = dout[row + c] * (f.out_scale ? f.out_scale[h * dvd + c] : 1.0f);
            L = lse[((size_t)b * a.n + h) * a.T + i];
            Di = D[((size_t)b * a.n + h) * a.T + i];
        }
        for (int j0 = 0; j0 < jend; j0 += FLASH_TILE) {
            const int nb = flash_imin(FLASH_TILE, a.T - j0);
            __syncthreads();
            for (int e = t; e < nb * dqd; e += blockDim.x)
                ks[e] = k_row(a, k, b, j0 + e / dqd, h)[e % dqd];
            for (int e = t; e < nb * dvd; e += blockDim.x)
                vs[e] = v_row(a, v, b, j0 + e / dvd, h)[e % dvd];
            __syncthreads();
            if (!live || L == INFINITY) continue;
            for (int jj = 0; jj < nb; jj++) {
                const int j = j0 + jj;
                if (!key_visible(a, f.causal, f.key_mask, b, i, j)) continue;
                float dot = 0.0f, dpd = 0.0f;
                for (int c = 0; c < dqd; c++) dot += qi[c] * ks[jj * dqd + c];
                for (int c = 0; c < dvd; c++) dpd += gi[c] * vs[jj * dvd + c];
                const float p = expf(f.scale * dot + flash_key_bias(f, b, j, h) - L);
                const float ds = p * (dpd * flash_keep(f, b, h, i, j) - Di);
                for (int c = 0; c < dqd; c++) dqi[c] += ds * ks[jj * dqd + c];
            }
        }
        if (live && dq && (h + 1) % a.qr == 0) {  // the last head sharing this Q head
            float *dst = dq + ((size_t)b * a.T + i) * a.ldq + (size_t)(h / a.qr) * dqd;
            for (int c = 0; c < dqd; c++) {
                dst[c] = f.scale * dqi[c];
                dqi[c] = 0.0f;
            }
        }
    }
}

// ---- host side ----

static size_t fwd_smem(const AttnShape *s) {
    return sizeof(float) * (FLASH_ROWS * (s->qk_dim + s->v_dim + FLASH_TILE + 3) + FLASH_TILE * (s->qk_dim + s->v_dim));
}
static size_t dkv_smem(const AttnShape *s) {
    return sizeof(float) * (FLASH_ROWS * (2 * s->qk_dim + 2 * s->v_dim + 4) + FLASH_QTILE * (s->qk_dim + s->v_dim + 2));
}
static size_t dq_smem(const AttnShape *s) {
    return sizeof(float) * (FLASH_ROWS * (2 * s->qk_dim + s->v_dim + 3) + FLASH_TILE * (s->qk_dim + s->v_dim));
}

int cuda_flash_supported(const AttnShape *s) {
    return fwd_smem(s) <= FLASH_MAX_SMEM && dkv_smem(s) <= FLASH_MAX_SMEM && dq_smem(s) <= FLASH_MAX_SMEM;
}

void cuda_flash_sizes(const AttnShape *s, size_t *saved, size_t *scratch) {
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    *saved = rows_n + rows_n * s->v_dim;  // L, Opre
    *scratch = rows_n;                    // D
}

static FlashArgs flash_args(const AttnShape *s) {
    FlashArgs f;
    attn_args_common(f, s);
    f.out_shift = s->out_shift;
    return f;
}

// Cost model terms: T x T work per (b, h) pair; K/V (or Q/G) tiles are re-read from global
// memory by every block of the same sequence (counted in full: no L2 reuse assumed).
// (query_tiles / key_tiles, cuda_attn_idx.h: causal tiles stop at the diagonal.)
static double bn_of(const AttnShape *s) { return (double)s->B * s->n_heads; }

void cuda_flash_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                        const float *v, float *out, float *saved) {
    if (cuda_flash_tc_supported(be, s)) {
        cuda_flash_tc_forward(be, s, q, k, v, out, saved);
        return;
    }
    const FlashArgs f = flash_args(s);
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    float *lse = saved, *opre = saved + rows_n;
    const TileWork w = query_tiles(s->T, FLASH_ROWS, s->causal);
    const double tt = bn_of(s) * w.pairs, dq = s->qk_dim, dv = s->v_dim;
    const MheCost cost = mhe_cost(tt * (2 * dq + 2 * dv + 8),
                                  4.0 * (rows_n * dq + bn_of(s) * w.reads * (dq + dv) + 2.0 * rows_n * dv + rows_n));
    dim3 grid((unsigned)((s->T + FLASH_ROWS - 1) / FLASH_ROWS), (unsigned)s->n_heads, (unsigned)s->B);
    MHE_LAUNCH(flash_forward_kernel, grid, FLASH_ROWS, fwd_smem(s), cuda_stream(be), cost)(f, q, k, v, out, opre, lse);
    CUDA_CHECK_LAUNCH();
}

void cuda_flash_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                         const float *v, const float *saved, const float *dout, float *dq,
                         float *dk, float *dv, float *dkey_bias, float *dout_scale, float *dout_shift,
                         float *scratch) {
    const FlashArgs f = flash_args(s);
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    const float *lse = saved, *opre = saved + rows_n;
    float *D = scratch;
    cudaStream_t st = cuda_stream(be);
    const TileWork kw = key_tiles(s->T, FLASH_ROWS, s->causal), qw = query_tiles(s->T, FLASH_ROWS, s->causal);
    const double bn = bn_of(s), dqd = s->qk_dim, dvd = s->v_dim;
    // The tensor-core path (bf16 mode) reads dout as the bf16 activation it is.
    const bool tc = cuda_flash_tc_supported(be, s);
    // With out_scale (mhe_mul) the tensor-core kernels' G is bf16(bf16(dout) · out_scale) (one
    // rounding more than from fp32, as autocast's bf16 dout would give): the row dots, which form
    // that product anyway, store it once (2 B per element, grow-only scratch), and the dQ and
    // dK/dV kernels stage G from it: 2 B per element read at every re-read instead of 4.
    __nv_bfloat16 *gs = nullptr;
    if (tc && s->out_scale) {
        CudaCtx *c = cuda_ctx(be);
        gs = cuda_grow(be, c->flash_g, c->flash_g_cap, rows_n * (size_t)dvd);
    }
    const __nv_bfloat16 *gt = tc ? reinterpret_cast<const __nv_bfloat16 *>(dout) : nullptr;
    if (dout_scale || dout_shift) {
        // With the output scale/shift gradients' sums (on the tensor-core path of the bf16 dout the
        // products see).
        const int chunks = (int)((s->B * (size_t)s->T + COLSUM_ROWS - 1) / COLSUM_ROWS);
        const size_t C = (size_t)s->n_heads * dvd, np = 2 * (size_t)chunks * C;
        float *partials = cuda_colsum_space(be, np);
        const dim3 grid((unsigned)chunks, (unsigned)s->n_heads);
        const unsigned threads = MHE_BLOCK;
        const size_t smem = sizeof(float) * 2 * (threads / 32) * dvd;
        const double el = rows_n * dvd, gb = tc ? 2.0 : 4.0;
        const MheCost cost =
            mhe_cost(7.0 * el, (gb + 4.0 + (gs ? 2.0 : 0.0)) * el + 4.0 * rows_n + 4.0 * (double)np);
        if (gt) {
            MHE_LAUNCH(flash_rowdot_sums_kernel<__nv_bfloat16>, grid, threads, smem, st, cost)(f, gt, opre, D, partials, gs);
        } else {
            MHE_LAUNCH(flash_rowdot_sums_kernel<float>, grid, threads, smem, st, cost)(f, dout, opre, D, partials, nullptr);
        }
        CUDA_CHECK_LAUNCH();
        cuda_colsum2_finish(be, partials, partials + (size_t)chunks * C, chunks, (int)C, dout_scale, dout_shift);
    } else if (gt) {
        MHE_LAUNCH(flash_rowdot_kernel<__nv_bfloat16>, cuda_grid_for(rows_n), MHE_BLOCK, 0, st,
                   mhe_cost(3.0 * rows_n * dvd, (6.0 + (gs ? 2.0 : 0.0)) * rows_n * dvd + 4.0 * rows_n))(f, gt, opre, D, gs);
    } else {
        MHE_LAUNCH(flash_rowdot_kernel<float>, cuda_grid_for(rows_n), MHE_BLOCK, 0, st,
                   mhe_cost(3.0 * rows_n * dvd, 4.0 * (2.0 * rows_n * dvd + rows_n)))(f, dout, opre, D, nullptr);
    }
    CUDA_CHECK_LAUNCH();
    if (tc) {
        cuda_flash_tc_backward(be, s, q, k, v, saved, dout, D, gs, dq, dk, dv, dkey_bias);
        return;
    }
    const unsigned ntiles = (unsigned)((s->T + FLASH_ROWS - 1) / FLASH_ROWS);
    if (dk || dv || dkey_bias) {
        const MheCost cost = mhe_cost(bn * kw.pairs * (4 * dqd + 4 * dvd + 10),
                                      4.0 * (bn * kw.reads * (dqd + dvd + 2) + rows_n * (dqd + dvd + 1)));
        MHE_LAUNCH(flash_dkv_kernel, dim3(ntiles, (unsigned)s->B), FLASH_ROWS, dkv_smem(s), st, cost)(f, q, k, v, dout, lse, D, dk, dv, dkey_bias);
        CUDA_CHECK_LAUNCH();
    }
    if (dq) {
        const MheCost cost = mhe_cost(bn * qw.pairs * (4 * dqd + 2 * dvd + 8),
                                      4.0 * (bn * qw.reads * (dqd + dvd) + rows_n * (2 * dqd + dvd + 2)));
        MHE_LAUNCH(flash_dq_kernel, dim3(ntiles, (unsigned)s->B), FLASH_ROWS, dq_smem(s), st, cost)(f, q, k, v, dout, lse, D, dq);
        CUDA_CHECK_LAUNCH();
    }
}
