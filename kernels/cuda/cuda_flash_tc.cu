// Fused attention on tensor cores (bf16 mode): the kernels of cuda_flash.cu with every product
// as nvcuda::wmma 16x16x16 bf16 multiplies accumulating in fp32, tiles staged through shared
// memory.  Same semantics, same saved buffers (L, Opre) and scratch (D), same dropout index.
// Each warp owns 16 rows: eight warps (128 query rows) per forward / dQ block, four (64 key
// rows) per dK/dV block; they multiply against 32-column tiles of the other side.  Larger
// blocks re-read the other side's tiles less often; their shared memory passes 48 KB at
// d = 64 (tc_opt_in).
// The forward takes two passes over the keys: the first finds each row's max and sum (scalars
// only), the second accumulates O = Pd V with P already normalised by L, so the accumulator
// fragments never need a per-row rescale (whose element layout is the hardware's).
// Head dims: qk_dim == v_dim in {16, 32, 64} (templates); other shapes use cuda_flash.cu.
#include <cmath>

#include "kernels/cuda/cuda_attn_idx.h"

using namespace nvcuda;

#define TC_ROWS 64    // key rows per dK/dV block: 4 warps x 16 (halves Q/dout re-reads)
#define TC_THREADS 128
#define TC_QROWS 128  // query rows per forward / dQ block: 8 warps x 16 (fewer K/V re-reads)
#define TC_QTHREADS 256
#define TC_COLS 32    // columns of the other side per staged tile

typedef __nv_bfloat16 bf16_t;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> AccFrag;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major> ARow;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major> BRow;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major> BCol;

struct TcArgs {
    AttnIdx a;
    float scale;
    int causal;
    const int32_t *key_mask;
    const float *key_bias, *out_scale;
    float drop, inv_keep;
    uint64_t key;
    uint32_t threshold;
    // bf16 twins of the outputs (cuda_mirror.cu), same layout; nullptr: none.
    bf16_t *outb, *dqb, *dkb, *dvb;
    // bf16 twins of the inputs, same layout: tiles are staged from them (half the bytes of the
    // fp32 data, the same bf16 values); nullptr: staged from fp32.  G's only without out_scale
    // (bf16(dout) * scale would round twice).
    const bf16_t *qb, *kb, *vb, *gb;
};

__device__ __forceinline__ int tc_imin(int x, int y) { return x < y ? x : y; }
__device__ __forceinline__ float tc_keep(const TcArgs &f, int b, int h, int i, int j) {
    if (f.drop <= 0.0f) return 1.0f;
    return ops_dropout_keep_fast(f.key, p_index(f.a, b, h, i, j), f.threshold) ? f.inv_keep : 0.0f;
}
__device__ __forceinline__ float tc_key_bias(const TcArgs &f, int b, int j, int h) {
    return f.key_bias ? f.key_bias[((size_t)b * f.a.T + j) * f.a.n + h] : 0.0f;
}

// rows x D of a [B, T, heads, D] operand (row r = t0 + r of sequence b, head h/ratio) into
// shared bf16, rows past T as zeros; `mul` (per column, may be NULL) scales on the way.
// With srcb (the bf16 twin of src, same layout) the tile is copied from it instead.
template <int D, int ROWS>
__device__ __forceinline__ void tc_stage(bf16_t *dst, const float *src, const bf16_t *srcb, int ld, int ratio,
                                         int b, int t0, int h, const AttnIdx &a, const float *mul) {
    for (int e = threadIdx.x; e < ROWS * D; e += blockDim.x) {
        const int r = e / D, c = e % D, t = t0 + r;
        const size_t at = ((size_t)b * a.T + t) * ld + (size_t)(h / ratio) * D + c;
        if (srcb) {
            dst[e] = t < a.T ? srcb[at] : __float2bfloat16(0.0f);
            continue;
        }
        float x = 0.0f;
        if (t < a.T) x = src[at] * (mul ? mul[c] : 1.0f);
        dst[e] = __float2bfloat16(x);
    }
}

