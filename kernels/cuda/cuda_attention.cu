// defines: the gemm and plain attention cores, the own cores' entry (flash, gemm or plain by shape:
// attn_path), and in bf16 mode that entry on fp32 staged copies off the tensor-core path.
// The attention core (ops.h AttnShape): scores, masked softmax and weighted sums as plain
// kernels, probabilities P [B, n, T, T] saved for the backward, dS [B, n, T, T] in scratch.
// Query head h reads Q head h/(n/q_heads), K head h/(n/k_heads), V head h/(n/v_heads); the
// gradients of shared heads are summed over their query heads inside one thread (no atomics).
#include <cmath>

#include "kernels/cuda/cuda_act_stage.h"
#include "kernels/cuda/cuda_attn_core.h"

#include "kernels/cuda/cuda_attn_idx.h"

// One block per (i, h, b): P[i, :] = softmax(scale q_i·k_j + key_bias[j, h], visible keys).
// have_scores: P already holds scale q_i·k_j (from the GEMM path); q and k are not read.
__global__ void attn_softmax_kernel(AttnIdx a, const float *q, const float *k, float scale,
                                    int causal, const int32_t *key_mask, const float *key_bias,
                                    int have_scores, float *P) {
    MHE_SHARED(float, fbuf, [32]);
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const float *qi = have_scores ? nullptr : q_row(a, q, b, i, h);
    float *row = P + p_index(a, b, h, i, 0);
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        float s = -INFINITY;
        if (key_visible(a, causal, key_mask, b, i, j)) {
            if (have_scores) {
                s = row[j];
            } else {
                const float *kj = k_row(a, k, b, j, h);
                float dot = 0;
                for (int c = 0; c < a.dq; c++) dot += qi[c] * kj[c];
                s = scale * dot;
            }
            s += key_bias ? key_bias[((size_t)b * a.T + j) * a.n + h] : 0.0f;
        }
        row[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, fbuf);
    float sum = 0;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        float e = row[j] == -INFINITY ? 0.0f : expf(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    sum = block_sum(sum, fbuf);
    float inv = sum > 0 ? 1.0f / sum : 0.0f;  // no visible key: all-zero row
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) row[j] *= inv;
}

// One block per (i, h, b), threads over v_dim: out = (dropout(P) V) ⊙ scale + shift.
__global__ void attn_pv_kernel(AttnIdx a, const float *P, const float *v, const float *out_scale,
                               const float *out_shift, float drop, uint64_t seed, uint64_t offset,
                               float *out) {
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    int jmax = a.T;
    for (int c = threadIdx.x; c < a.dv; c += blockDim.x) {
        float acc = 0;
        for (int j = 0; j < jmax; j++) {
            size_t pi = p_index(a, b, h, i, j);
            float p = p_dropped(P[pi], pi, drop, seed, offset);
            if (p != 0.0f) acc += p * v_row(a, v, b, j, h)[c];
        }
        float o = acc * (out_scale ? out_scale[h * a.dv + c] : 1.0f) + (out_shift ? out_shift[h * a.dv + c] : 0.0f);
        out[(((size_t)b * a.T + i) * a.n + h) * a.dv + c] = o;
    }
}

// Cost model terms (fp32 buffers): elements of P [B, n, T, T], and bytes of the distinct
// rows of a [B, T, heads, dim] operand.  Rows of P are re-read from L1/L2 within a block, so
// each P element counts once per kernel that reads it and once per kernel that writes it.
static double attn_tt(const AttnShape *s) { return (double)s->B * s->n_heads * s->T * s->T; }
static double head_bytes(const AttnShape *s, int heads, int dim) { return 4.0 * s->B * s->T * heads * dim; }
static double mask_bytes(const AttnShape *s) {
    return (s->key_mask ? 4.0 * s->B * s->T : 0.0) + (s->key_bias ? head_bytes(s, s->n_heads, 1) : 0.0);
}

// Threads for a kernel whose threads run over a head dimension.
static unsigned dim_block(int d) {
    int t = (d + 31) / 32 * 32;
    return (unsigned)(t < 32 ? 32 : t > MHE_BLOCK ? MHE_BLOCK : t);
}

static int head_block(const AttnShape *s);
enum { PATH_FLASH, PATH_GEMM, PATH_PLAIN };
// The path of the own core the dispatcher chose for this call (cuda_attn_dispatch.cu): flash,
// or the gemm core's GEMMs where heads form blocks and its plain kernels otherwise, or plain.
static int attn_path(Backend *be, const AttnShape *s) {
    switch (cuda_attn_own_core(be)) {
    case ATTN_CORE_FLASH: return PATH_FLASH;
    case ATTN_CORE_GEMM: return head_block(s) > 0 ? PATH_GEMM : PATH_PLAIN;
    default: return PATH_PLAIN;
    }
}

