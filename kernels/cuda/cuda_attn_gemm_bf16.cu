// defines: the gemm_bf16 attention core — its registry entry (attn_core_gemm_bf16) and its calls.
// Every product runs on cuBLAS's bf16 tensor cores (one batched call over all sequences and heads
// of a chunk); the softmax and dS are row kernels over fp32 scores.  The forward saves only each
// row's log-sum-exp (and O' before out_scale / out_shift, when the layer has them); the backward
// recomputes the scores with one more product, as fused kernels do, so no T x T tensor lives from
// the forward to the backward.  The T x T buffers are scratch, shared by the layers, and the
// sequences go through in chunks that keep them within kScoresBudget.
//
// It serves every feature (shared or unequal heads, key bias, any mask, dropout, out_scale /
// out_shift, any head dims) but q_scale, in bf16.  It exists for the shapes cuDNN refuses: collab's
// key bias at its D̃ = 384 query/key width, which flash's tiles do not fit either (auto fell to the
// fp32 gemm core, on CUDA cores).  Its
// dropout is the CPU backend's hash over P's flat index, so it matches the CPU with dropout on.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/cuda_attn_core.h"
#include "kernels/cuda/cuda_attn_heads.h"
#include "kernels/cuda/cuda_attn_idx.h"

// Query rows per block of the dS kernel: its key-bias gradient leaves one partial column sum per
// block, so the fp32 dS never goes to memory (a write and a read of 4 bytes per score, about a
// fifth of the backward's T x T traffic) and the partials cost 4/GB_ROWS bytes per score.
#define GB_ROWS 16

namespace {

// Bytes of T x T scratch one chunk may take (the backward's four buffers).  A sequence needing
// more is refused (auto then takes flash, which keeps no T x T tensor).
constexpr double kScoresBudget = 1024.0 * 1024.0 * 1024.0;
// MHE_GEMM_BF16_CHUNK caps the sequences per chunk (the tests' way to run batches in chunks).
int chunk_cap() {
    const char *e = std::getenv("MHE_GEMM_BF16_CHUNK");
    const int c = e ? std::atoi(e) : 0;
    return c > 0 ? c : 1 << 30;
}

size_t bf16_words(size_t elems) { return attn_words_up16((elems + 1) / 2); }
size_t tt_per_seq(const AttnShape *s) { return (size_t)s->n_heads * s->T * s->T; }
bool has_affine(const AttnShape *s) { return s->out_scale || s->out_shift; }
bool any_shared(const AttnShape *s) {
    return s->q_heads != s->n_heads || s->k_heads != s->n_heads || s->v_heads != s->n_heads;
}
int max_dim(const AttnShape *s) { return s->qk_dim > s->v_dim ? s->qk_dim : s->v_dim; }
// The backward's T x T bytes per sequence: scores and dP̃ in fp32, P and dS in bf16, the key
// bias's partial column sums.
double seq_bytes(const AttnShape *s) { return (12.0 + 4.0 / GB_ROWS) * (double)tt_per_seq(s); }
int chunk_of(const AttnShape *s) {
    int c = (int)(kScoresBudget / seq_bytes(s));
    if (c > chunk_cap()) c = chunk_cap();
    return c < 1 ? 1 : c > s->B ? s->B : c;
}

// saved: the row log-sum-exp [B, n, T] (fp32; -inf for a row with no visible key), then O'
// [B*T, n*v_dim] (bf16) when the layer has out_scale or out_shift.
struct Saved {
    float *lse;
    __nv_bfloat16 *o;
};
Saved saved_of(const AttnShape *s, const float *saved) {
    float *p = const_cast<float *>(saved);
    Saved v{p, nullptr};
    if (has_affine(s)) v.o = reinterpret_cast<__nv_bfloat16 *>(p + attn_words_up16((size_t)s->B * s->n_heads * s->T));
    return v;
}
size_t saved_words(const AttnShape *s) {
    const size_t rows = (size_t)s->B * s->T;
    return attn_words_up16((size_t)s->B * s->n_heads * s->T) + (has_affine(s) ? bf16_words(rows * s->n_heads * s->v_dim) : 0);
}

// scratch, per chunk of Bc sequences: scores S (fp32), dP̃ (fp32), the key bias's partial column
// sums of dS (fp32, one row per GB_ROWS queries), P after dropout (bf16), dS (bf16); the per-head
// gradients of shared heads before their sums (bf16); and for the whole
// batch G = dout ⊙ out_scale (bf16).
struct Scratch {
    float *S, *dP, *colsum;
    __nv_bfloat16 *P, *dS, *tmp, *g;
    size_t words;
    int chunk;  // sequences per chunk (chunk_of), what the parts above are sized for
};
int row_tiles(const AttnShape *s) { return (s->T + GB_ROWS - 1) / GB_ROWS; }
Scratch scratch_of(const AttnShape *s, float *base) {
    const int chunk = chunk_of(s);
    const size_t tt = (size_t)chunk * tt_per_seq(s), rows = (size_t)s->B * s->T;
    size_t w = 0;
    auto f32 = [&](size_t elems) {
        float *p = base + w;
        w += attn_words_up16(elems);
        return p;
    };
    auto b16 = [&](size_t elems) {
        __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(base + w);
        w += bf16_words(elems);
        return p;
    };
    Scratch x;
    x.S = f32(tt);
    x.dP = f32(tt);
    // room whether or not s has a key bias: callers may size without marking it (a 1/48 share)
    x.colsum = f32((size_t)chunk * s->n_heads * row_tiles(s) * s->T);
    x.P = b16(tt);
    x.dS = b16(tt);
    x.tmp = any_shared(s) ? b16((size_t)chunk * s->T * s->n_heads * max_dim(s)) : nullptr;
    x.g = s->out_scale ? b16(rows * s->n_heads * s->v_dim) : nullptr;
    x.words = w;
    x.chunk = chunk;
    return x;
}

const __nv_bfloat16 *bias_of(const AttnShape *s) { return reinterpret_cast<const __nv_bfloat16 *>(s->key_bias); }

}  // namespace

