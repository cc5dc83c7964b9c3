// AMX products of the model's linear layers (cpu_amx_linear.c), on the tiles and packs of
// cpu_amx.h; the CPU backend routes bf16 products here (cpu_gemm.c) at the avx512 level of a CPU
// with AMX.  Compiled once, like cpu_amx.c; callers check cpu_amx_available() first.
#ifndef MHE_KERNELS_CPU_AMX_LINEAR_H
#define MHE_KERNELS_CPU_AMX_LINEAR_H

#include <stddef.h>
#include <stdint.h>

// C [M, N] fp32 (row stride ldc) = A^T B (+ C when accumulate) for A [K, M] and B [K, N] bf16
// (row strides lda, ldb): the linear layers' weight gradient dW = dy^T x, whose sum runs over the
// tokens.  oneDNN 2.6 ran it at ~1,100-1,350 GFLOP/s on 2 AMX threads against ~2,000 for x W^T.
// N a multiple of 16, any K (zero-padded to 32 per chunk), any M with A's rows readable up to M
// rounded up to 16 (lda >= that; the columns past M are read, never used).  Runs its own OpenMP team of
// `threads` (call it from outside a parallel region); scratch holds cpu_amx_gemm_tn_scratch()
// bf16 values, 64-byte aligned.  colsum (may be NULL): the bias gradient, colsum[m] = (colsum[m]
// when colsum_acc) + sum_k A[k][m], summed as A^T is made rather than in a pass of its own.
size_t cpu_amx_gemm_tn_scratch(int M, int N, int threads);
void cpu_amx_gemm_tn(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
                     int accumulate, float *C, size_t ldc, float *colsum, int colsum_acc, uint16_t *scratch,
                     int threads);

// C [M, N] bf16 (row stride ldc) = A [M, K] B + bias (+ C when accumulate), B = W^T for W [N, K]
// (w_rows_n: the forward's x W^T) or B = W for W [K, N] (the backward's dy W), W bf16 (row
// stride ldw); bias [N] fp32 or NULL.  fp32 sums, rounded once to nearest even (fp32 subnormals
// flushed to 0).  N a multiple of 16, any K and M.  W is packed into scratch
// (cpu_amx_linear_scratch() bf16 values, 64-byte aligned) by the team of `threads`, which then
// splits the rows; call it outside a parallel region.
size_t cpu_amx_linear_scratch(int M, int N, int K, int threads);
void cpu_amx_linear(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *W, size_t ldw, int w_rows_n,
                    const float *bias, int accumulate, uint16_t *C, size_t ldc, uint16_t *scratch, int threads);

#endif