static void cuda_attention_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    if (attn_path(be, s) == PATH_FLASH) {
        cuda_flash_sizes(s, saved, scratch);
        return;
    }
    size_t tt = (size_t)s->B * s->n_heads * s->T * s->T;
    size_t out = (size_t)s->B * s->T * s->n_heads * s->v_dim;
    *saved = tt;  // P
    // Backward: dS, and for the GEMM path dropout(P), dout ⊙ out_scale and dropout(P) V.
    *scratch = 2 * tt + 2 * out;
}

static void attention_forward_plain(Backend *be, const AttnShape *s, const float *q, const float *k,
                                    const float *v, float *out, float *saved) {
    AttnIdx a = attn_idx(s);
    cudaStream_t st = cuda_stream(be);
    dim3 grid(s->T, s->n_heads, s->B);
    if (s->B && s->T && s->n_heads) {
        MHE_LAUNCH(attn_softmax_kernel, grid, MHE_BLOCK, 0, st, mhe_cost(attn_tt(s) * (2.0 * s->qk_dim + 5.0), 4.0 * attn_tt(s) + head_bytes(s, s->q_heads + s->k_heads, s->qk_dim) + mask_bytes(s)))(a, q, k, s->scale, s->causal, s->key_mask, af(s->key_bias), 0, saved);
        CUDA_CHECK_LAUNCH();
        MHE_LAUNCH(attn_pv_kernel, grid, dim_block(s->v_dim), 0, st, mhe_cost(2.0 * attn_tt(s) * s->v_dim, 4.0 * attn_tt(s) + head_bytes(s, s->v_heads + s->n_heads, s->v_dim)))(a, saved, v, s->out_scale, s->out_shift, s->dropout, s->seed, s->offset, out);
        CUDA_CHECK_LAUNCH();
    }
}

// With G = dout ⊙ out_scale (the gradient of dropout(P) V):
//   dPd[j] = G_i · v_j;  dP[j] = dPd[j] keep/(1-p);  dS[j] = P[j] (dP[j] - sum_j' P[j'] dP[j'])
// have_dp: dS already holds dPd (from the GEMM path); v, dout and out_scale are not read.
__global__ void attn_dscores_kernel(AttnIdx a, const float *P, const float *v, const float *dout,
                                    const float *out_scale, float drop, uint64_t seed,
                                    uint64_t offset, int have_dp, float *dS) {
    MHE_SHARED(float, fbuf, [32]);
    int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const float *go = have_dp ? nullptr : dout + (((size_t)b * a.T + i) * a.n + h) * a.dv;
    float dot = 0;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        size_t pi = p_index(a, b, h, i, j);
        float dp = 0;
        if (P[pi] != 0.0f) {
            if (have_dp) {
                dp = dS[pi];
            } else {
                const float *vj = v_row(a, v, b, j, h);
                for (int c = 0; c < a.dv; c++) dp += go[c] * (out_scale ? out_scale[h * a.dv + c] : 1.0f) * vj[c];
            }
            dp = p_dropped(dp, pi, drop, seed, offset);
        }
        dS[pi] = dp;
        dot += P[pi] * dp;
    }
    dot = block_sum(dot, fbuf);
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        size_t pi = p_index(a, b, h, i, j);
        dS[pi] = P[pi] * (dS[pi] - dot);
    }
}