// ---- the row kernels: one block per (query row i, head h, sequence of the chunk) ----

// The visible score of key j (-inf when masked): the product's scaled q·k plus the key bias.
__device__ __forceinline__ float gb_score(const AttnIdx &a, const float *row, int causal, const int32_t *key_mask,
                                          const __nv_bfloat16 *key_bias, int b, int h, int i, int j) {
    if (!key_visible(a, causal, key_mask, b, i, j)) return -INFINITY;
    return row[j] + (key_bias ? __bfloat162float(key_bias[((size_t)b * a.T + j) * a.n + h]) : 0.0f);
}

// P = dropout(softmax(S + key bias, visible keys)) in bf16, and the row's log-sum-exp.
__global__ void gb_softmax_kernel(AttnIdx a, int b0, const float *S, int causal, const int32_t *key_mask,
                                  const __nv_bfloat16 *key_bias, float drop, uint64_t seed, uint64_t offset,
                                  float *lse, __nv_bfloat16 *P) {
    MHE_SHARED(float, fbuf, [32]);
    const int i = blockIdx.x, h = blockIdx.y, bl = blockIdx.z, b = b0 + bl;
    const size_t at = (((size_t)bl * a.n + h) * a.T + i) * a.T;
    const float *row = S + at;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) mx = fmaxf(mx, gb_score(a, row, causal, key_mask, key_bias, b, h, i, j));
    mx = block_max(mx, fbuf);
    float sum = 0.0f;
    if (mx != -INFINITY)
        for (int j = threadIdx.x; j < a.T; j += blockDim.x)
            sum += expf(gb_score(a, row, causal, key_mask, key_bias, b, h, i, j) - mx);
    sum = block_sum(sum, fbuf);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;  // no visible key: an all-zero row
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        const float s = gb_score(a, row, causal, key_mask, key_bias, b, h, i, j);
        const float p = s == -INFINITY ? 0.0f : expf(s - mx) * inv;
        P[at + j] = __float2bfloat16(p_dropped(p, p_index(a, b, h, i, j), drop, seed, offset));
    }
    if (threadIdx.x == 0) lse[((size_t)b * a.n + h) * a.T + i] = sum > 0.0f ? mx + logf(sum) : -INFINITY;
}