// C (16 x 32, fp32 in shared, ld TC_COLS) = A (16 x D rows of `a`, ld D) times Bᵀ, B being
// 32 x D rows of `bm` (ld D): one warp.
template <int D>
__device__ __forceinline__ void tc_abt(const bf16_t *a, const bf16_t *bm, float *c) {
    MHE_UNROLL
    for (int n = 0; n < TC_COLS / 16; n++) {
        AccFrag acc;
        wmma::fill_fragment(acc, 0.0f);
        MHE_UNROLL
        for (int k = 0; k < D / 16; k++) {
            ARow fa;
            BCol fb;
            wmma::load_matrix_sync(fa, a + k * 16, D);
            wmma::load_matrix_sync(fb, bm + n * 16 * D + k * 16, D);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, TC_COLS, wmma::mem_row_major);
    }
}
// acc[c] (16 x D in D/16 fragments) += A (16 x 32 of `a`, ld TC_COLS) times B (32 x D, ld D).
template <int D>
__device__ __forceinline__ void tc_ab_acc(AccFrag *acc, const bf16_t *a, const bf16_t *bm) {
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++)
        MHE_UNROLL
        for (int k = 0; k < TC_COLS / 16; k++) {
            ARow fa;
            BRow fb;
            wmma::load_matrix_sync(fa, a + k * 16, TC_COLS);
            wmma::load_matrix_sync(fb, bm + k * 16 * D + c * 16, D);
            wmma::mma_sync(acc[c], fa, fb, acc[c]);
        }
}