// dq[b, i, g, c] = scale sum_{h of Q head g} sum_j dS[b,h,i,j] k_j[c]     (grid: i, g, b)
__global__ void attn_dq_kernel(AttnIdx a, const float *dS, const float *k, float scale, float *dq) {
    int i = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    for (int c = threadIdx.x; c < a.dq; c += blockDim.x) {
        float acc = 0;
        for (int h = g * a.qr; h < (g + 1) * a.qr; h++)
            for (int j = 0; j < a.T; j++) acc += dS[p_index(a, b, h, i, j)] * k_row(a, k, b, j, h)[c];
        dq[((size_t)b * a.T + i) * a.ldq + (size_t)g * a.dq + c] = scale * acc;
    }
}
// dk[b, j, g, c] = scale sum_{h of K head g} sum_i dS[b,h,i,j] q_i[c]     (grid: j, g, b)
__global__ void attn_dk_kernel(AttnIdx a, const float *dS, const float *q, float scale, float *dk) {
    int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    for (int c = threadIdx.x; c < a.dq; c += blockDim.x) {
        float acc = 0;
        for (int h = g * a.kr; h < (g + 1) * a.kr; h++)
            for (int i = 0; i < a.T; i++) acc += dS[p_index(a, b, h, i, j)] * q_row(a, q, b, i, h)[c];
        dk[((size_t)b * a.T + j) * a.ldk + (size_t)g * a.dq + c] = scale * acc;
    }
}
// dv[b, j, g, c] = sum_{h of V head g} sum_i dropout(P)[b,h,i,j] G[b,i,h,c]  (grid: j, g, b)
__global__ void attn_dv_kernel(AttnIdx a, const float *P, const float *dout, const float *out_scale,
                               float drop, uint64_t seed, uint64_t offset, float *dv) {
    int j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
    for (int c = threadIdx.x; c < a.dv; c += blockDim.x) {
        float acc = 0;
        for (int h = g * a.vr; h < (g + 1) * a.vr; h++) {
            float sc = out_scale ? out_scale[h * a.dv + c] : 1.0f;
            for (int i = 0; i < a.T; i++) {
                size_t pi = p_index(a, b, h, i, j);
                float p = p_dropped(P[pi], pi, drop, seed, offset);
                if (p != 0.0f) acc += p * dout[(((size_t)b * a.T + i) * a.n + h) * a.dv + c] * sc;
            }
        }
        dv[((size_t)b * a.T + j) * a.ldv + (size_t)g * a.dv + c] = acc;
    }
}
// dkey_bias[b, j, h] = sum_i dS[b,h,i,j]      (grid: h, b; threads over j)
__global__ void attn_dkey_bias_kernel(AttnIdx a, const float *dS, float *dkb) {
    int h = blockIdx.x, b = blockIdx.y;
    for (int j = threadIdx.x; j < a.T; j += blockDim.x) {
        float acc = 0;
        for (int i = 0; i < a.T; i++) acc += dS[p_index(a, b, h, i, j)];
        dkb[((size_t)b * a.T + j) * a.n + h] = acc;
    }
}
// dout_scale[h, c] += sum_{b,i} dout · (dropout(P) V)[b,i,h,c];  dout_shift[h, c] += sum_{b,i} dout
__global__ void attn_dscale_shift_kernel(AttnIdx a, const float *P, const float *v, const float *dout,
                                         float drop, uint64_t seed, uint64_t offset, float *dscale,
                                         float *dshift) {
    int h = blockIdx.x;
    for (int c = threadIdx.x; c < a.dv; c += blockDim.x) {
        float ss = 0, sh = 0;
        for (int b = 0; b < a.B; b++)
            for (int i = 0; i < a.T; i++) {
                float g = dout[(((size_t)b * a.T + i) * a.n + h) * a.dv + c];
                sh += g;
                if (!dscale) continue;
                float pv = 0;
                for (int j = 0; j < a.T; j++) {
                    size_t pi = p_index(a, b, h, i, j);
                    float p = p_dropped(P[pi], pi, drop, seed, offset);
                    if (p != 0.0f) pv += p * v_row(a, v, b, j, h)[c];
                }
                ss += g * pv;
            }
        if (dscale) dscale[h * a.dv + c] += ss;
        if (dshift) dshift[h * a.dv + c] += sh;
    }
}

static void attention_backward_plain(Backend *be, const AttnShape *s, const float *q, const float *k,
                                     const float *v, const float *saved, const float *dout,
                                     float *dq, float *dk, float *dv, float *dkey_bias,
                                     float *dout_scale, float *dout_shift, float *scratch) {
    AttnIdx a = attn_idx(s);
    cudaStream_t st = cuda_stream(be);
    if (s->B && s->T && s->n_heads) {
        const float *P = saved;
        float *dS = scratch;
        MHE_LAUNCH(attn_dscores_kernel, dim3(s->T, s->n_heads, s->B), MHE_BLOCK, 0, st, mhe_cost(attn_tt(s) * (2.0 * s->v_dim + 5.0), 8.0 * attn_tt(s) + head_bytes(s, s->v_heads + s->n_heads, s->v_dim)))(a, P, v, dout, s->out_scale, s->dropout, s->seed, s->offset, 0, dS);
        CUDA_CHECK_LAUNCH();
        if (dq) MHE_LAUNCH(attn_dq_kernel, dim3(s->T, s->q_heads, s->B), dim_block(s->qk_dim), 0, st, mhe_cost(2.0 * attn_tt(s) * s->qk_dim, 4.0 * attn_tt(s) + head_bytes(s, s->q_heads + s->k_heads, s->qk_dim)))(a, dS, k, s->scale, dq);
        CUDA_CHECK_LAUNCH();
        if (dk) MHE_LAUNCH(attn_dk_kernel, dim3(s->T, s->k_heads, s->B), dim_block(s->qk_dim), 0, st, mhe_cost(2.0 * attn_tt(s) * s->qk_dim, 4.0 * attn_tt(s) + head_bytes(s, s->q_heads + s->k_heads, s->qk_dim)))(a, dS, q, s->scale, dk);
        CUDA_CHECK_LAUNCH();
        if (dv) MHE_LAUNCH(attn_dv_kernel, dim3(s->T, s->v_heads, s->B), dim_block(s->v_dim), 0, st, mhe_cost(2.0 * attn_tt(s) * s->v_dim, 4.0 * attn_tt(s) + head_bytes(s, s->n_heads + s->v_heads, s->v_dim)))(a, P, dout, s->out_scale, s->dropout, s->seed, s->offset, dv);
        CUDA_CHECK_LAUNCH();
        if (dkey_bias) MHE_LAUNCH(attn_dkey_bias_kernel, dim3(s->n_heads, s->B), dim_block(s->T), 0, st, mhe_cost(attn_tt(s), 4.0 * attn_tt(s) + head_bytes(s, s->n_heads, 1)))(a, dS, dkey_bias);
        CUDA_CHECK_LAUNCH();
        if (dout_scale || dout_shift)
            MHE_LAUNCH(attn_dscale_shift_kernel, s->n_heads, dim_block(s->v_dim), 0, st, mhe_cost(2.0 * attn_tt(s) * s->v_dim, 4.0 * attn_tt(s) + head_bytes(s, s->n_heads + s->v_heads, s->v_dim)))(a, P, v, dout, s->dropout, s->seed, s->offset, dout_scale, dout_shift);
        CUDA_CHECK_LAUNCH();
    }
}

