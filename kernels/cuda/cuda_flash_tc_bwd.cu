// defines: the flash attention backward on tensor cores (bf16 mode): dQ, dK/dV and the dK/dV reduce.
// The tensor-core flash backward (bf16 mode; see cuda_flash_tc.cu for the forward and
// cuda_flash_tc.h for the shared pieces): P is recomputed from the saved L, kernels without
// float atomics, so results are deterministic (bit for bit from run to run).
//   flash_tc_dq_kernel   one block per (256-query tile, Q head, sequence): dQ accumulated over
//                        the heads sharing that Q head and over the keys.
//   flash_tc_dkv_kernel  one block per (128- or 64-key tile, part of a group of heads, sequence):
//                        dK, dV and dkey_bias accumulated over the queries and the heads sharing
//                        a K or V head (a group: lcm(heads per K head, heads per V head) heads),
//                        with transposed products (Sᵀ = K Qᵀ, dPdᵀ = V Gᵀ) so a warp's rows are
//                        keys.
// Blocks own groups of heads rather than every head, so the K (V) tile of a block is staged once
// per K (V) head, not once per head.  When that leaves the grid small (MQA, MHE: one group of all
// n heads, so B x key tiles blocks), a group is split into parts of `sub` heads, one block each:
// the blocks write fp32 partial dK/dV for their heads into scratch and flash_tc_dkv_reduce_kernel
// adds the parts in a fixed order (dkey_bias needs no partials: each head is in one part).
#include "kernels/cuda/cuda_flash_tc.h"

#define TC_DQ_THREADS (TC_DQ_ROWS * 2)

