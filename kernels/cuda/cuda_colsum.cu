// The second stage of the column sums (cuda_colsum.h).
#include "kernels/cuda/cuda_colsum.h"

// Stage 2's blocks: 8 columns x 32 chunk groups.  A warp reads 8 consecutive columns (one 32-byte
// sector) of 4 chunks.  One thread per column would run 3 blocks at C = 768 (3 of an H100's 132
// SMs) through up to 2 x 256 partials per column (the fused LayerNorm backward's 256 chunks);
// here C / 8 blocks (96) share them.
#define FINISH_TX 8
#define FINISH_TY 32

// Group g adds chunks g, g + 32, ... in order, then thread row 0 adds the 32 groups in order:
// the same additions on every run.  Returns the column's sums on thread row 0 (c < C).
__device__ __forceinline__ void finish_sums(const float *pa, const float *pb, int chunks, int C, int c,
                                            float (*sa)[FINISH_TX], float (*sb)[FINISH_TX], float *a, float *b) {
    const int tx = threadIdx.x % FINISH_TX, ty = threadIdx.x / FINISH_TX;
    *a = 0, *b = 0;
    if (c < C)
        for (int k = ty; k < chunks; k += FINISH_TY) {
            if (pa) *a += pa[(size_t)k * C + c];
            if (pb) *b += pb[(size_t)k * C + c];
        }
    sa[ty][tx] = *a;
    sb[ty][tx] = *b;
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 1; k < FINISH_TY; k++) {
            *a += sa[k][tx];
            *b += sb[k][tx];
        }
}

__global__ void colsum2_finish_kernel(const float *pa, const float *pb, int chunks, int C, float *outA,
                                      float *outB) {
    __shared__ float sa[FINISH_TY][FINISH_TX], sb[FINISH_TY][FINISH_TX];
    const int c = blockIdx.x * FINISH_TX + threadIdx.x % FINISH_TX;
    float a, b;
    finish_sums(outA ? pa : nullptr, outB ? pb : nullptr, chunks, C, c, sa, sb, &a, &b);
    if (threadIdx.x < FINISH_TX && c < C) {
        if (outA) outA[c] += a;
        if (outB) outB[c] += b;
    }
}

__global__ void colsum2_finish_prod_kernel(const float *pa, int chunks, int C, const float *f, const float *g,
                                           float *df, float *dg) {
    __shared__ float sa[FINISH_TY][FINISH_TX], sb[FINISH_TY][FINISH_TX];
    const int c = blockIdx.x * FINISH_TX + threadIdx.x % FINISH_TX;
    float s, unused;
    finish_sums(pa, nullptr, chunks, C, c, sa, sb, &s, &unused);
    if (threadIdx.x < FINISH_TX && c < C) {
        if (df) df[c] += s * g[c];
        if (dg) dg[c] += s * f[c];
    }
}

void cuda_colsum2_finish(Backend *be, const float *pa, const float *pb, int chunks, int C, float *outA,
                         float *outB) {
    if (chunks <= 0 || C <= 0 || (!outA && !outB)) return;
    const double outs = (outA != nullptr) + (outB != nullptr), np = outs * chunks * C;
    const unsigned blocks = (unsigned)((C + FINISH_TX - 1) / FINISH_TX);
    // Reads the partials of each output, reads and writes the output (+=).
    MHE_LAUNCH(colsum2_finish_kernel, blocks, FINISH_TX * FINISH_TY, 0, cuda_stream(be),
               mhe_cost_blocks(np, 4.0 * np + 8.0 * outs * C, blocks))(pa, pb, chunks, C, outA, outB);
    CUDA_CHECK_LAUNCH();
}

void cuda_colsum2_finish_prod(Backend *be, const float *pa, int chunks, int C, const float *f, const float *g,
                              float *df, float *dg) {
    if (chunks <= 0 || C <= 0 || (!df && !dg)) return;
    const double outs = (df != nullptr) + (dg != nullptr), np = (double)chunks * C;
    const unsigned blocks = (unsigned)((C + FINISH_TX - 1) / FINISH_TX);
    // Reads the partials once, per output its factor and the output (+=), writes the output.
    MHE_LAUNCH(colsum2_finish_prod_kernel, blocks, FINISH_TX * FINISH_TY, 0, cuda_stream(be),
               mhe_cost_blocks(np + 2.0 * outs * C, 4.0 * np + 12.0 * outs * C, blocks))(pa, chunks, C, f, g, df, dg);
    CUDA_CHECK_LAUNCH();
}