// ---- The GEMM path: the products through cuBLAS (strided-batched over blocks of heads), the row
// kernels above for softmax and dS.  Heads are taken in blocks of m consecutive heads in which
// each of Q, K, V is either per head (stride one head) or a single head (stride 0); that covers
// every variant (gqa: one block per K/V group).  Head counts for which no such m exists fall
// back to the plain kernels above, which are also the GEMM path's reference
// (runtime.attention_core plain selects them).

// Head h of a per-sequence operand sits at base + (h / ratio) * step, rows ld floats apart.
struct HeadOp {
    const float *base;
    int ld, ratio;
    long step;
    const float *at(int h) const { return base + (long)(h / ratio) * step; }
    long stride() const { return ratio == 1 ? step : 0; }
};

// Heads per block: the smallest ratio > 1 among Q, K, V (n when all are 1), provided every
// ratio is 1 or a multiple of it; 0 otherwise.
static int head_block(const AttnShape *s) {
    const int n = s->n_heads, r[3] = {n / s->q_heads, n / s->k_heads, n / s->v_heads};
    int m = n;
    for (int i = 0; i < 3; i++)
        if (r[i] > 1 && r[i] < m) m = r[i];
    for (int i = 0; i < 3; i++)
        if (r[i] != 1 && r[i] % m != 0) return 0;
    return m;
}

// C_h = alpha op(A_h) op(B_h) for heads h0 .. h0+m-1.  A C shared by several heads (ratio > 1,
// a gradient of a shared operand) receives their sum: its first head overwrites, the rest add.
static void block_gemm(Backend *be, int ta, int tb, int M, int N, int K, float alpha, HeadOp A,
                       HeadOp B, HeadOp C, int h0, int m) {
    float *c0 = const_cast<float *>(C.at(h0));
    if (C.ratio == 1) {
        cuda_gemm_batched(be, ta, tb, M, N, K, alpha, A.at(h0), A.ld, A.stride(), B.at(h0), B.ld,
                          B.stride(), 0.0f, c0, C.ld, C.stride(), m);
        return;
    }
    for (int h = h0; h < h0 + m; h++)
        cuda_gemm_batched(be, ta, tb, M, N, K, alpha, A.at(h), A.ld, 0, B.at(h), B.ld, 0,
                          h % C.ratio == 0 ? 0.0f : 1.0f, const_cast<float *>(C.at(h)), C.ld, 0, 1);
}

// y[r, g, c] (row stride ldy) = sum of x[r, h, c] over the `ratio` heads h of group g; x is
// [rows, n, d] contiguous.  Sums the per-head gradients of a shared Q/K/V head.
__global__ void attn_sum_heads_kernel(const float *x, size_t rows, int n, int d, int ratio, float *y, int ldy) {
    const int groups = n / ratio;
    const size_t total = rows * groups * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)blockDim.x * gridDim.x) {
        int c = (int)(i % d), g = (int)((i / d) % groups);
        size_t r = i / ((size_t)d * groups);
        float acc = 0;
        for (int h = g * ratio; h < (g + 1) * ratio; h++) acc += x[(r * n + h) * d + c];
        y[r * ldy + (size_t)g * d + c] = acc;
    }
}