// grid (query tiles, n, B).  Shared: Q, K, V tiles (bf16), S (fp32), P (bf16), O (fp32), L.
template <int D>
__global__ void __launch_bounds__(TC_QTHREADS, 1) flash_tc_forward_kernel(TcArgs f, const float *q, const float *k,
                                                                      const float *v, const float *out_shift,
                                                                      float *out, float *opre, float *lse) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x, w = t / 32, q0 = blockIdx.x * TC_QROWS;
    float *Ss = sm, *Os = Ss + TC_QROWS * TC_COLS, *Ls = Os + TC_QROWS * D;
    bf16_t *Qs = reinterpret_cast<bf16_t *>(Ls + TC_QROWS), *Ks = Qs + TC_QROWS * D, *Vs = Ks + TC_COLS * D,
           *Ps = Vs + TC_COLS * D;
    tc_stage<D, TC_QROWS>(Qs, q, f.qb, a.ldq, a.qr, b, q0, h, a, nullptr);
    const int i = q0 + t;  // the row whose softmax statistics thread t < 32 keeps
    const int jend = f.causal ? tc_imin(a.T, q0 + TC_QROWS) : a.T;
    float m = -INFINITY, l = 0.0f;
    for (int pass = 0; pass < 2; pass++) {
        AccFrag acc[D / 16];
        MHE_UNROLL
        for (int c = 0; c < D / 16; c++) wmma::fill_fragment(acc[c], 0.0f);
        const float L = pass && t < TC_QROWS ? Ls[t] : 0.0f;
        for (int j0 = 0; j0 < jend; j0 += TC_COLS) {
            const int nb = tc_imin(TC_COLS, a.T - j0);
            __syncthreads();  // the previous tile is consumed
            tc_stage<D, TC_COLS>(Ks, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
            if (pass) tc_stage<D, TC_COLS>(Vs, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
            __syncthreads();
            tc_abt<D>(Qs + w * 16 * D, Ks, Ss + w * 16 * TC_COLS);  // S = Q Kᵀ
            __syncthreads();
            if (t < TC_QROWS && i < a.T) {
                float *srow = Ss + t * TC_COLS;
                if (!pass) {  // running max and sum
                    float tmax = -INFINITY;
                    for (int jj = 0; jj < nb; jj++) {
                        float s = key_visible(a, f.causal, f.key_mask, b, i, j0 + jj)
                                      ? f.scale * srow[jj] + tc_key_bias(f, b, j0 + jj, h) : -INFINITY;
                        srow[jj] = s;
                        tmax = fmaxf(tmax, s);
                    }
                    if (tmax > -INFINITY) {
                        const float mnew = fmaxf(m, tmax);
                        l *= expf(m - mnew);
                        for (int jj = 0; jj < nb; jj++)
                            if (srow[jj] > -INFINITY) l += expf(srow[jj] - mnew);
                        m = mnew;
                    }
                } else {  // normalised, dropped P in bf16
                    for (int jj = 0; jj < TC_COLS; jj++) {
                        float p = 0.0f;
                        if (jj < nb && L < INFINITY && key_visible(a, f.causal, f.key_mask, b, i, j0 + jj))
                            p = expf(f.scale * srow[jj] + tc_key_bias(f, b, j0 + jj, h) - L) * tc_keep(f, b, h, i, j0 + jj);
                        Ps[t * TC_COLS + jj] = __float2bfloat16(p);
                    }
                }
            } else if (t < TC_QROWS && pass) {
                for (int jj = 0; jj < TC_COLS; jj++) Ps[t * TC_COLS + jj] = __float2bfloat16(0.0f);
            }
            __syncthreads();
            if (pass) tc_ab_acc<D>(acc, Ps + w * 16 * TC_COLS, Vs);  // O += Pd V
        }
        if (!pass) {
            if (t < TC_QROWS) Ls[t] = l > 0.0f ? m + logf(l) : INFINITY;  // no visible key: P = 0
            __syncthreads();
        } else {
            MHE_UNROLL
            for (int c = 0; c < D / 16; c++)
                wmma::store_matrix_sync(Os + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
        }
    }
    __syncthreads();
    for (int e = t; e < TC_QROWS * D; e += blockDim.x) {
        const int r = e / D, c = e % D;
        if (q0 + r >= a.T) continue;
        const size_t at = (((size_t)b * a.T + q0 + r) * a.n + h) * D + c;
        const float o = Os[e];
        opre[at] = o;
        store_twin(out, f.outb, at, o * (f.out_scale ? f.out_scale[h * D + c] : 1.0f) + (out_shift ? out_shift[h * D + c] : 0.0f));
    }
    if (t < TC_QROWS && i < a.T) lse[((size_t)b * a.n + h) * a.T + i] = Ls[t];
}

// grid (query tiles, B): dQ over every head and key.  Shared: Q, G, K, V (bf16), S, dPd (fp32),
// dS (bf16); the dQ output reuses S and dPd.
template <int D>
__global__ void __launch_bounds__(TC_QTHREADS, 1) flash_tc_dq_kernel(TcArgs f, const float *q, const float *k,
                                                                 const float *v, const float *dout,
                                                                 const float *lse, const float *Dd, float *dq) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int b = blockIdx.y, t = threadIdx.x, w = t / 32, q0 = blockIdx.x * TC_QROWS, i = q0 + t;
    // Out (the dQ tile at a group's end, TC_QROWS x D <= 2 TC_QROWS TC_COLS) reuses S and dPd.
    float *Ss = sm, *Ps = Ss + TC_QROWS * TC_COLS, *Out = Ss;
    bf16_t *Qs = reinterpret_cast<bf16_t *>(Ps + TC_QROWS * TC_COLS), *Gs = Qs + TC_QROWS * D, *Ks = Gs + TC_QROWS * D,
           *Vs = Ks + TC_COLS * D, *dSs = Vs + TC_COLS * D;
    const int jend = f.causal ? tc_imin(a.T, q0 + TC_QROWS) : a.T;
    AccFrag acc[D / 16];
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) wmma::fill_fragment(acc[c], 0.0f);
    for (int h = 0; h < a.n; h++) {
        __syncthreads();
        tc_stage<D, TC_QROWS>(Qs, q, f.qb, a.ldq, a.qr, b, q0, h, a, nullptr);
        tc_stage<D, TC_QROWS>(Gs, dout, f.gb, a.n * D, 1, b, q0, h, a, f.out_scale ? f.out_scale + h * D : nullptr);
        const bool live = t < TC_QROWS && i < a.T;
        const float L = live ? lse[((size_t)b * a.n + h) * a.T + i] : INFINITY;
        const float Di = live ? Dd[((size_t)b * a.n + h) * a.T + i] : 0.0f;
        for (int j0 = 0; j0 < jend; j0 += TC_COLS) {
            const int nb = tc_imin(TC_COLS, a.T - j0);
            __syncthreads();
            tc_stage<D, TC_COLS>(Ks, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
            tc_stage<D, TC_COLS>(Vs, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
            __syncthreads();
            tc_abt<D>(Qs + w * 16 * D, Ks, Ss + w * 16 * TC_COLS);  // S = Q Kᵀ
            tc_abt<D>(Gs + w * 16 * D, Vs, Ps + w * 16 * TC_COLS);  // dPd = G Vᵀ
            __syncthreads();
            if (t < TC_QROWS)
                for (int jj = 0; jj < TC_COLS; jj++) {
                    float ds = 0.0f;
                    const int j = j0 + jj;
                    if (live && jj < nb && L < INFINITY && key_visible(a, f.causal, f.key_mask, b, i, j)) {
                        const float p = expf(f.scale * Ss[t * TC_COLS + jj] + tc_key_bias(f, b, j, h) - L);
                        ds = p * (Ps[t * TC_COLS + jj] * tc_keep(f, b, h, i, j) - Di);
                    }
                    dSs[t * TC_COLS + jj] = __float2bfloat16(ds);
                }
            __syncthreads();
            tc_ab_acc<D>(acc, dSs + w * 16 * TC_COLS, Ks);  // dQ += dS K
        }
        if ((h + 1) % a.qr == 0) {  // the last head sharing this Q head
            MHE_UNROLL
            for (int c = 0; c < D / 16; c++) {
                wmma::store_matrix_sync(Out + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
                wmma::fill_fragment(acc[c], 0.0f);
            }
            __syncthreads();
            for (int e = t; e < TC_QROWS * D; e += blockDim.x) {
                const int r = e / D, c = e % D;
                if ((dq || f.dqb) && q0 + r < a.T) store_twin(dq, f.dqb, ((size_t)b * a.T + q0 + r) * a.ldq + (size_t)(h / a.qr) * D + c, f.scale * Out[e]);
            }
        }
    }
}

// grid (key tiles, B): dK, dV, dkey_bias over every head and query row, transposed products
// (Sᵀ = K Qᵀ, dPdᵀ = V Gᵀ) so each warp's rows are its keys.
template <int D>
__global__ void __launch_bounds__(TC_THREADS, 1) flash_tc_dkv_kernel(TcArgs f, const float *q, const float *k,
                                                                  const float *v, const float *dout,
                                                                  const float *lse, const float *Dd, float *dk,
                                                                  float *dv, float *dkey_bias) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int b = blockIdx.y, t = threadIdx.x, w = t / 32, j0 = blockIdx.x * TC_ROWS, j = j0 + t;
    float *Ss = sm, *Ps = Ss + TC_ROWS * TC_COLS, *Out = Ps + TC_ROWS * TC_COLS, *Ls = Out + TC_ROWS * D,
          *Ds = Ls + TC_COLS;
    bf16_t *Ks = reinterpret_cast<bf16_t *>(Ds + TC_COLS), *Vs = Ks + TC_ROWS * D, *Qs = Vs + TC_ROWS * D,
           *Gs = Qs + TC_COLS * D, *PdT = Gs + TC_COLS * D, *dST = PdT + TC_ROWS * TC_COLS;
    const bool live = t < TC_ROWS && j < a.T;
    const int i_first = f.causal ? j0 : 0;  // 32-row query tiles start at every 64-row key tile
    AccFrag dka[D / 16], dva[D / 16];
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) {
        wmma::fill_fragment(dka[c], 0.0f);
        wmma::fill_fragment(dva[c], 0.0f);
    }
    for (int h = 0; h < a.n; h++) {
        __syncthreads();
        tc_stage<D, TC_ROWS>(Ks, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
        tc_stage<D, TC_ROWS>(Vs, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
        const float kb = live ? tc_key_bias(f, b, j, h) : 0.0f;
        float dkb = 0.0f;
        for (int i0 = i_first; i0 < a.T; i0 += TC_COLS) {
            const int nq = tc_imin(TC_COLS, a.T - i0);
            __syncthreads();
            tc_stage<D, TC_COLS>(Qs, q, f.qb, a.ldq, a.qr, b, i0, h, a, nullptr);
            tc_stage<D, TC_COLS>(Gs, dout, f.gb, a.n * D, 1, b, i0, h, a, f.out_scale ? f.out_scale + h * D : nullptr);
            if (t < TC_COLS) {
                Ls[t] = t < nq ? lse[((size_t)b * a.n + h) * a.T + i0 + t] : INFINITY;
                Ds[t] = t < nq ? Dd[((size_t)b * a.n + h) * a.T + i0 + t] : 0.0f;
            }
            __syncthreads();
            tc_abt<D>(Ks + w * 16 * D, Qs, Ss + w * 16 * TC_COLS);  // Sᵀ = K Qᵀ
            tc_abt<D>(Vs + w * 16 * D, Gs, Ps + w * 16 * TC_COLS);  // dPdᵀ = V Gᵀ
            __syncthreads();
            if (t < TC_ROWS)
                for (int ii = 0; ii < TC_COLS; ii++) {
                    float pd = 0.0f, ds = 0.0f;
                    const int i = i0 + ii;
                    if (live && Ls[ii] < INFINITY && key_visible(a, f.causal, f.key_mask, b, i, j)) {
                        const float p = expf(f.scale * Ss[t * TC_COLS + ii] + kb - Ls[ii]), keep = tc_keep(f, b, h, i, j);
                        pd = p * keep;
                        ds = p * (Ps[t * TC_COLS + ii] * keep - Ds[ii]);
                    }
                    PdT[t * TC_COLS + ii] = __float2bfloat16(pd);
                    dST[t * TC_COLS + ii] = __float2bfloat16(ds);
                    dkb += ds;
                }
            __syncthreads();
            tc_ab_acc<D>(dva, PdT + w * 16 * TC_COLS, Gs);  // dV += Pdᵀ G
            tc_ab_acc<D>(dka, dST + w * 16 * TC_COLS, Qs);  // dK += dSᵀ Q
        }
        if (live && dkey_bias) dkey_bias[((size_t)b * a.T + j) * a.n + h] = dkb;
        for (int which = 0; which < 2; which++) {
            const int ratio = which ? a.vr : a.kr;
            float *dst = which ? dv : dk;
            bf16_t *dstb = which ? f.dvb : f.dkb;
            if ((h + 1) % ratio != 0) continue;  // uniform over the block
            AccFrag *acc = which ? dva : dka;
            __syncthreads();  // Out is free
            MHE_UNROLL
            for (int c = 0; c < D / 16; c++) {
                wmma::store_matrix_sync(Out + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
                wmma::fill_fragment(acc[c], 0.0f);
            }
            __syncthreads();
            const int ld = which ? a.ldv : a.ldk;
            const float sc = which ? 1.0f : f.scale;
            for (int e = t; e < TC_ROWS * D; e += blockDim.x) {
                const int r = e / D, c = e % D;
                if ((dst || dstb) && j0 + r < a.T) store_twin(dst, dstb, ((size_t)b * a.T + j0 + r) * ld + (size_t)(h / ratio) * D + c, sc * Out[e]);
            }
        }
    }
}

// ---- host side ----

static size_t tc_smem_fwd(int d) { return 4 * (TC_QROWS * TC_COLS + TC_QROWS * d + TC_QROWS) + 2 * (TC_QROWS * d + 2 * TC_COLS * d + TC_QROWS * TC_COLS); }
static size_t tc_smem_dq(int d) { return 4 * (2 * TC_QROWS * TC_COLS) + 2 * (2 * TC_QROWS * d + 2 * TC_COLS * d + TC_QROWS * TC_COLS); }
// Tiles past 48 KB of shared memory (d = 64: forward 80 KB, dQ 80 KB, dK/dV 64 KB) need the
// kernel opted in first (sm_80 allows 163 KB per block, sm_90 227 KB).
template <typename K> static void tc_opt_in(K *kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
static size_t tc_smem_dkv(int d) { return 4 * (2 * TC_ROWS * TC_COLS + TC_ROWS * d + 2 * TC_COLS) + 2 * (2 * TC_ROWS * d + 2 * TC_COLS * d + 2 * TC_ROWS * TC_COLS); }

int cuda_flash_tc_supported(Backend *be, const AttnShape *s) {
    const int d = s->qk_dim;
    return cuda_ctx(be)->bf16 && d == s->v_dim && (d == 16 || d == 32 || d == 64);
}

static TcArgs tc_args(const AttnShape *s) {
    TcArgs f{};
    f.a = attn_idx(s);
    f.scale = s->scale;
    f.causal = s->causal;
    f.key_mask = s->key_mask;
    f.key_bias = s->key_bias;
    f.out_scale = s->out_scale;
    f.drop = s->dropout > 0.0f ? s->dropout : 0.0f;
    f.inv_keep = f.drop > 0.0f ? 1.0f / (1.0f - f.drop) : 1.0f;
    f.key = ops_dropout_key(s->seed, s->offset);
    f.threshold = ops_dropout_threshold(f.drop);
    return f;
}

// The bf16 twins of Q, K, V (and G = dout without out_scale) for the tile loads; made current by
// cuda_mirror_operand (usually already: the projections' bias_add / head_expand store them).
static const bf16_t *tc_input_twin(Backend *be, const AttnShape *s, const float *p, int heads, int dim, int ld) {
    const size_t rows = (size_t)s->B * s->T;
    return cuda_mirror_operand(be, p, (rows - 1) * ld + (size_t)heads * dim);
}
// Before any output twin is taken: a lookup may merge (and free) overlapping twins, so the
// second round re-reads pointers the first one may have invalidated (it creates nothing).
static void tc_twins(Backend *be, const AttnShape *s, TcArgs &f, const float *q, const float *k, const float *v,
                     const float *dout) {
    for (int round = 0; round < 2; round++) {
        f.qb = tc_input_twin(be, s, q, s->q_heads, s->qk_dim, s->ldq);
        f.kb = tc_input_twin(be, s, k, s->k_heads, s->qk_dim, s->ldk);
        f.vb = tc_input_twin(be, s, v, s->v_heads, s->v_dim, s->ldv);
        if (dout && !s->out_scale) f.gb = tc_input_twin(be, s, dout, s->n_heads, s->v_dim, s->n_heads * s->v_dim);
    }
}
// Bytes per element read for an input: 2 from a twin, 4 from fp32.
static double tc_el(const bf16_t *twin) { return twin ? 2.0 : 4.0; }

// Cost model: tensor-core FLOPs of the products (the forward computes Q Kᵀ in both passes),
// CUDA-core FLOPs of the elementwise softmax/dS work, operand tiles re-read from global
// memory by every block of a sequence (no L2 reuse assumed).
void cuda_flash_tc_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                           const float *v, float *out, float *saved) {
    TcArgs f = tc_args(s);
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    const int d = s->qk_dim;
    const double tt = (double)s->B * s->n_heads * s->T * s->T, tiles = (s->T + TC_QROWS - 1) / TC_QROWS;
    tc_twins(be, s, f, q, k, v, nullptr);
    // O is usually only the output projection's operand: lean (cuda_mirror.cu) skips its fp32 store.
    float *outw;
    f.outb = cuda_mirror_out_lean(be, out, rows_n * d, &outw, LEAN_ATTENTION);
    // Q once, K twice (both passes) and V once per query tile, Opre and out written, L.
    const double bytes = rows_n * d * tc_el(f.qb) + tiles * rows_n * d * (2.0 * tc_el(f.kb) + tc_el(f.vb)) +
                         4.0 * (2.0 * rows_n * d + rows_n);
    const MheCost cost = with_lean_twin(MheCost{tt * 6.0 * d, tt * 16.0, bytes, 0, 0}, f.outb, outw, (double)rows_n * d);
    dim3 grid((unsigned)tiles, (unsigned)s->n_heads, (unsigned)s->B);
    float *lse = saved, *opre = saved + rows_n;
    cudaStream_t st = cuda_stream(be);
    if (d == 16) {
        tc_opt_in(flash_tc_forward_kernel<16>, tc_smem_fwd(16));
        MHE_LAUNCH(flash_tc_forward_kernel<16>, grid, TC_QTHREADS, tc_smem_fwd(16), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    } else if (d == 32) {
        tc_opt_in(flash_tc_forward_kernel<32>, tc_smem_fwd(32));
        MHE_LAUNCH(flash_tc_forward_kernel<32>, grid, TC_QTHREADS, tc_smem_fwd(32), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    } else {
        tc_opt_in(flash_tc_forward_kernel<64>, tc_smem_fwd(64));
        MHE_LAUNCH(flash_tc_forward_kernel<64>, grid, TC_QTHREADS, tc_smem_fwd(64), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    }
    CUDA_CHECK_LAUNCH();
}

void cuda_flash_tc_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                            const float *v, const float *saved, const float *dout, const float *D,
                            float *dq, float *dk, float *dv, float *dkey_bias) {
    TcArgs f = tc_args(s);
    tc_twins(be, s, f, q, k, v, dout);
    const size_t rows = (size_t)s->B * s->T;
    // dQ, dK, dV are usually only the projections' backward operands: lean skips their fp32 store
    // (the kernels are given nullptr for it and store the twin).
    float *dqw = dq, *dkw = dk, *dvw = dv;
    f.dqb = dq ? cuda_mirror_out2d_lean(be, dq, rows, (size_t)s->q_heads * s->qk_dim, s->ldq, &dqw, LEAN_ATTENTION) : nullptr;
    f.dkb = dk ? cuda_mirror_out2d_lean(be, dk, rows, (size_t)s->k_heads * s->qk_dim, s->ldk, &dkw, LEAN_ATTENTION) : nullptr;
    f.dvb = dv ? cuda_mirror_out2d_lean(be, dv, rows, (size_t)s->v_heads * s->v_dim, s->ldv, &dvw, LEAN_ATTENTION) : nullptr;
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    const int d = s->qk_dim;
    const double tt = (double)s->B * s->n_heads * s->T * s->T, tiles = (s->T + TC_ROWS - 1) / TC_ROWS;
    const float *lse = saved;
    const double eq = tc_el(f.qb), ek = tc_el(f.kb), ev = tc_el(f.vb), eg = tc_el(f.gb);
    dim3 grid((unsigned)tiles, (unsigned)s->B);
    cudaStream_t st = cuda_stream(be);
    if (dk || dv || dkey_bias) {
        // Q, G, L, D per key tile; K, V once; dK, dV written (4 B each, less when lean).
        const double written = 4.0 * rows * d * ((dk ? s->k_heads : 0) + (dv ? s->v_heads : 0));
        MheCost cost{tt * 8.0 * d, tt * 12.0, tiles * rows_n * ((eq + eg) * d + 8.0) + rows_n * d * (ek + ev) + written, 0, 0};
        if (dk) cost = with_lean_twin(cost, f.dkb, dkw, (double)rows * s->k_heads * d);
        if (dv) cost = with_lean_twin(cost, f.dvb, dvw, (double)rows * s->v_heads * d);
        if (d == 16) {
            tc_opt_in(flash_tc_dkv_kernel<16>, tc_smem_dkv(16));
            MHE_LAUNCH(flash_tc_dkv_kernel<16>, grid, TC_THREADS, tc_smem_dkv(16), st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias);
        } else if (d == 32) {
            tc_opt_in(flash_tc_dkv_kernel<32>, tc_smem_dkv(32));
            MHE_LAUNCH(flash_tc_dkv_kernel<32>, grid, TC_THREADS, tc_smem_dkv(32), st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias);
        } else {
            tc_opt_in(flash_tc_dkv_kernel<64>, tc_smem_dkv(64));
            MHE_LAUNCH(flash_tc_dkv_kernel<64>, grid, TC_THREADS, tc_smem_dkv(64), st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias);
        }
        CUDA_CHECK_LAUNCH();
    }
    if (dq) {
        const double qtiles = (s->T + TC_QROWS - 1) / TC_QROWS;
        // K, V per query tile; Q, G once; dQ written; L, D.
        const double bytes = qtiles * rows_n * d * (ek + ev) + rows_n * d * (eq + eg + 4.0) + 8.0 * rows_n;
        const MheCost cost = with_lean_twin(MheCost{tt * 6.0 * d, tt * 10.0, bytes, 0, 0}, f.dqb, dqw, (double)rows * s->q_heads * d);
        dim3 qgrid((unsigned)qtiles, (unsigned)s->B);
        if (d == 16) {
            tc_opt_in(flash_tc_dq_kernel<16>, tc_smem_dq(16));
            MHE_LAUNCH(flash_tc_dq_kernel<16>, qgrid, TC_QTHREADS, tc_smem_dq(16), st, cost)(f, q, k, v, dout, lse, D, dqw);
        } else if (d == 32) {
            tc_opt_in(flash_tc_dq_kernel<32>, tc_smem_dq(32));
            MHE_LAUNCH(flash_tc_dq_kernel<32>, qgrid, TC_QTHREADS, tc_smem_dq(32), st, cost)(f, q, k, v, dout, lse, D, dqw);
        } else {
            tc_opt_in(flash_tc_dq_kernel<64>, tc_smem_dq(64));
            MHE_LAUNCH(flash_tc_dq_kernel<64>, qgrid, TC_QTHREADS, tc_smem_dq(64), st, cost)(f, q, k, v, dout, lse, D, dqw);
        }
        CUDA_CHECK_LAUNCH();
    }
}