// From the recomputed scores S, the saved log-sum-exp and dP̃ = G Vᵀ (in dP), for GB_ROWS query
// rows of one head of one sequence: P̃ = dropout(P) in bf16 (dV's operand) and
// dS = P ⊙ (dropout'(dP̃) − Σ_j P̃_j dP̃_j) in bf16 (dQ's and dK's operand); with colsum, the block's
// Σ_i dS[i, j] over its rows (added in row order) into colsum [Bc, n, tiles, T].
__global__ void gb_dscores_kernel(AttnIdx a, int b0, const float *S, const float *lse, int causal,
                                  const int32_t *key_mask, const __nv_bfloat16 *key_bias, float drop, uint64_t seed,
                                  uint64_t offset, const float *dP, __nv_bfloat16 *P, __nv_bfloat16 *dS,
                                  float *colsum) {
    MHE_SHARED(float, fbuf, [32]);
    MHE_DYNAMIC_SHARED(float, col);  // [T] when colsum: column j owned by thread j % blockDim.x
    const int tile = blockIdx.x, h = blockIdx.y, bl = blockIdx.z, b = b0 + bl;
    const int i0 = tile * GB_ROWS, i1 = i0 + GB_ROWS < a.T ? i0 + GB_ROWS : a.T;
    if (colsum)
        for (int j = threadIdx.x; j < a.T; j += blockDim.x) col[j] = 0.0f;
    for (int i = i0; i < i1; i++) {
        const size_t at = (((size_t)bl * a.n + h) * a.T + i) * a.T;
        const float L = lse[((size_t)b * a.n + h) * a.T + i];
        const float *row = S + at, *drow = dP + at;
        auto prob = [&](int j) {
            const float s = gb_score(a, row, causal, key_mask, key_bias, b, h, i, j);
            return s == -INFINITY || L == -INFINITY ? 0.0f : expf(s - L);
        };
        float acc = 0.0f;
        for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
            const float pd = p_dropped(prob(j), p_index(a, b, h, i, j), drop, seed, offset);
            P[at + j] = __float2bfloat16(pd);
            acc += pd * drow[j];
        }
        const float D = block_sum(acc, fbuf);
        for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
            const float dp = p_dropped(drow[j], p_index(a, b, h, i, j), drop, seed, offset);
            const float ds = prob(j) * (dp - D);
            dS[at + j] = __float2bfloat16(ds);
            if (colsum) col[j] += ds;
        }
    }
    if (colsum) {
        const int tiles = gridDim.x;
        float *out = colsum + (((size_t)bl * a.n + h) * tiles + tile) * a.T;
        for (int j = threadIdx.x; j < a.T; j += blockDim.x) out[j] = col[j];
    }
}

// dkey_bias[b, j, h] = Σ_i dS[b, h, i, j]: the dS kernel's partial sums added over its row tiles
// in order (deterministic); one block per (head, sequence of the chunk), threads over keys.
__global__ void gb_dkey_bias_kernel(AttnIdx a, int b0, int tiles, const float *colsum, __nv_bfloat16 *dkb) {
    const int h = blockIdx.x, bl = blockIdx.y, b = b0 + bl;
    const float *base = colsum + ((size_t)bl * a.n + h) * tiles * a.T;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < tiles; t++) acc += base[(size_t)t * a.T + j];
        dkb[((size_t)b * a.T + j) * a.n + h] = __float2bfloat16(acc);
    }
}

// ---- the core ----

namespace {

// Operand of sequence b0 onward: a bf16 [rows, ld] activation whose head h / ratio starts at
// column (h / ratio) * dim.
GemmHeadsBf16 act_heads(const void *base, int ld, int T, int b0, int dim, int ratio) {
    const __nv_bfloat16 *p = static_cast<const __nv_bfloat16 *>(base) + (size_t)b0 * T * ld;
    return GemmHeadsBf16{p, true, ld, (long)T * ld, dim, ratio};
}
// A chunk's T x T buffer: [Bc, n, T, T].
GemmHeadsBf16 tt_heads(const void *base, bool bf16, const AttnShape *s) {
    const long TT = (long)s->T * s->T;
    return GemmHeadsBf16{base, bf16, s->T, s->n_heads * TT, TT, 1};
}

// The per-head gradient of an operand whose `heads` are shared `ratio` ways: straight into the
// operand's gradient (ratio 1) or into tmp, then summed per group.
struct GradTarget {
    GemmHeadsBf16 c;
    bool sum;
};
GradTarget grad_target(const AttnShape *s, Act *grad, int ld, int dim, int heads, int b0, __nv_bfloat16 *tmp) {
    if (heads == s->n_heads) {
        GemmHeadsBf16 c = act_heads(ab(grad), ld, s->T, b0, dim, 1);
        return GradTarget{c, false};
    }
    const int w = s->n_heads * dim;
    return GradTarget{GemmHeadsBf16{tmp, true, w, (long)s->T * w, dim, 1}, true};
}
void grad_finish(Backend *be, const AttnShape *s, const GradTarget &t, Act *grad, int ld, int dim, int heads, int b0,
                 int bc) {
    if (!t.sum) return;
    attn_heads_sum(be, static_cast<const __nv_bfloat16 *>(t.c.base), (size_t)bc * s->T, s->n_heads, dim,
                   s->n_heads / heads, ld, ab(grad) + (size_t)b0 * s->T * ld);
}

double pairs_of(const AttnShape *s) { return (double)s->B * s->n_heads * s->T * s->T; }

}  // namespace