// Every (sequence, head) product of one attention GEMM in one cuBLAS call.  A C shared by
// several heads (ratio > 1: the gradient of a shared operand) is computed per head into
// `temp` ([B, T, n, N] floats; temp_floats of room) and then summed over each group; without
// room, per sequence and head block as before (block_gemm).
static void heads_gemm(Backend *be, const AttnShape *s, int ta, int tb, int M, int N, int K, float alpha,
                       GemmHeads A, GemmHeads B, GemmHeads C, float *temp, size_t temp_floats) {
    const int n = s->n_heads, T = s->T;
    if (C.ratio == 1) {
        cuda_gemm_heads(be, ta, tb, M, N, K, alpha, A, B, 0.0f, C, s->B, n);
        return;
    }
    const size_t rows = (size_t)s->B * T;
    if (temp && rows * n * N <= temp_floats) {
        GemmHeads Tm{temp, n * N, (long)T * n * N, N, 1};
        cuda_gemm_heads(be, ta, tb, M, N, K, alpha, A, B, 0.0f, Tm, s->B, n);
        const size_t total = rows * (n / C.ratio) * N;
        MHE_LAUNCH(attn_sum_heads_kernel, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be),
                   mhe_cost((double)rows * n * N, 4.0 * (rows * n * N + total)))(temp, rows, n, N, C.ratio, const_cast<float *>(C.base), C.ld);
        CUDA_CHECK_LAUNCH();
        return;
    }
    const int m = head_block(s);
    for (int b = 0; b < s->B; b++) {
        HeadOp a{A.base + b * A.seq_stride, A.ld, A.ratio, A.head_step};
        HeadOp bb{B.base + b * B.seq_stride, B.ld, B.ratio, B.head_step};
        HeadOp c{C.base + b * C.seq_stride, C.ld, C.ratio, C.head_step};
        for (int h0 = 0; h0 < n; h0 += m) block_gemm(be, ta, tb, M, N, K, alpha, a, bb, c, h0, m);
    }
}

__global__ void attn_drop_kernel(const float *P, float *Pd, size_t n, float drop, uint64_t seed, uint64_t offset) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        Pd[i] = p_dropped(P[i], i, drop, seed, offset);
}
// x[r, h, c] = x[r, h, c] * (scale ? scale[h, c] : 1) + (shift ? shift[h, c] : 0)  into y
__global__ void attn_head_affine_kernel(const float *x, const float *scale, const float *shift, size_t rows,
                                        int hd, float *y) {
    size_t total = rows * hd;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)blockDim.x * gridDim.x) {
        int c = (int)(i % hd);
        y[i] = x[i] * (scale ? scale[c] : 1.0f) + (shift ? shift[c] : 0.0f);
    }
}
// dscale[h, c] += sum_r dout[r, h, c] O[r, h, c];  dshift[h, c] += sum_r dout[r, h, c]
__global__ void attn_scale_shift_grad_kernel(const float *dout, const float *O, size_t rows, int hd,
                                             float *dscale, float *dshift) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= hd) return;
    float ss = 0, sh = 0;
    for (size_t r = 0; r < rows; r++) {
        float g = dout[r * hd + c];
        sh += g;
        if (dscale) ss += g * O[r * hd + c];
    }
    if (dscale) dscale[c] += ss;
    if (dshift) dshift[c] += sh;
}

static void launch_elementwise_drop(Backend *be, const AttnShape *s, const float *P, float *Pd, size_t tt) {
    MHE_LAUNCH(attn_drop_kernel, cuda_grid_for(tt), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)tt, 8.0 * tt))(P, Pd, tt, s->dropout, s->seed, s->offset);
    CUDA_CHECK_LAUNCH();
}

static void attention_forward_gemm(Backend *be, const AttnShape *s, const float *q, const float *k,
                                   const float *v, float *out, float *saved, float *scratch) {
    AttnIdx a = attn_idx(s);
    cudaStream_t st = cuda_stream(be);
    const int T = s->T, n = s->n_heads, hd = n * s->v_dim;
    const long TT = (long)T * T;
    const size_t tt = (size_t)s->B * n * TT, rows = (size_t)s->B * T;
    const float *Pd = s->dropout > 0.0f ? scratch : saved;  // filled after the softmax
    const GemmHeads Q{q, s->ldq, (long)T * s->ldq, s->qk_dim, a.qr}, Kh{k, s->ldk, (long)T * s->ldk, s->qk_dim, a.kr},
        Vh{v, s->ldv, (long)T * s->ldv, s->v_dim, a.vr};
    // S_h = scale Q_h K_hᵀ
    heads_gemm(be, s, 0, 1, T, T, s->qk_dim, s->scale, Q, Kh, GemmHeads{saved, T, n * TT, TT, 1}, nullptr, 0);
    MHE_LAUNCH(attn_softmax_kernel, dim3(T, n, s->B), MHE_BLOCK, 0, st, mhe_cost(5.0 * tt, 8.0 * tt + mask_bytes(s)))(a, q, k, s->scale, s->causal, s->key_mask, af(s->key_bias), 1, saved);
    CUDA_CHECK_LAUNCH();
    if (s->dropout > 0.0f) launch_elementwise_drop(be, s, saved, scratch, tt);
    // O_h = dropout(P_h) V_h
    heads_gemm(be, s, 0, 0, T, s->v_dim, T, 1.0f, GemmHeads{Pd, T, n * TT, TT, 1}, Vh,
               GemmHeads{out, hd, (long)T * hd, s->v_dim, 1}, nullptr, 0);
    if (s->out_scale || s->out_shift) {
        MHE_LAUNCH(attn_head_affine_kernel, cuda_grid_for(rows * hd), MHE_BLOCK, 0, st, mhe_cost(2.0 * rows * hd, 8.0 * rows * hd + 8.0 * hd))(out, s->out_scale, s->out_shift, rows, hd, out);
        CUDA_CHECK_LAUNCH();
    }
}