// grid (query tiles, Q heads, B).  Shared: S, dPd (fp32), Q, G, K, V, dS (bf16); the dQ tile
// at the end reuses S and dPd.
template <int D>
__global__ void __launch_bounds__(TC_DQ_THREADS, 1) flash_tc_dq_kernel(TcArgs f, const float *q, const float *k,
                                                                    const float *v, const float *dout,
                                                                    const float *lse, const float *Dd, float *dq) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int hq = blockIdx.y, b = blockIdx.z, t = threadIdx.x, w = t / 32, q0 = blockIdx.x * TC_DQ_ROWS;
    // Out (the dQ tile, TC_DQ_ROWS x D <= 2 TC_DQ_ROWS TC_COLS) reuses S and dPd.
    float *Ss = sm, *Ps = Ss + TC_DQ_ROWS * TC_COLS, *Out = Ss;
    bf16_t *Qs = reinterpret_cast<bf16_t *>(Ps + TC_DQ_ROWS * TC_COLS), *Gs = Qs + TC_DQ_ROWS * D,
           *Ks = Gs + TC_DQ_ROWS * D, *Vs = Ks + TC_COLS * D, *dSs = Vs + TC_COLS * D;
    const int r = w * 16 + tc_lane_row(), c0 = tc_lane_col0(), i = q0 + r;
    const bool live = i < a.T;
    const int jend = f.causal ? tc_imin(a.T, q0 + TC_DQ_ROWS) : a.T;
    const float *srow = Ss + r * TC_COLS, *prow = Ps + r * TC_COLS;
    bf16_t *dsrow = dSs + r * TC_COLS;
    tc_stage_q<D>(Qs, TC_DQ_ROWS, q, f, b, q0, hq * a.qr);  // one Q head for the block
    AccFrag acc[D / 16];
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) wmma::fill_fragment(acc[c], 0.0f);
    for (int h = hq * a.qr; h < (hq + 1) * a.qr; h++) {
        __syncthreads();  // the previous head's G is consumed
        tc_stage<D>(Gs, TC_DQ_ROWS, dout, f.gb, a.n * D, 1, b, q0, h, a, f.out_scale ? f.out_scale + h * D : nullptr);
        const float L = live ? lse[((size_t)b * a.n + h) * a.T + i] : INFINITY;
        const float Di = live ? Dd[((size_t)b * a.n + h) * a.T + i] : 0.0f;
        for (int j0 = 0; j0 < jend; j0 += TC_COLS) {
            const int nb = tc_imin(TC_COLS, a.T - j0);
            __syncthreads();
            tc_stage<D>(Ks, TC_COLS, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
            tc_stage<D>(Vs, TC_COLS, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
            __syncthreads();
            tc_abt<D>(Qs + w * 16 * D, Ks, Ss + w * 16 * TC_COLS);  // S = Q Kᵀ
            tc_abt<D>(Gs + w * 16 * D, Vs, Ps + w * 16 * TC_COLS);  // dPd = G Vᵀ
            __syncwarp();
            for (int jj = c0; jj < c0 + TC_COLS / 2; jj++) {
                float ds = 0.0f;
                const int j = j0 + jj;
                if (live && jj < nb && L < INFINITY && key_visible(a, f.causal, f.key_mask, b, i, j)) {
                    const float p = expf(f.scale * srow[jj] + tc_key_bias(f, b, j, h) - L);
                    ds = p * (prow[jj] * tc_keep(f, b, h, i, j) - Di);
                }
                dsrow[jj] = __float2bfloat16(ds);
            }
            __syncwarp();
            tc_ab_acc<D>(acc, dSs + w * 16 * TC_COLS, Ks);  // dQ += dS K
        }
    }
    __syncthreads();  // S and dPd are free for Out
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) wmma::store_matrix_sync(Out + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
    __syncthreads();
    for (int e = t; e < TC_DQ_ROWS * D; e += blockDim.x) {
        const int rr = e / D, c = e % D;
        if ((dq || f.dqb) && q0 + rr < a.T) store_dual(dq, f.dqb, ((size_t)b * a.T + q0 + rr) * a.ldq + (size_t)hq * D + c, f.scale * Out[e]);
    }
}

// How the dK/dV blocks divide the heads: groups of `group` heads, each split into `parts`
// parts of `sub` heads (the last may have fewer); parts == 1: no split, the blocks store dK/dV.
// With parts > 1 they store the sums over their heads, unscaled, into pk / pv (nullptr: that
// gradient is not wanted): [parts][B*T][k_heads*D] and [parts][B*T][v_heads*D], slot p of a K
// (V) head written by part p of its group when that part holds some of the head's heads.
struct DkvSplit {
    int group, sub, parts;
    float *pk, *pv;
};

// The end of a K (which = 0) or V (1) head's heads in a dK/dV block (or of the block's part):
// its accumulator, through shared memory (Out), into dK / dV (fp32 and/or bf16; scaled by the
// score scale for dK), or, split, into this part's partial (unscaled), then cleared.
template <int D>
__device__ __forceinline__ void tc_dkv_flush(const TcArgs &f, const DkvSplit &sp, AccFrag *acc, int which, float *Out,
                                             int h, int b, int j0, int part, float *dst) {
    const AttnIdx &a = f.a;
    const int rows = blockDim.x / 2, w = threadIdx.x / 32, ratio = which ? a.vr : a.kr;
    __syncthreads();  // Out (S, dPd) is free
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) {
        wmma::store_matrix_sync(Out + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
        wmma::fill_fragment(acc[c], 0.0f);
    }
    __syncthreads();
    if (sp.parts > 1) {
        float *pdst = which ? sp.pv : sp.pk;
        const int cols = a.n / ratio * D;
        for (int e = threadIdx.x; pdst && e < rows * D; e += blockDim.x) {
            const int rr = e / D, c = e % D;
            if (j0 + rr < a.T)
                pdst[((size_t)part * a.B * a.T + (size_t)b * a.T + j0 + rr) * cols + (size_t)(h / ratio) * D + c] = Out[e];
        }
        return;
    }
    bf16_t *dstb = which ? f.dvb : f.dkb;
    const int ld = which ? a.ldv : a.ldk;
    const float sc = which ? 1.0f : f.scale;
    for (int e = threadIdx.x; (dst || dstb) && e < rows * D; e += blockDim.x) {
        const int rr = e / D, c = e % D;
        if (j0 + rr < a.T) store_dual(dst, dstb, ((size_t)b * a.T + j0 + rr) * ld + (size_t)(h / ratio) * D + c, sc * Out[e]);
    }
}

// grid (key tiles, groups x parts, B), 2 threads per key row (blockDim.x / 2 = TC_DKV_ROWS or 64
// rows per tile).  Shared: Sᵀ, dPdᵀ (fp32; the dK / dV tile at a K / V head's end reuses them),
// L, D of the query tile, K, V, Q, G, Pdᵀ, dSᵀ (bf16).
template <int D>
__global__ void __launch_bounds__(TC_DKV_ROWS * 2, 1) flash_tc_dkv_kernel(TcArgs f, const float *q, const float *k,
                                                                      const float *v, const float *dout,
                                                                      const float *lse, const float *Dd, float *dk,
                                                                      float *dv, float *dkey_bias, DkvSplit sp) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int rows = blockDim.x / 2, part = blockIdx.y % sp.parts, g = blockIdx.y / sp.parts;
    const int b = blockIdx.z, t = threadIdx.x, w = t / 32, j0 = blockIdx.x * rows;
    const int h0 = g * sp.group + part * sp.sub, h1 = tc_imin(h0 + sp.sub, (g + 1) * sp.group);
    float *Ss = sm, *Ps = Ss + rows * TC_COLS, *Out = Ss, *Ls = Ps + rows * TC_COLS, *Ds = Ls + TC_COLS;
    bf16_t *Ks = reinterpret_cast<bf16_t *>(Ds + TC_COLS), *Vs = Ks + rows * D, *Qs = Vs + rows * D,
           *Gs = Qs + TC_COLS * D, *PdT = Gs + TC_COLS * D, *dST = PdT + rows * TC_COLS;
    const int r = w * 16 + tc_lane_row(), c0 = tc_lane_col0(), j = j0 + r;
    const bool live = j < a.T;
    const int i_first = f.causal ? j0 : 0;  // 32-row query tiles start at every key tile
    const float *srow = Ss + r * TC_COLS, *prow = Ps + r * TC_COLS;
    bf16_t *pdrow = PdT + r * TC_COLS, *dsrow = dST + r * TC_COLS;
    AccFrag dka[D / 16], dva[D / 16];
    MHE_UNROLL
    for (int c = 0; c < D / 16; c++) {
        wmma::fill_fragment(dka[c], 0.0f);
        wmma::fill_fragment(dva[c], 0.0f);
    }
    for (int h = h0; h < h1; h++) {
        __syncthreads();  // the previous head's tiles (and Out) are consumed
        // A part may start inside a K (V) head's run of heads.
        if (h == h0 || h % a.kr == 0) tc_stage<D>(Ks, rows, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
        if (h == h0 || h % a.vr == 0) tc_stage<D>(Vs, rows, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
        const float kb = live ? tc_key_bias(f, b, j, h) : 0.0f;
        float dkb = 0.0f;
        for (int i0 = i_first; i0 < a.T; i0 += TC_COLS) {
            const int nq = tc_imin(TC_COLS, a.T - i0);
            __syncthreads();
            tc_stage_q<D>(Qs, TC_COLS, q, f, b, i0, h);
            tc_stage<D>(Gs, TC_COLS, dout, f.gb, a.n * D, 1, b, i0, h, a, f.out_scale ? f.out_scale + h * D : nullptr);
            if (t < TC_COLS) {
                Ls[t] = t < nq ? lse[((size_t)b * a.n + h) * a.T + i0 + t] : INFINITY;
                Ds[t] = t < nq ? Dd[((size_t)b * a.n + h) * a.T + i0 + t] : 0.0f;
            }
            __syncthreads();
            tc_abt<D>(Ks + w * 16 * D, Qs, Ss + w * 16 * TC_COLS);  // Sᵀ = K Qᵀ
            tc_abt<D>(Vs + w * 16 * D, Gs, Ps + w * 16 * TC_COLS);  // dPdᵀ = V Gᵀ
            __syncwarp();
            for (int ii = c0; ii < c0 + TC_COLS / 2; ii++) {
                float pd = 0.0f, ds = 0.0f;
                const int i = i0 + ii;
                if (live && Ls[ii] < INFINITY && key_visible(a, f.causal, f.key_mask, b, i, j)) {
                    const float p = expf(f.scale * srow[ii] + kb - Ls[ii]), keep = tc_keep(f, b, h, i, j);
                    pd = p * keep;
                    ds = p * (prow[ii] * keep - Ds[ii]);
                }
                pdrow[ii] = __float2bfloat16(pd);
                dsrow[ii] = __float2bfloat16(ds);
                dkb += ds;
            }
            __syncwarp();
            tc_ab_acc<D>(dva, PdT + w * 16 * TC_COLS, Gs);  // dV += Pdᵀ G
            tc_ab_acc<D>(dka, dST + w * 16 * TC_COLS, Qs);  // dK += dSᵀ Q
        }
        dkb += __shfl_xor_sync(0xffffffffu, dkb, 1);
        if (live && (t & 1) == 0 && dkey_bias) dkey_bias[((size_t)b * a.T + j) * a.n + h] = dkb;
        // A K (V) head's accumulator is complete at the end of its heads or of the part (uniform
        // over the block).  Two calls, not a loop over a pointer to either set: the fragments
        // must stay in registers.
        if ((h + 1) % a.kr == 0 || h + 1 == h1) tc_dkv_flush<D>(f, sp, dka, 0, Out, h, b, j0, part, dk);
        if ((h + 1) % a.vr == 0 || h + 1 == h1) tc_dkv_flush<D>(f, sp, dva, 1, Out, h, b, j0, part, dv);
    }
}

// dK / dV (fp32 and/or bf16) from the parts' partials: one thread per 4 columns of a row, adding
// the slots of the parts holding the head's heads in part order (deterministic), times the
// score scale for dK.  Columns: the K heads' k_heads x d, then the V heads' (when wanted).
__global__ void flash_tc_dkv_reduce_kernel(TcArgs f, DkvSplit sp, int d, float *dk, float *dv) {
    const AttnIdx &a = f.a;
    const size_t rows = (size_t)a.B * a.T;
    const int kc = sp.pk ? a.n / a.kr * d : 0, vc = sp.pv ? a.n / a.vr * d : 0, width = kc + vc;
    const size_t quads = rows * width / 4;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < quads; e += (size_t)gridDim.x * blockDim.x) {
        const size_t row = e * 4 / width;
        int col = (int)(e * 4 % width);
        const int which = col >= kc;
        if (which) col -= kc;
        const int cols = which ? vc : kc, ratio = which ? a.vr : a.kr, hh = col / d;
        const float *part = which ? sp.pv : sp.pk;
        // The head's heads, [hh ratio, (hh + 1) ratio), lie in parts p_lo..p_hi of their group.
        const int first = hh * ratio % sp.group, p_lo = first / sp.sub, p_hi = (first + ratio - 1) / sp.sub;
        float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int p = p_lo; p <= p_hi; p++) {
            const float4 x = *reinterpret_cast<const float4 *>(part + ((size_t)p * rows + row) * cols + col);
            sum.x += x.x;
            sum.y += x.y;
            sum.z += x.z;
            sum.w += x.w;
        }
        const float sc = which ? 1.0f : f.scale;
        float *dst = which ? dv : dk;
        bf16_t *dstb = which ? f.dvb : f.dkb;
        const size_t at = row * (which ? a.ldv : a.ldk) + col;
        store_dual(dst, dstb, at, sc * sum.x);
        store_dual(dst, dstb, at + 1, sc * sum.y);
        store_dual(dst, dstb, at + 2, sc * sum.z);
        store_dual(dst, dstb, at + 3, sc * sum.w);
    }
}

