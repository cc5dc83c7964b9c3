// The tile machinery cpu_amx.c shares with cpu_amx_linear.c (x86-64 with GCC or Clang only;
// callers check cpu_amx_available() first).  Not for the rest of the backend: cpu_amx.h and
// cpu_amx_linear.h are the interfaces.
#ifndef MHE_KERNELS_CPU_AMX_TILES_H
#define MHE_KERNELS_CPU_AMX_TILES_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// Eight tiles of 16 rows x 64 bytes, loaded on the calling thread (oneDNN's brgemm loads its own
// configuration between our calls, so every entry point loads it again).
__attribute__((target("amx-tile"))) void cpu_amx_configure(void);

// One block of C (fp32, row stride ldc): tm row tiles (1 or 2) by tn column tiles over kbs k
// blocks of A (bf16 rows lda apart, read in place) and of the packed B column blocks B0 and B1
// (k blocks ks elements apart).  alpha 1 stores the tiles into C (after loading it when
// accumulate); any other alpha goes through an L1 buffer.
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void cpu_amx_block(int tm, int tn, int kbs, size_t ks,
                                                                        float alpha, const uint16_t *A, size_t lda,
                                                                        const uint16_t *B0, const uint16_t *B1,
                                                                        int accumulate, float *C, size_t ldc);
#endif

#endif