static void attention_backward_gemm(Backend *be, const AttnShape *s, const float *q, const float *k,
                                    const float *v, const float *saved, const float *dout,
                                    float *dq, float *dk, float *dv, float *dkey_bias,
                                    float *dout_scale, float *dout_shift, float *scratch) {
    AttnIdx a = attn_idx(s);
    cudaStream_t st = cuda_stream(be);
    const int T = s->T, n = s->n_heads, hd = n * s->v_dim;
    const long TT = (long)T * T;
    const size_t tt = (size_t)s->B * n * TT, rows = (size_t)s->B * T;
    float *dS = scratch, *Pd_buf = scratch + tt, *G_buf = scratch + 2 * tt, *O = G_buf + rows * hd;
    const float *P = saved, *Pd = saved, *G = dout;
    if (s->dropout > 0.0f) {
        launch_elementwise_drop(be, s, P, Pd_buf, tt);
        Pd = Pd_buf;
    }
    if (s->out_scale) {  // G = dout ⊙ out_scale: the gradient of dropout(P) V
        MHE_LAUNCH(attn_head_affine_kernel, cuda_grid_for(rows * hd), MHE_BLOCK, 0, st, mhe_cost((double)rows * hd, 8.0 * rows * hd + 4.0 * hd))(dout, s->out_scale, nullptr, rows, hd, G_buf);
        CUDA_CHECK_LAUNCH();
        G = G_buf;
    }
    const GemmHeads Q{q, s->ldq, (long)T * s->ldq, s->qk_dim, a.qr}, Kh{k, s->ldk, (long)T * s->ldk, s->qk_dim, a.kr},
        Vh{v, s->ldv, (long)T * s->ldv, s->v_dim, a.vr}, Gh{G, hd, (long)T * hd, s->v_dim, 1},
        dSh{dS, T, n * TT, TT, 1}, Pdh{Pd, T, n * TT, TT, 1};
    // The O buffer is free until the out_scale gradient: room for per-head shared gradients.
    const size_t temp_floats = rows * hd;
    heads_gemm(be, s, 0, 1, T, T, s->v_dim, 1.0f, Gh, Vh, dSh, nullptr, 0);  // dPd_h = G_h V_hᵀ
    MHE_LAUNCH(attn_dscores_kernel, dim3(T, n, s->B), MHE_BLOCK, 0, st, mhe_cost(5.0 * tt, 12.0 * tt))(a, P, v, dout, s->out_scale, s->dropout, s->seed, s->offset, 1, dS);
    CUDA_CHECK_LAUNCH();
    if (dq)  // dQ_h = scale dS_h K_h
        heads_gemm(be, s, 0, 0, T, s->qk_dim, T, s->scale, dSh, Kh,
                   GemmHeads{dq, s->ldq, (long)T * s->ldq, s->qk_dim, a.qr}, O, temp_floats);
    if (dk)  // dK_h = scale dS_hᵀ Q_h
        heads_gemm(be, s, 1, 0, T, s->qk_dim, T, s->scale, dSh, Q,
                   GemmHeads{dk, s->ldk, (long)T * s->ldk, s->qk_dim, a.kr}, O, temp_floats);
    if (dv)  // dV_h = dropout(P_h)ᵀ G_h
        heads_gemm(be, s, 1, 0, T, s->v_dim, T, 1.0f, Pdh, Gh,
                   GemmHeads{dv, s->ldv, (long)T * s->ldv, s->v_dim, a.vr}, O, temp_floats);
    if (dkey_bias) MHE_LAUNCH(attn_dkey_bias_kernel, dim3(n, s->B), dim_block(T), 0, st, mhe_cost((double)tt, 4.0 * tt + head_bytes(s, n, 1)))(a, dS, dkey_bias);
    CUDA_CHECK_LAUNCH();
    if (dout_scale || dout_shift) {
        if (dout_scale)  // O = dropout(P) V again, for d out_scale = sum dout ⊙ O
            heads_gemm(be, s, 0, 0, T, s->v_dim, T, 1.0f, Pdh, Vh, GemmHeads{O, hd, (long)T * hd, s->v_dim, 1}, nullptr, 0);
        MHE_LAUNCH(attn_scale_shift_grad_kernel, (hd + MHE_BLOCK - 1) / MHE_BLOCK, MHE_BLOCK, 0, st, mhe_cost(3.0 * rows * hd, 8.0 * rows * hd + 16.0 * hd))(dout, O, rows, hd, dout_scale, dout_shift);
        CUDA_CHECK_LAUNCH();
    }
}