// ---- host side ----

// S, dPd (fp32), Q, G, K, V, dS (bf16): 152 KB at d = 64.
static size_t tc_smem_dq(int d) {
    return 4 * (2 * TC_DQ_ROWS * TC_COLS) + 2 * (2 * TC_DQ_ROWS * d + 2 * TC_COLS * d + TC_DQ_ROWS * TC_COLS);
}
// Sᵀ, dPdᵀ, L, D (fp32), K, V, Q, G, Pdᵀ, dSᵀ (bf16): 88 KB at d = 64 and 128 rows.
static size_t tc_smem_dkv(int d, int rows) {
    return 4 * (2 * rows * TC_COLS + 2 * TC_COLS) + 2 * (2 * rows * d + 2 * TC_COLS * d + 2 * rows * TC_COLS);
}
// A dK/dV grid of 128-row tiles with at most this many blocks takes 64-row tiles: half of A100's
// 108 SMs (the smaller of the two targets; H100 has 132), so twice the blocks still leave SMs
// idle and take no longer each, while the Q/G re-reads they double are spread over twice the
// SMs (a grid below the SM count is priced on its share of the GPU).
#define TC_DKV_SMALL_GRID 54
// A dK/dV grid below this many blocks splits its head groups (DkvSplit) until it reaches it.
// One block per SM fits (registers), so 128 is one wave on H100 (132 SMs), 1.2 on A100 (108).
// All heads sharing K and V (MQA, MHE) make grids of B x key tiles blocks: 64 at BERT-base
// seq 512 x 16 and seq 128 x 64, split in 2.  Each part costs the partials' 4 B per element
// written and re-read, and a wave of blocks each doing 1/parts of the heads is no faster than
// fewer, longer blocks filling the GPU, so the split stops at one wave; by the cost model at
// BERT-base mhe_mul seq 512 x 16 (h100), 2 parts: 11.40 ms a step, 3: 11.41, 4 (256 blocks):
// 11.45, 6: 11.53; unsplit 11.86.  GPT-2 small mhe_mul at seq 1024 x 16 (128 blocks) is not split (2 parts: +0.14 ms).
#define TC_DKV_TARGET_BLOCKS 128
static int tc_gcd(int x, int y) { return y ? tc_gcd(y, x % y) : x; }
static int tc_cdiv(int x, int y) { return (x + y - 1) / y; }