static const char *gemm_bf16_refuses(Backend *be, const AttnShape *s) {
    static thread_local char why[160];
    if (!act16(be)) return "fp32 activations (its products are bf16)";
    if (s->q_scale) return "q_scale (the per-head query scale; the caller materialises the queries)";
    if (seq_bytes(s) > kScoresBudget) {
        std::snprintf(why, sizeof why, "one sequence's T x T buffers (%.1f MiB at T %d) past its %.1f MiB budget",
                      seq_bytes(s) / 1048576.0, s->T, kScoresBudget / 1048576.0);
        return why;
    }
    return nullptr;
}

// Under auto, shapes the flash kernels run on tensor cores stay with flash until a GPU run ranks
// the two (kernels/cuda/CALIBRATION.md): this core's T x T traffic against flash's measured 2-4%
// of its bound is an estimate, not a measurement.
static const char *gemm_bf16_defers(Backend *be, const AttnShape *s) {
    return cuda_flash_supported(s) && cuda_flash_tc_supported(be, s)
               ? "the flash kernels run these head dims on tensor cores (not yet ranked on a GPU)"
               : nullptr;
}

static const char *gemm_bf16_available(Backend *) { return nullptr; }
static const char *gemm_bf16_prepare(Backend *, const AttnShape *) { return nullptr; }

static void gemm_bf16_sizes(Backend *, const AttnShape *s, size_t *saved, size_t *scratch) {
    *saved = saved_words(s);
    *scratch = scratch_of(s, nullptr).words;
}

static void gemm_bf16_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                              float *saved, float *scratch) {
    const double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    const AttnIdx a = attn_idx(s);
    const Saved sv = saved_of(s, saved);
    const Scratch sc = scratch_of(s, scratch);
    const int T = s->T, n = s->n_heads, hd = n * s->v_dim, bc_max = sc.chunk;
    const size_t rows = (size_t)s->B * T;
    for (int b0 = 0; b0 < s->B; b0 += bc_max) {
        const int bc = s->B - b0 < bc_max ? s->B - b0 : bc_max;
        const double tt = (double)bc * tt_per_seq(s);
        // S_h = scale Q_h K_hᵀ
        cuda_gemm_heads_bf16(be, 0, 1, T, T, s->qk_dim, s->scale, act_heads(q, s->ldq, T, b0, s->qk_dim, a.qr),
                             act_heads(k, s->ldk, T, b0, s->qk_dim, a.kr), tt_heads(sc.S, false, s), bc, n);
        MHE_LAUNCH(gb_softmax_kernel, dim3(T, n, bc), MHE_BLOCK, 0, st, mhe_cost(8.0 * tt, 6.0 * tt + 4.0 * bc * n * T))(a, b0, sc.S, s->causal, s->key_mask, bias_of(s), s->dropout, s->seed, s->offset, sv.lse, sc.P);
        CUDA_CHECK_LAUNCH();
        // O'_h = dropout(P_h) V_h, into the output or (before out_scale / out_shift) the saved O'
        const GemmHeadsBf16 o = act_heads(sv.o ? sv.o : ab(out), hd, T, b0, s->v_dim, 1);
        cuda_gemm_heads_bf16(be, 0, 0, T, s->v_dim, T, 1.0f, tt_heads(sc.P, true, s),
                             act_heads(v, s->ldv, T, b0, s->v_dim, a.vr), o, bc, n);
    }
    if (sv.o)
        attn_heads_affine(be, sv.o, s->out_scale, s->out_shift, rows, hd, ab(out),
                          mhe_cost(2.0 * rows * hd, 4.0 * rows * hd + 8.0 * hd));
    cuda_prof_end(be, OPC_ATTENTION, t0, 2.0 * pairs_of(s) * (s->qk_dim + s->v_dim));
}