// What an attention call writes in fp32 (cuda_fp32_wrote): every output span, saved and scratch,
// reported before the kernels run.
static void attention_wrote(Backend *be, const AttnShape *s, float *out, float *saved, float *dq, float *dk,
                            float *dv, float *dkey_bias, float *dout_scale, float *dout_shift, float *scratch) {
    size_t sv = 0, sc = 0;
    cuda_attention_sizes(be, s, &sv, &sc);
    const size_t rows = (size_t)s->B * s->T, f = sizeof(float);
    auto span = [&](float *p, int heads, int dim, int ld) {
        if (p) cuda_fp32_wrote(be, p, ((rows - 1) * ld + (size_t)heads * dim) * f);
    };
    if (out) cuda_fp32_wrote(be, out, rows * s->n_heads * s->v_dim * f);
    if (saved) cuda_fp32_wrote(be, saved, sv * f);
    if (scratch) cuda_fp32_wrote(be, scratch, sc * f);
    span(dq, s->q_heads, s->qk_dim, s->ldq);
    span(dk, s->k_heads, s->qk_dim, s->ldk);
    span(dv, s->v_heads, s->v_dim, s->ldv);
    if (dkey_bias) cuda_fp32_wrote(be, dkey_bias, rows * s->n_heads * f);
    if (dout_scale) cuda_fp32_wrote(be, dout_scale, (size_t)s->n_heads * s->v_dim * f);
    if (dout_shift) cuda_fp32_wrote(be, dout_shift, (size_t)s->n_heads * s->v_dim * f);
}

static void cuda_attention_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                                   const float *v, float *out, float *saved, float *scratch) {
    if (!s->B || !s->T || !s->n_heads) return;
    if (s->q_scale && !cuda_attention_tc(be, s)) mhe_fatal("attention: q_scale off the tensor-core path");
    double t0 = cuda_prof_begin(be);
    const int path = attn_path(be, s);
    // The tensor-core forward's `out` is a bf16 activation, not fp32 memory.
    float *wrote_out = cuda_attention_tc(be, s) ? nullptr : out;
    attention_wrote(be, s, wrote_out, saved, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, scratch);
    if (path == PATH_FLASH)
        cuda_flash_forward(be, s, q, k, v, out, saved);
    else if (path == PATH_GEMM)
        attention_forward_gemm(be, s, q, k, v, out, saved, scratch);
    else
        attention_forward_plain(be, s, q, k, v, out, saved);
    double tt = (double)s->B * s->n_heads * s->T * s->T;
    cuda_prof_end(be, OPC_ATTENTION, t0, 2.0 * tt * (s->qk_dim + s->v_dim));
}

static void cuda_attention_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                                    const float *v, const float *saved, const float *dout,
                                    float *dq, float *dk, float *dv, float *dkey_bias,
                                    float *dout_scale, float *dout_shift, float *scratch) {
    if (!s->B || !s->T || !s->n_heads) return;
    if (s->q_scale && !cuda_attention_tc(be, s)) mhe_fatal("attention: q_scale off the tensor-core path");
    double t0 = cuda_prof_begin(be);
    const int path = attn_path(be, s);
    // The tensor-core backward's dQ, dK, dV are bf16 activations, not fp32 memory.
    const bool tc = cuda_attention_tc(be, s);
    attention_wrote(be, s, nullptr, nullptr, tc ? nullptr : dq, tc ? nullptr : dk, tc ? nullptr : dv, dkey_bias,
                    dout_scale, dout_shift, scratch);
    if (path == PATH_FLASH) {
        cuda_flash_backward(be, s, q, k, v, saved, dout, dq, dk, dv, dkey_bias, dout_scale, dout_shift, scratch);
    } else if (path == PATH_GEMM)
        attention_backward_gemm(be, s, q, k, v, saved, dout, dq, dk, dv, dkey_bias, dout_scale,
                                dout_shift, scratch);
    else
        attention_backward_plain(be, s, q, k, v, saved, dout, dq, dk, dv, dkey_bias, dout_scale,
                                 dout_shift, scratch);
    double tt = (double)s->B * s->n_heads * s->T * s->T;
    cuda_prof_end(be, OPC_ATTENTION, t0, 4.0 * tt * (s->qk_dim + s->v_dim));
}

