// AMX bf16 products for the fused attention core (cpu_amx.c): C (fp32) = alpha A B (+ C), A
// bf16 row-major, B packed once per head into AMX's pair-interleaved tiles.  At d = 32 the core's
// per-head products are too small for oneDNN 2.6's brgemm to reach the tile units' rate (8-16 µs
// per product, 523-1,075 GFLOP/s); here the packed K and V stay in L1/L2 across a sequence's
// query blocks and one call is one loop of tile loads and dot products.
//
// Compiled once (not per ISA level): the functions carry their own target attributes and run
// only where cpu_amx_available() said yes, which the avx512 level alone asks.
#ifndef MHE_KERNELS_CPU_AMX_H
#define MHE_KERNELS_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

// 1 when this CPU has AMX-TILE and AMX-BF16, the kernel granted the process its tile state
// (arch_prctl ARCH_REQ_XCOMP_PERM), and MHE_CPU_AMX is not 0.  Decided once per process.
int cpu_amx_available(void);

// The packed B operand: column blocks of 16, each holding its k blocks of 32 (rows of pairs),
// 512 bf16 (1 KiB, one tile) per (column block, k block): element (p, j, e) of block (nb, kb)
// is B[kb*32 + 2p + e][nb*16 + j], zero past the matrix.  kb_total = ceil(K / 32) is the
// column blocks' stride; a product may use a prefix of the k blocks (causal: the keys so far).
static inline size_t cpu_amx_packed_elems(int K, int N) {
    return (size_t)((K + 31) / 32) * 32 * (size_t)((N + 15) / 16) * 16;
}
// B = X^T for X [n rows, k columns] (row stride ld): the scores' K^T, dP's V^T.
void cpu_amx_pack_bt(const uint16_t *X, size_t ld, int n, int k, uint16_t *out);
// B = X for X [k rows, n columns] (row stride ld): P V's V, dQ's K.
void cpu_amx_pack_b(const uint16_t *X, size_t ld, int k, int n, uint16_t *out);

// out [cols, ldo] = X^T for X [rows, cols] (row stride ld), zero from column rows to ldo (ldo >=
// rows): the A operands Q^T and G^T of the backward's dK^T and dV^T, and dy^T of the weight
// gradient (cpu_amx_linear.c, its K chunks zero-padded to 32).
void cpu_amx_transpose(const uint16_t *X, size_t ld, int rows, int cols, uint16_t *out, size_t ldo);

// dst [cols, rows] (row stride ldd) = X^T for X [rows, cols] fp32 (row stride ld): the backward's
// dK^T, dV^T sums back to rows of keys at the hand-over.
void cpu_amx_transpose_f32(const float *X, size_t ld, int rows, int cols, float *dst, size_t ldd);

// C [M, N] (row stride ldc) = alpha A [M, K] (row stride lda) B [K, N] (+ C when accumulate).
// M and N multiples of 16, K a multiple of 32; Bp packed with kb_total k blocks per column
// block.  Products accumulate in fp32.
void cpu_amx_gemm(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                  int kb_total, int accumulate, float *C, size_t ldc);

// The same with B packed k-block-major: block (nb, kb) at (kb * nb_total + nb) * 512, as the
// fused core's element rows write the dropped P and dS (a row pair's 16-key groups 1 KiB apart).
void cpu_amx_gemm_kmajor(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                         int nb_total, int accumulate, float *C, size_t ldc);

#endif