static void gemm_bf16_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                               const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                               float *dout_scale, float *dout_shift, float *scratch) {
    const double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    const AttnIdx a = attn_idx(s);
    const Saved sv = saved_of(s, saved);
    const Scratch sc = scratch_of(s, scratch);
    const int T = s->T, n = s->n_heads, hd = n * s->v_dim, bc_max = sc.chunk;
    const size_t rows = (size_t)s->B * T;
    const __nv_bfloat16 *G = ab(dout);
    if (s->out_scale) {  // G = dout ⊙ out_scale: the gradient of O'
        attn_heads_affine(be, ab(dout), s->out_scale, nullptr, rows, hd, sc.g,
                          mhe_cost((double)rows * hd, 4.0 * rows * hd + 4.0 * hd));
        G = sc.g;
    }
    attn_heads_scale_shift_grads(be, ab(dout), sv.o, (int)rows, hd, dout_scale, dout_shift);
    for (int b0 = 0; b0 < s->B; b0 += bc_max) {
        const int bc = s->B - b0 < bc_max ? s->B - b0 : bc_max;
        const double tt = (double)bc * tt_per_seq(s);
        const GemmHeadsBf16 Q = act_heads(q, s->ldq, T, b0, s->qk_dim, a.qr), K = act_heads(k, s->ldk, T, b0, s->qk_dim, a.kr),
                            V = act_heads(v, s->ldv, T, b0, s->v_dim, a.vr), Gh = act_heads(G, hd, T, b0, s->v_dim, 1);
        cuda_gemm_heads_bf16(be, 0, 1, T, T, s->qk_dim, s->scale, Q, K, tt_heads(sc.S, false, s), bc, n);  // S again
        cuda_gemm_heads_bf16(be, 0, 1, T, T, s->v_dim, 1.0f, Gh, V, tt_heads(sc.dP, false, s), bc, n);  // dP̃ = G Vᵀ
        float *colsum = dkey_bias ? sc.colsum : nullptr;
        const double partials = (double)bc * n * row_tiles(s) * T;
        MHE_LAUNCH(gb_dscores_kernel, dim3(row_tiles(s), n, bc), MHE_BLOCK, colsum ? T * sizeof(float) : 0, st, mhe_cost(12.0 * tt, 12.0 * tt + 4.0 * bc * n * T + (colsum ? 4.0 * partials : 0.0)))(a, b0, sc.S, sv.lse, s->causal, s->key_mask, bias_of(s), s->dropout, s->seed, s->offset, sc.dP, sc.P, sc.dS, colsum);
        CUDA_CHECK_LAUNCH();
        if (dv) {  // dV_h = P̃_hᵀ G_h
            const GradTarget t = grad_target(s, dv, s->ldv, s->v_dim, s->v_heads, b0, sc.tmp);
            cuda_gemm_heads_bf16(be, 1, 0, T, s->v_dim, T, 1.0f, tt_heads(sc.P, true, s), Gh, t.c, bc, n);
            grad_finish(be, s, t, dv, s->ldv, s->v_dim, s->v_heads, b0, bc);
        }
        if (dq) {  // dQ_h = scale dS_h K_h
            const GradTarget t = grad_target(s, dq, s->ldq, s->qk_dim, s->q_heads, b0, sc.tmp);
            cuda_gemm_heads_bf16(be, 0, 0, T, s->qk_dim, T, s->scale, tt_heads(sc.dS, true, s), K, t.c, bc, n);
            grad_finish(be, s, t, dq, s->ldq, s->qk_dim, s->q_heads, b0, bc);
        }
        if (dk) {  // dK_h = scale dS_hᵀ Q_h
            const GradTarget t = grad_target(s, dk, s->ldk, s->qk_dim, s->k_heads, b0, sc.tmp);
            cuda_gemm_heads_bf16(be, 1, 0, T, s->qk_dim, T, s->scale, tt_heads(sc.dS, true, s), Q, t.c, bc, n);
            grad_finish(be, s, t, dk, s->ldk, s->qk_dim, s->k_heads, b0, bc);
        }
        if (dkey_bias) {
            MHE_LAUNCH(gb_dkey_bias_kernel, dim3(n, bc), MHE_BLOCK, 0, st, mhe_cost(partials, 4.0 * partials + 2.0 * bc * n * T))(a, b0, row_tiles(s), sc.colsum, ab(dkey_bias));
            CUDA_CHECK_LAUNCH();
        }
    }
    cuda_prof_end(be, OPC_ATTENTION, t0, 2.0 * pairs_of(s) * (3.0 * s->qk_dim + 2.0 * s->v_dim));
}

const AttnCore attn_core_gemm_bf16 = {
    ATTN_CORE_GEMM_BF16, "gemm_bf16",
    "cuBLAS bf16 tensor-core batched GEMMs + softmax/dS row kernels, scores recomputed in the backward from the "
    "saved log-sum-exp, T x T buffers in scratch by chunks of sequences; every feature but q_scale, bf16 only",
    true, false, "cuBLAS bf16 GEMMs + row kernels", gemm_bf16_refuses, gemm_bf16_available, gemm_bf16_prepare,
    gemm_bf16_sizes, gemm_bf16_forward, gemm_bf16_backward, gemm_bf16_defers};