int cuda_attention_tc(Backend *be, const AttnShape *s) {
    return attn_path(be, s) == PATH_FLASH && cuda_flash_tc_supported(be, s);
}

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_attention_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                                  float *saved, float *scratch) {
    cuda_attention_forward(be, s, af(q), af(k), af(v), af(out), saved, scratch);
}
static void act_attention_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                                   const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                                   float *dout_scale, float *dout_shift, float *scratch) {
    cuda_attention_backward(be, s, af(q), af(k), af(v), saved, af(dout), af(dq), af(dk), af(dv), af(dkey_bias),
                            dout_scale, dout_shift, scratch);
}

void cuda_install_attention(Backend *be) {
    be->attention_sizes = cuda_attention_sizes;
    be->attention_forward = act_attention_forward;
    be->attention_backward = act_attention_backward;
}

// bf16 activations (bf16 mode): the cores above on fp32 copies of their bf16 arguments
// (cuda_act_stage.h), except the tensor-core flash kernels, which read and store bf16 themselves.
static Backend *f32(Backend *be) { return cuda_ctx(be)->f32; }

// Q, K, V (and their gradients) staged compact: the fp32 core sees row strides heads * dim.
static AttnShape compact(const AttnShape *s, Stage &st) {
    AttnShape t = *s;
    t.ldq = s->q_heads * s->qk_dim;
    t.ldk = s->k_heads * s->qk_dim;
    t.ldv = s->v_heads * s->v_dim;
    t.key_bias = st.in(s->key_bias, (size_t)s->B * s->T * s->n_heads);
    return t;
}
// The tensor-core flash kernels (head dims 16, 32, 64 on the flash path) read and write bf16
// themselves (cuda_flash_tc.h's tc_act): only the key bias and its gradient, fp32 there, are
// staged.  Other shapes run the fp32 core on compact staged copies.
static AttnShape with_key_bias(const AttnShape *s, Stage &st) {
    AttnShape t = *s;
    t.key_bias = st.in(s->key_bias, (size_t)s->B * s->T * s->n_heads);
    return t;
}
static void staged_attention_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                                     float *saved, float *scratch) {
    Stage st(be, OPC_ATTENTION);
    const size_t rows = (size_t)s->B * s->T;
    if (cuda_attention_tc(be, s)) {
        const AttnShape t = with_key_bias(s, st);
        f32(be)->attention_forward(be, &t, q, k, v, out, saved, scratch);
        st.done();
        return;
    }
    const AttnShape t = compact(s, st);
    const Act *qs = st.in(q, rows, t.ldq, s->ldq), *ks = st.in(k, rows, t.ldk, s->ldk), *vs = st.in(v, rows, t.ldv, s->ldv);
    f32(be)->attention_forward(be, &t, qs, ks, vs, st.out(out, rows * s->n_heads * s->v_dim, false), saved, scratch);
    st.done();
}
static void staged_attention_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                                      const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                                      float *dout_scale, float *dout_shift, float *scratch) {
    Stage st(be, OPC_ATTENTION);
    const size_t rows = (size_t)s->B * s->T;
    if (cuda_attention_tc(be, s)) {
        const AttnShape t = with_key_bias(s, st);
        f32(be)->attention_backward(be, &t, q, k, v, saved, dout, dq, dk, dv, st.out(dkey_bias, rows * s->n_heads, false),
                                    dout_scale, dout_shift, scratch);
        st.done();
        return;
    }
    const AttnShape t = compact(s, st);
    const Act *qs = st.in(q, rows, t.ldq, s->ldq), *ks = st.in(k, rows, t.ldk, s->ldk), *vs = st.in(v, rows, t.ldv, s->ldv);
    const Act *gs = st.in(dout, rows * s->n_heads * s->v_dim);
    Act *dqs = st.out(dq, rows, t.ldq, s->ldq, false), *dks = st.out(dk, rows, t.ldk, s->ldk, false);
    Act *dvs = st.out(dv, rows, t.ldv, s->ldv, false), *dkbs = st.out(dkey_bias, rows * s->n_heads, false);
    f32(be)->attention_backward(be, &t, qs, ks, vs, saved, gs, dqs, dks, dvs, dkbs, dout_scale, dout_shift, scratch);
    st.done();
}

void cuda_install_attention_bf16(Backend *be) {
    be->attention_forward = staged_attention_forward;
    be->attention_backward = staged_attention_backward;
}
