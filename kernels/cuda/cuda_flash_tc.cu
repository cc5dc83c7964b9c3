// defines: the flash attention forward on tensor cores (bf16 mode) and its capability check.
// Fused attention on tensor cores (bf16 mode): the kernels of cuda_flash.cu with every product
// as nvcuda::wmma 16x16x16 bf16 multiplies accumulating in fp32, tiles staged through shared
// memory.  Same semantics, same saved buffers (L, Opre) and scratch (D), same dropout index.
// This file: the forward and the capability check; cuda_flash_tc_bwd.cu: the backward;
// cuda_flash_tc.h: what they share.
// The forward makes one pass over the keys with an online softmax.  Its O accumulator lives in
// shared memory (fp32), not in fragments: a fragment's element-to-row mapping is the
// hardware's, so a row's rescale by exp(m_old - m_new) when its running max grows is done on
// the shared rows by the lanes owning them, then loaded into fragments, P V added, stored back.
// Head dims: qk_dim == v_dim in {16, 32, 64} (templates); other shapes use cuda_flash.cu.
#include "kernels/cuda/cuda_flash_tc.h"

#define TC_FWD_THREADS (TC_FWD_ROWS * 2)  // 16 rows per 32-lane warp

// grid (query tiles, n, B).  Shared: S (fp32), O (fp32), L, Q, K, V tiles (bf16), P (bf16).
template <int D>
__global__ void __launch_bounds__(TC_FWD_THREADS, 1) flash_tc_forward_kernel(TcArgs f, const float *q, const float *k,
                                                                          const float *v, const float *out_shift,
                                                                          float *out, float *opre, float *lse) {
    MHE_DYNAMIC_SHARED(float, sm);
    const AttnIdx &a = f.a;
    const int h = blockIdx.y, b = blockIdx.z, t = threadIdx.x, w = t / 32, q0 = blockIdx.x * TC_FWD_ROWS;
    float *Ss = sm, *Os = Ss + TC_FWD_ROWS * TC_COLS, *Ls = Os + TC_FWD_ROWS * D;
    bf16_t *Qs = reinterpret_cast<bf16_t *>(Ls + TC_FWD_ROWS), *Ks = Qs + TC_FWD_ROWS * D, *Vs = Ks + TC_COLS * D,
           *Ps = Vs + TC_COLS * D;
    tc_stage_q<D>(Qs, TC_FWD_ROWS, q, f, b, q0, h);
    for (int e = t; e < TC_FWD_ROWS * D; e += blockDim.x) Os[e] = 0.0f;
    // This lane's row (of the block) and its half of the columns (of S and of O).
    const int r = w * 16 + tc_lane_row(), c0 = tc_lane_col0(), i = q0 + r, oc0 = (t & 1) * (D / 2);
    const bool live = i < a.T;
    const int jend = f.causal ? tc_imin(a.T, q0 + TC_FWD_ROWS) : a.T;
    float m = -INFINITY, l = 0.0f;  // running max and sum of exp(s - m), identical in both lanes
    float *srow = Ss + r * TC_COLS, *orow = Os + r * D;
    bf16_t *prow = Ps + r * TC_COLS;
    for (int j0 = 0; j0 < jend; j0 += TC_COLS) {
        const int nb = tc_imin(TC_COLS, a.T - j0);
        __syncthreads();  // the previous K, V are consumed (and Q, O are ready)
        tc_stage<D>(Ks, TC_COLS, k, f.kb, a.ldk, a.kr, b, j0, h, a, nullptr);
        tc_stage<D>(Vs, TC_COLS, v, f.vb, a.ldv, a.vr, b, j0, h, a, nullptr);
        __syncthreads();
        tc_abt<D>(Qs + w * 16 * D, Ks, Ss + w * 16 * TC_COLS);  // S = Q Kᵀ (the warp's rows)
        __syncwarp();
        float tmax = -INFINITY;
        for (int jj = c0; jj < c0 + TC_COLS / 2; jj++) {
            const float s = live && jj < nb && key_visible(a, f.causal, f.key_mask, b, i, j0 + jj)
                                ? f.scale * srow[jj] + tc_key_bias(f, b, j0 + jj, h) : -INFINITY;
            srow[jj] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        const float mnew = fmaxf(m, tmax);
        // No visible key so far: O and l are still 0, nothing to rescale.
        const float alpha = mnew > -INFINITY ? expf(m - mnew) : 1.0f;
        float psum = 0.0f;
        for (int jj = c0; jj < c0 + TC_COLS / 2; jj++) {
            float p = 0.0f, pd = 0.0f;
            if (srow[jj] > -INFINITY) {
                p = expf(srow[jj] - mnew);
                pd = p * tc_keep(f, b, h, i, j0 + jj);
            }
            psum += p;  // the normaliser sums P before dropout
            prow[jj] = __float2bfloat16(pd);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * alpha + psum;
        m = mnew;
        if (alpha != 1.0f)
            for (int c = oc0; c < oc0 + D / 2; c++) orow[c] *= alpha;
        __syncwarp();
        AccFrag acc[D / 16];
        MHE_UNROLL
        for (int c = 0; c < D / 16; c++)
            wmma::load_matrix_sync(acc[c], Os + w * 16 * D + c * 16, D, wmma::mem_row_major);
        tc_ab_acc<D>(acc, Ps + w * 16 * TC_COLS, Vs);  // O += Pd V
        MHE_UNROLL
        for (int c = 0; c < D / 16; c++)
            wmma::store_matrix_sync(Os + w * 16 * D + c * 16, acc[c], D, wmma::mem_row_major);
        __syncwarp();
    }
    // Normalise by the row sum (no visible key: P = 0, O = 0, L = inf).
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int c = oc0; c < oc0 + D / 2; c++) orow[c] *= inv;
    if ((t & 1) == 0) Ls[r] = l > 0.0f ? m + logf(l) : INFINITY;
    __syncthreads();
    for (int e = t; e < TC_FWD_ROWS * D; e += blockDim.x) {
        const int rr = e / D, c = e % D;
        if (q0 + rr >= a.T) continue;
        const size_t at = (((size_t)b * a.T + q0 + rr) * a.n + h) * D + c;
        const float o = Os[e];
        opre[at] = o;
        store_dual(out, f.outb, at, o * (f.out_scale ? f.out_scale[h * D + c] : 1.0f) + (out_shift ? out_shift[h * D + c] : 0.0f));
    }
    if (t < TC_FWD_ROWS && q0 + t < a.T) lse[((size_t)b * a.n + h) * a.T + q0 + t] = Ls[t];
}

// ---- host side ----

// S, O, L (fp32), Q, K, V, P (bf16): 157 KB at d = 64, 66 KB at 16.
static size_t tc_smem_fwd(int d) {
    return 4 * (TC_FWD_ROWS * TC_COLS + TC_FWD_ROWS * d + TC_FWD_ROWS) + 2 * (TC_FWD_ROWS * d + 2 * TC_COLS * d + TC_FWD_ROWS * TC_COLS);
}

int cuda_flash_tc_supported(Backend *be, const AttnShape *s) {
    const int d = s->qk_dim;
    return act16(be) && d == s->v_dim && (d == 16 || d == 32 || d == 64);
}

// Cost model: tensor-core FLOPs of Q Kᵀ and P V (4 d per visited (query, key) pair), CUDA-core
// FLOPs of the online softmax (~16 per pair) and of O's rescale (d per row per 32-key tile),
// K and V tiles re-read from global memory by every query tile of a (sequence, head), no L2
// reuse assumed.
void cuda_flash_tc_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                           const float *v, float *out, float *saved) {
    TcArgs f = tc_args(s);
    const size_t rows_n = (size_t)s->B * s->T * s->n_heads;
    const int d = s->qk_dim;
    const double tiles = (s->T + TC_FWD_ROWS - 1) / TC_FWD_ROWS, bn = (double)s->B * s->n_heads;
    const TileWork w = query_tiles(s->T, TC_FWD_ROWS, s->causal);
    const double tt = bn * w.pairs;
    tc_inputs(s, f, q, k, v, nullptr);
    // O is a bf16 activation: the kernel is given nullptr for the fp32 store.
    float *outw = nullptr;
    f.outb = tc_act(out);
    // Q once per head (q's head again for each head sharing it; with q_scale the scale too), K and
    // V once per query tile, Opre and out written, L.
    const double bytes = rows_n * d * tc_el(f.qb) + bn * w.reads * d * (tc_el(f.kb) + tc_el(f.vb)) +
                         4.0 * (2.0 * rows_n * d + rows_n) + (s->q_scale ? 4.0 * s->n_heads * d : 0.0);
    const MheCost cost = with_act_store(MheCost{tt * 4.0 * d, tt * (16.0 + (double)d / TC_COLS), bytes, 0, tiles * bn},
                                        f.outb, outw, (double)rows_n * d);
    dim3 grid((unsigned)tiles, (unsigned)s->n_heads, (unsigned)s->B);
    float *lse = saved, *opre = saved + rows_n;
    cudaStream_t st = cuda_stream(be);
    if (d == 16) {
        tc_opt_in(flash_tc_forward_kernel<16>, tc_smem_fwd(16));
        MHE_LAUNCH(flash_tc_forward_kernel<16>, grid, TC_FWD_THREADS, tc_smem_fwd(16), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    } else if (d == 32) {
        tc_opt_in(flash_tc_forward_kernel<32>, tc_smem_fwd(32));
        MHE_LAUNCH(flash_tc_forward_kernel<32>, grid, TC_FWD_THREADS, tc_smem_fwd(32), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    } else {
        tc_opt_in(flash_tc_forward_kernel<64>, tc_smem_fwd(64));
        MHE_LAUNCH(flash_tc_forward_kernel<64>, grid, TC_FWD_THREADS, tc_smem_fwd(64), st, cost)(f, q, k, v, s->out_shift, outw, opre, lse);
    }
    CUDA_CHECK_LAUNCH();
}
