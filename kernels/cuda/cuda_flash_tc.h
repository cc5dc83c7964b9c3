// defines: what the tensor-core flash kernels share (argument block, tile staging, warp products).
// What the tensor-core flash kernels share (cuda_flash_tc.cu: forward; cuda_flash_tc_bwd.cu:
// dQ and dK/dV): the argument block, tile staging, the two warp-level products and the host's
// argument / input / opt-in helpers.  Each warp owns 16 rows of its block's side and multiplies
// them against TC_COLS-row tiles of the other side staged in shared memory as bf16.
#ifndef MHE_KERNELS_CUDA_CUDA_FLASH_TC_H
#define MHE_KERNELS_CUDA_CUDA_FLASH_TC_H

#include <cmath>

#include "kernels/cuda/cuda_attn_idx.h"

using namespace nvcuda;

// Rows of the block's own side (16 per warp).  Larger blocks re-read the other side's tiles
// less often (no L2 reuse assumed); the limits are registers (the dK/dV kernel keeps 2 D/16
// accumulator fragments per warp: ~200 registers at d = 64, so at most 256 threads) and shared
// memory (<= 163 KB, sm_80's opt-in maximum).
#define TC_FWD_ROWS 256  // forward: 16 warps
#define TC_DQ_ROWS 256   // dQ: 16 warps
#define TC_DKV_ROWS 128  // dK/dV: 8 warps (64, 4 warps, on small grids: cuda_flash_tc_bwd.cu)
#define TC_COLS 32       // rows of the other side per staged tile

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
    // bf16 outputs (the activations), same layout; nullptr: none.
    bf16_t *outb, *dqb, *dkb, *dvb;
    // bf16 inputs, same layout: tiles are staged from them; nullptr: staged from fp32 (rounded on
    // the way).  G's is dout without out_scale, with it bf16(bf16(dout) * out_scale) as the
    // backward's row dots stored it.
    const bf16_t *qb, *kb, *vb, *gb;
    // AttnShape.q_scale (mhe_mul's per-head query scale; nullptr: none): Q tiles are staged from
    // q's head h / q_ratio (row stride q_ld) times q_scale[h], and a.qr = 1, a.ldq = n d describe
    // dQ's per-head layout instead of q's.
    const float *q_scale;
    int q_ld, q_ratio;
};

__device__ __forceinline__ int tc_imin(int x, int y) { return x < y ? x : y; }
__device__ __forceinline__ float tc_keep(const TcArgs &f, int b, int h, int i, int j) {
    if (f.drop <= 0.0f) return 1.0f;
    return ops_dropout_keep_fast(f.key, p_index(f.a, b, h, i, j), f.threshold) ? f.inv_keep : 0.0f;
}
__device__ __forceinline__ float tc_key_bias(const TcArgs &f, int b, int j, int h) {
    return f.key_bias ? f.key_bias[((size_t)b * f.a.T + j) * f.a.n + h] : 0.0f;
}

// The element-wise work of a warp's 16 x TC_COLS tile is split between lane pairs: lane l
// takes row l / 2 (of the warp's 16) and the half (l & 1) of the columns, so it needs no
// block-wide barrier (row sums combine with the partner lane, l ^ 1).
__device__ __forceinline__ int tc_lane_row() { return (threadIdx.x & 31) >> 1; }
__device__ __forceinline__ int tc_lane_col0() { return (threadIdx.x & 1) * (TC_COLS / 2); }

// rows x D of a [B, T, heads, D] operand (row r = t0 + r of sequence b, head h/ratio) into
// shared bf16, rows past T as zeros; `mul` (per column, may be NULL) scales on the way.
// With srcb (bf16, same layout) the tile is copied from it instead.
template <int D>
__device__ __forceinline__ void tc_stage(bf16_t *dst, int rows, const float *src, const bf16_t *srcb, int ld,
                                         int ratio, int b, int t0, int h, const AttnIdx &a, const float *mul) {
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
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

// Query head h's rows x D tile of Q.  With q_scale the tile is bf16(bf16(q) · q_scale[h]) (from
// q's bf16 values when there are): what head_expand would store from a bf16 q.
template <int D>
__device__ __forceinline__ void tc_stage_q(bf16_t *dst, int rows, const float *q, const TcArgs &f, int b, int t0,
                                           int h) {
    if (!f.q_scale) {
        tc_stage<D>(dst, rows, q, f.qb, f.a.ldq, f.a.qr, b, t0, h, f.a, nullptr);
        return;
    }
    const float *mul = f.q_scale + (size_t)h * D;
    for (int e = threadIdx.x; e < rows * D; e += blockDim.x) {
        const int r = e / D, c = e % D, t = t0 + r;
        const size_t at = ((size_t)b * f.a.T + t) * f.q_ld + (size_t)(h / f.q_ratio) * D + c;
        float x = 0.0f;
        if (t < f.a.T) x = (f.qb ? __bfloat162float(f.qb[at]) : q[at]) * mul[c];
        dst[e] = __float2bfloat16(x);
    }
}

// C (16 x 32, fp32 in shared, ld TC_COLS) = A (16 x D rows of `a`, ld D) times Bᵀ, B being
// 32 x D rows of `bm` (ld D): one warp.  The caller __syncwarp()s before other lanes read C.
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

// ---- host side ----

// Tiles past 48 KB of shared memory need the kernel opted in first (sm_80 allows 163 KB per
// block, sm_90 227 KB; the kernels stay within sm_80's).
template <typename K> static inline void tc_opt_in(K *kernel, size_t bytes) {
    if (bytes > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

static inline TcArgs tc_args(const AttnShape *s) {
    TcArgs f{};
    attn_args_common(f, s);
    if (s->q_scale) {
        f.q_scale = s->q_scale;
        f.q_ld = s->ldq;
        f.q_ratio = s->n_heads / s->q_heads;
        f.a.qr = 1;
        f.a.ldq = s->n_heads * s->qk_dim;
    }
    return f;
}
// Query heads as dQ sees them: every head with q_scale (per-head gradients), else q's.
static inline int tc_dq_heads(const AttnShape *s) { return s->q_scale ? s->n_heads : s->q_heads; }

// With bf16 activations (cuda_act_stage.cu) the attention core's float * arguments carry bf16 elements
// on the tensor-core path (ops.h's Act, passed through the fp32-typed entry points): these name
// them as what they hold.
static inline const bf16_t *tc_act(const float *p) { return reinterpret_cast<const bf16_t *>(p); }
static inline bf16_t *tc_act(float *p) { return reinterpret_cast<bf16_t *>(p); }
// The bf16 activations Q, K, V (and G = dout without out_scale) the tiles are staged from.
static inline void tc_inputs(const AttnShape *s, TcArgs &f, const float *q, const float *k, const float *v,
                             const float *dout) {
    f.qb = tc_act(q);
    f.kb = tc_act(k);
    f.vb = tc_act(v);
    if (dout && !s->out_scale) f.gb = tc_act(dout);
}
// Bytes per element read for an input: 2 from bf16, 4 from fp32.
static inline double tc_el(const bf16_t *bf) { return bf ? 2.0 : 4.0; }

#endif
