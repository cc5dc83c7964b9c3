// defines: the deterministic two-stage column sums (stage 1 in each caller, cuda_colsum.cu stage 2).
// Column sums over rows (the gradients of per-column parameters: LayerNorm's gamma and beta, the
// MHE head embeddings) that use the whole GPU and stay deterministic.
//
// One thread per column (the first version) launches C threads (768 for BERT-base): three of
// an H100's 132 SMs, each thread walking all N rows, so the pass runs at a few percent of the
// memory bandwidth.  Here stage 1 gives each block 32 columns x COLSUM_ROWS rows (a 32 x 8
// thread tile: a warp reads 32 consecutive columns of one row, coalesced; the 8 row groups are
// added in a fixed order in shared memory) and writes one partial per (row chunk, column);
// stage 2 adds each column's chunks in a fixed order (cuda_colsum.cu).  No atomics, so a sum
// never depends on scheduling; partial sums are also shorter chains than one N-long float sum.
// LayerNorm's backward writes its own partials (one per row chunk, while computing dx) and
// uses stage 2 only.
//
// Each op supplies `Vals`: vals(r, c, &a, &b) gives the row's two contributions to column c
// (e.g. dy·x̂ and dy); the sums are added into outA / outB (either may be NULL).
#ifndef MHE_KERNELS_CUDA_COLSUM_H
#define MHE_KERNELS_CUDA_COLSUM_H

#include "kernels/cuda/cuda_internal.h"

#define COLSUM_ROWS 256
#define COLSUM_TX 32
#define COLSUM_TY 8

template <typename Vals>
__global__ void colsum2_partials_kernel(Vals f, int N, int C, float *partials) {
    MHE_SHARED(float, sa, [COLSUM_TY][COLSUM_TX]);
    MHE_SHARED(float, sb, [COLSUM_TY][COLSUM_TX]);
    const int tx = threadIdx.x % COLSUM_TX, ty = threadIdx.x / COLSUM_TX;
    const int c = blockIdx.x * COLSUM_TX + tx, chunk = blockIdx.y;
    const int r0 = chunk * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
    float a = 0, b = 0;
    if (c < C)
        for (int r = r0 + ty; r < r1; r += COLSUM_TY) {
            float va, vb;
            f.vals(r, c, &va, &vb);
            a += va;
            b += vb;
        }
    sa[ty][tx] = a;
    sb[ty][tx] = b;
    __syncthreads();
    if (ty == 0 && c < C) {
        for (int k = 1; k < COLSUM_TY; k++) {
            a += sa[k][tx];
            b += sb[k][tx];
        }
        const size_t chunks = gridDim.y;
        partials[(size_t)chunk * C + c] = a;
        partials[(chunks + chunk) * C + c] = b;
    }
}

// Stage 2, shared with the fused LayerNorm backward (cuda_layernorm.cu): outA[c] += Σ_k pa[k·C + c],
// outB[c] += Σ_k pb[k·C + c] over k < chunks (either output may be NULL; its partials are then
// not read), always in the same order (colsum.cu).  Records its own cost.  With deferral on
// (cuda_colsum.cu) it only queues the sum: it is added by the next cuda_colsum_flush, which runs
// before any op reads or writes an output — so pa, pb must come from cuda_colsum_space.
void cuda_colsum2_finish(Backend *be, const float *pa, const float *pb, int chunks, int C, float *outA,
                         float *outB);

// Stage 2 for a product-split gradient (mhe_mul's query scale m = f ⊙ g, ops.h
// head_expand_backward_prod): with s[c] = Σ_k pa[k·C + c] (the same order as cuda_colsum2_finish),
// df[c] += s·g[c] and dg[c] += s·f[c] (either may be NULL).  Deferred as above (f and g are then
// read at the flush, which also runs before any op writes them).
void cuda_colsum2_finish_prod(Backend *be, const float *pa, int chunks, int C, const float *f, const float *g,
                              float *df, float *dg);

// Room for `floats` partials of stage 1: with deferral, arena space kept until the flush that
// finishes them; otherwise the grow-only scratch, valid until the next column sum.
float *cuda_colsum_space(Backend *be, size_t floats);
// Deferral (MHE_CUDA_DEFER=0: off; bf16 mode): touch is called by every reported fp32 write
// (cuda_fp32_wrote) and flushes when [p, p + bytes)
// meets a waiting sum's outputs or factors; flush finishes every waiting sum in one launch, and
// the ops that read fp32 memory only (download, copy, the fp32 elementwise ops, sum_squares,
// the optimizer's) call it first — with bf16 activations those are the gradients' only readers.
// The bias gradients of cuda_act_linear_dw wait here too (one partial: BGRADB's sum).
void cuda_colsum_defer_init(Backend *be);
void cuda_colsum_defer_destroy(Backend *be);
void cuda_colsum_touch(Backend *be, const void *p, size_t bytes);
void cuda_colsum_flush(Backend *be);

// Stage 1 alone: the partials of a(r, c) (chunks·C floats) then of b(r, c) (as many), in
// cuda_colsum_space; *chunks receives their count.  stage1: the cost of reading the
// rows (the partials' bytes are added here).  N, C > 0.
template <typename Vals>
static float *cuda_colsum2_partials(Backend *be, Vals f, int N, int C, MheCost stage1, int *chunks) {
    *chunks = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    const size_t np = 2 * (size_t)*chunks * C;
    float *partials = cuda_colsum_space(be, np);
    const dim3 grid((unsigned)((C + COLSUM_TX - 1) / COLSUM_TX), (unsigned)*chunks);
    stage1.bytes += 4.0 * (double)np;
    MHE_LAUNCH(colsum2_partials_kernel<Vals>, grid, COLSUM_TX * COLSUM_TY, 0, cuda_stream(be), stage1)(f, N, C, partials);
    CUDA_CHECK_LAUNCH();
    return partials;
}

// outA[c] += Σ_r a(r, c), outB[c] += Σ_r b(r, c) (either output may be NULL).  stage1 as above.
template <typename Vals>
static void cuda_colsum2(Backend *be, Vals f, int N, int C, float *outA, float *outB, MheCost stage1) {
    if (N <= 0 || C <= 0 || (!outA && !outB)) return;
    int chunks = 0;
    float *partials = cuda_colsum2_partials(be, f, N, C, stage1, &chunks);
    cuda_colsum2_finish(be, partials, partials + (size_t)chunks * C, chunks, C, outA, outB);
}

#endif