struct DkvPlan {
    int group, groups, sub, parts, krows;
};
// heads: MHE_CUDA_DKV_HEADS (heads per block, clamped to the group; 0: chosen here).  The
// smallest number of parts that reaches TC_DKV_TARGET_BLOCKS (parts of ceil(group / parts)
// heads, so all but the last are equal); each part costs a re-staging of K and V and the
// partials' write and re-read, which is why a group is not always split into single heads.
static DkvPlan tc_dkv_plan(const AttnShape *s, int heads) {
    DkvPlan p;
    const int kr = s->n_heads / s->k_heads, vr = s->n_heads / s->v_heads;
    p.group = kr / tc_gcd(kr, vr) * vr;  // a block's heads: those sharing its K and its V head
    p.groups = s->n_heads / p.group;
    const int blocks = tc_cdiv(s->T, TC_DKV_ROWS) * p.groups * s->B;
    p.sub = p.group;
    if (heads > 0) p.sub = heads < p.group ? heads : p.group;
    else if (blocks < TC_DKV_TARGET_BLOCKS)
        for (int parts = 2; parts <= p.group; parts++) {
            p.sub = tc_cdiv(p.group, parts);
            if (blocks * tc_cdiv(p.group, p.sub) >= TC_DKV_TARGET_BLOCKS) break;
        }
    p.parts = tc_cdiv(p.group, p.sub);
    p.krows = blocks * p.parts <= TC_DKV_SMALL_GRID ? 64 : TC_DKV_ROWS;
    return p;
}
// (K or V head, part) pairs of one group: the heads of each K (V) head (`ratio` of them) lie in
// one part or straddle several; each such pair stages the K (V) tile and, split, writes a slot.
static int tc_dkv_slots(const DkvPlan &p, int ratio) {
    int n = 0;
    for (int first = 0; first < p.group; first += ratio) n += (first + ratio - 1) / p.sub - first / p.sub + 1;
    return n;
}

// Cost model: tensor-core FLOPs of the products (dQ: S, dPd, dS K = 6 d per pair; dK/dV: Sᵀ,
// dPdᵀ, Pdᵀ G, dSᵀ Q = 8 d), CUDA-core FLOPs of the element-wise dS work, operand tiles
// re-read from global memory by every block of a (sequence, head), no L2 reuse assumed;
// `blocks` = the real grid (priced on that share of the GPU when it has fewer blocks than SMs).
void cuda_flash_tc_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                            const float *v, const float *saved, const float *dout, const float *D,
                            const bf16_t *gs, float *dq, float *dk, float *dv, float *dkey_bias) {
    TcArgs f = tc_args(s);
    tc_inputs(s, f, q, k, v, dout);
    if (gs) f.gb = gs;  // with out_scale: G = bf16(bf16(dout) · out_scale), stored by the row dots
    const size_t rows = (size_t)s->B * s->T;
    // dQ, dK, dV are bf16 activations: the kernels are given nullptr for the fp32 store.
    float *dqw = nullptr, *dkw = nullptr, *dvw = nullptr;
    const int qh = tc_dq_heads(s);
    f.dqb = dq ? tc_act(dq) : nullptr;
    f.dkb = dk ? tc_act(dk) : nullptr;
    f.dvb = dv ? tc_act(dv) : nullptr;
    const size_t rows_n = rows * s->n_heads;
    const int d = s->qk_dim;
    const double bn = (double)s->B * s->n_heads;
    const TileWork qw = query_tiles(s->T, TC_DQ_ROWS, s->causal);
    const float *lse = saved;
    const double eq = tc_el(f.qb), ek = tc_el(f.kb), ev = tc_el(f.vb), eg = tc_el(f.gb);
    cudaStream_t st = cuda_stream(be);
    if (dk || dv || dkey_bias) {
        const DkvPlan pl = tc_dkv_plan(s, cuda_ctx(be)->dkv_heads);
        const int krows = pl.krows;  // key rows per block
        const int tiles = (s->T + krows - 1) / krows;
        const TileWork kw = key_tiles(s->T, krows, s->causal);
        const size_t smem = tc_smem_dkv(d, krows);
        dim3 grid((unsigned)tiles, (unsigned)(pl.groups * pl.parts), (unsigned)s->B);
        const bool want_k = dk || f.dkb, want_v = dv || f.dvb;
        const size_t kcols = (size_t)s->k_heads * d, vcols = (size_t)s->v_heads * d;
        DkvSplit sp{pl.group, pl.sub, pl.parts, nullptr, nullptr};
        if (pl.parts > 1) {
            // Partials in the backend's grow-only scratch (steady-state steps do not allocate).
            CudaCtx *c = cuda_ctx(be);
            const size_t kn = want_k ? (size_t)pl.parts * rows * kcols : 0;
            float *part = cuda_grow(be, c->flash_part, c->flash_part_cap, kn + (want_v ? (size_t)pl.parts * rows * vcols : 0));
            if (want_k) sp.pk = part;
            if (want_v) sp.pv = part + kn;
        }
        // K and V staged once per (K / V head, part) pair and key tile: without a split once per
        // K / V head.
        const double kslots = (double)pl.groups * tc_dkv_slots(pl, s->n_heads / s->k_heads);
        const double vslots = (double)pl.groups * tc_dkv_slots(pl, s->n_heads / s->v_heads);
        // Q, G, L, D per key tile and head; K and V per slot; dK, dV written (2 B each in bf16)
        // or, split, each slot's partial (4 B).
        const double written = pl.parts > 1 ? 4.0 * rows * d * ((want_k ? kslots : 0) + (want_v ? vslots : 0))
                                            : 4.0 * rows * d * ((dk ? s->k_heads : 0) + (dv ? s->v_heads : 0));
        MheCost cost{bn * kw.pairs * 8.0 * d, bn * kw.pairs * 12.0,
                     bn * kw.reads * ((eq + eg) * d + 8.0) + rows * d * (kslots * ek + vslots * ev) + written, 0,
                     (double)grid.x * grid.y * grid.z};
        if (pl.parts == 1 && dk) cost = with_act_store(cost, f.dkb, dkw, (double)rows * s->k_heads * d);
        if (pl.parts == 1 && dv) cost = with_act_store(cost, f.dvb, dvw, (double)rows * s->v_heads * d);
        if (d == 16) {
            tc_opt_in(flash_tc_dkv_kernel<16>, tc_smem_dkv(16, TC_DKV_ROWS));
            MHE_LAUNCH(flash_tc_dkv_kernel<16>, grid, 2 * krows, smem, st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias, sp);
        } else if (d == 32) {
            tc_opt_in(flash_tc_dkv_kernel<32>, tc_smem_dkv(32, TC_DKV_ROWS));
            MHE_LAUNCH(flash_tc_dkv_kernel<32>, grid, 2 * krows, smem, st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias, sp);
        } else {
            tc_opt_in(flash_tc_dkv_kernel<64>, tc_smem_dkv(64, TC_DKV_ROWS));
            MHE_LAUNCH(flash_tc_dkv_kernel<64>, grid, 2 * krows, smem, st, cost)(f, q, k, v, dout, lse, D, dkw, dvw, dkey_bias, sp);
        }
        CUDA_CHECK_LAUNCH();
        if (pl.parts > 1 && (want_k || want_v)) {
            // Every slot's partial read once (4 B), dK / dV written (2 B each in bf16), one add per slot element, the scale.
            const double kn = want_k ? (double)rows * kcols : 0, vn = want_v ? (double)rows * vcols : 0;
            const double slots = rows * d * ((want_k ? kslots : 0) + (want_v ? vslots : 0));
            const size_t quads = (size_t)rows * ((want_k ? kcols : 0) + (want_v ? vcols : 0)) / 4;
            MheCost rc = mhe_cost_blocks(slots + kn, 4.0 * slots + 4.0 * ((dk ? kn : 0) + (dv ? vn : 0)),
                                         cuda_real_blocks(quads));
            if (dk) rc = with_act_store(rc, f.dkb, dkw, kn);
            if (dv) rc = with_act_store(rc, f.dvb, dvw, vn);
            MHE_LAUNCH(flash_tc_dkv_reduce_kernel, cuda_grid_for(quads), MHE_BLOCK, 0, st, rc)(f, sp, d, dkw, dvw);
            CUDA_CHECK_LAUNCH();
        }
    }
    if (dq) {
        const int tiles = (s->T + TC_DQ_ROWS - 1) / TC_DQ_ROWS;
        dim3 grid((unsigned)tiles, (unsigned)qh, (unsigned)s->B);
        // K, V per query tile and head; Q once per dQ head (with q_scale q's head per head, and
        // the scale), G once per head; dQ written; L, D.
        const double bytes = bn * qw.reads * d * (ek + ev) + rows * d * (qh * (eq + 4.0)) + rows_n * d * eg +
                             8.0 * rows_n + (s->q_scale ? 4.0 * s->n_heads * d : 0.0);
        const MheCost cost = with_act_store(MheCost{bn * qw.pairs * 6.0 * d, bn * qw.pairs * 10.0, bytes, 0,
                                                    (double)grid.x * grid.y * grid.z},
                                            f.dqb, dqw, (double)rows * qh * d);
        if (d == 16) {
            tc_opt_in(flash_tc_dq_kernel<16>, tc_smem_dq(16));
            MHE_LAUNCH(flash_tc_dq_kernel<16>, grid, TC_DQ_THREADS, tc_smem_dq(16), st, cost)(f, q, k, v, dout, lse, D, dqw);
        } else if (d == 32) {
            tc_opt_in(flash_tc_dq_kernel<32>, tc_smem_dq(32));
            MHE_LAUNCH(flash_tc_dq_kernel<32>, grid, TC_DQ_THREADS, tc_smem_dq(32), st, cost)(f, q, k, v, dout, lse, D, dqw);
        } else {
            tc_opt_in(flash_tc_dq_kernel<64>, tc_smem_dq(64));
            MHE_LAUNCH(flash_tc_dq_kernel<64>, grid, TC_DQ_THREADS, tc_smem_dq(64), st, cost)(f, q, k, v, dout, lse, D, dqw);
        }
        CUDA_CHECK_LAUNCH();
    }
}
