// AMX bf16 products (cpu_amx.h).  Eight tiles, all 16 rows x 64 bytes: C blocks 0-3 (a 32 x 32
// block of C), A rows 4-5, B columns 6-7.  The tile configuration is loaded at every call:
// oneDNN's brgemm loads its own between our calls on the same thread.
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_amx_tiles.h"

#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

static int decide(void) {
    if (!mhe_env_flag("MHE_CPU_AMX", 1)) return 0;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16) return 0;
    // The AMX path's element rows convert with AVX512-BF16 (every AMX CPU so far has it).
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 5) & 1)) return 0;
    // Linux hands out the 8 KiB of tile state only on request (5.16+); refused: no AMX.
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

int cpu_amx_available(void) {
    static int have = -1;  // a benign race: every thread computes the same answer
    if (have < 0) have = decide();
    return have;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} TileConfig;

__attribute__((target("amx-tile"))) void cpu_amx_configure(void) {
    TileConfig c __attribute__((aligned(64)));
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    // GCC 12 models ldtilecfg as reading the first 16 bytes only and drops the stores after
    // them; the barrier keeps them.
    __asm__ __volatile__("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
}

// Whole 16 x 16-pair blocks by 32-bit gathers (one pair of a row per lane); edges element-wise.
__attribute__((target("avx512f"))) void cpu_amx_pack_bt(const uint16_t *X, size_t ld, int n, int k,
                                                        uint16_t *out) {
    const int nbs = (n + 15) / 16, kbs = (k + 31) / 32;
    const __m512i rows = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32((int)(ld * 2)));
    for (int nb = 0; nb < nbs; nb++)
        for (int kb = 0; kb < kbs; kb++) {
            uint16_t *o = out + ((size_t)nb * kbs + kb) * 512;
            const uint16_t *x = X + (size_t)nb * 16 * ld + (size_t)kb * 32;
            if (nb * 16 + 16 <= n && kb * 32 + 32 <= k && ld * 2 * 15 < (size_t)1 << 31) {
                for (int p = 0; p < 16; p++)
                    _mm512_storeu_si512(o + p * 32, _mm512_i32gather_epi32(rows, (const void *)(x + 2 * p), 1));
                continue;
            }
            for (int p = 0; p < 16; p++)
                for (int j = 0; j < 16; j++)
                    for (int e = 0; e < 2; e++) {
                        const int r = nb * 16 + j, c = kb * 32 + 2 * p + e;
                        o[(p * 16 + j) * 2 + e] = r < n && c < k ? X[(size_t)r * ld + c] : 0;
                    }
        }
}

// Whole blocks: two rows' 16 columns widened and interleaved into one 64-byte row of pairs.  A
// stripe of 32 rows at a time (kb outer), so each source line is read once while it is in L1.
__attribute__((target("avx512f"))) void cpu_amx_pack_b(const uint16_t *X, size_t ld, int k, int n,
                                                       uint16_t *out) {
    const int nbs = (n + 15) / 16, kbs = (k + 31) / 32;
    for (int kb = 0; kb < kbs; kb++)
        for (int nb = 0; nb < nbs; nb++) {
            uint16_t *o = out + ((size_t)nb * kbs + kb) * 512;
            const uint16_t *x = X + (size_t)kb * 32 * ld + (size_t)nb * 16;
            if (nb * 16 + 16 <= n && kb * 32 + 32 <= k) {
                for (int p = 0; p < 16; p++) {
                    const __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + 2 * p * ld)));
                    const __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + (2 * p + 1) * ld)));
                    _mm512_storeu_si512(o + p * 32, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
                }
                continue;
            }
            for (int p = 0; p < 16; p++)
                for (int j = 0; j < 16; j++)
                    for (int e = 0; e < 2; e++) {
                        const int r = kb * 32 + 2 * p + e, c = nb * 16 + j;
                        o[(p * 16 + j) * 2 + e] = r < k && c < n ? X[(size_t)r * ld + c] : 0;
                    }
        }
}

// 16 rows x a pair of columns per 32-bit gather: its low halves are column c, its high halves
// column c + 1 (vpmovdw keeps the low half of each lane).  Rows outer, so that each gather's 16
// lines serve the next 31 column pairs from L1 (columns outer ran the weight gradient's whole
// 512 x 512 x 4096 product 30% slower).
__attribute__((target("avx512f"))) void cpu_amx_transpose(const uint16_t *X, size_t ld, int rows, int cols,
                                                          uint16_t *out, size_t ldo) {
    int r0 = 0;
    if (cols % 2 == 0 && ld * 2 * 15 < (size_t)1 << 31) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32((int)(ld * 2)));
        for (; r0 + 16 <= rows; r0 += 16)
            for (int c = 0; c < cols; c += 2) {
                const __m512i v = _mm512_i32gather_epi32(idx, (const void *)(X + (size_t)r0 * ld + c), 1);
                _mm256_storeu_si256((__m256i *)(out + (size_t)c * ldo + r0), _mm512_cvtepi32_epi16(v));
                _mm256_storeu_si256((__m256i *)(out + (size_t)(c + 1) * ldo + r0),
                                    _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
            }
    }
    for (int c = 0; c < cols; c++) {
        for (int r = r0; r < rows; r++) out[(size_t)c * ldo + r] = X[(size_t)r * ld + c];
        for (size_t r = (size_t)rows; r < ldo; r++) out[(size_t)c * ldo + r] = 0;
    }
}

// One 32-bit gather per 16 rows of a column.
__attribute__((target("avx512f"))) void cpu_amx_transpose_f32(const float *X, size_t ld, int rows, int cols,
                                                              float *dst, size_t ldd) {
    int r0 = 0;
    if (ld * 4 * 15 < (size_t)1 << 31) {
        const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32((int)ld));
        for (; r0 + 16 <= rows; r0 += 16)
            for (int c = 0; c < cols; c++)
                _mm512_storeu_ps(dst + (size_t)c * ldd + r0, _mm512_i32gather_ps(idx, X + (size_t)r0 * ld + c, 4));
    }
    for (int r = r0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * ldd + r] = X[(size_t)r * ld + c];
}

// One block of C: tm row tiles (1 or 2) by tn column tiles, over kbs k blocks.  Where C is taken
// as it stands (alpha 1, accumulate) the tiles load it; otherwise they start at 0 and an
// AVX-512 pass scales (and adds) through a 32 x 32 buffer in L1.
__attribute__((target("amx-tile,amx-bf16,avx512f"))) void cpu_amx_block(int tm, int tn, int kbs, size_t ks, float alpha,
                                                                        const uint16_t *A, size_t lda,
                                                                        const uint16_t *B0, const uint16_t *B1,
                                                                        int accumulate, float *C, size_t ldc) {
    const int direct = alpha == 1.0f;
    const size_t sa = lda * 2, sc = ldc * 4;
    if (direct && accumulate) {
        _tile_loadd(0, C, sc);
        if (tn == 2) _tile_loadd(1, C + 16, sc);
        if (tm == 2) _tile_loadd(2, C + 16 * ldc, sc);
        if (tm == 2 && tn == 2) _tile_loadd(3, C + 16 * ldc + 16, sc);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    if (tm == 2 && tn == 2) {
        for (int kb = 0; kb < kbs; kb++) {
            _tile_loadd(4, A + kb * 32, sa);
            _tile_loadd(5, A + 16 * lda + kb * 32, sa);
            _tile_loadd(6, B0 + kb * ks, 64);
            _tile_loadd(7, B1 + kb * ks, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
    } else {
        for (int kb = 0; kb < kbs; kb++) {
            _tile_loadd(4, A + kb * 32, sa);
            if (tm == 2) _tile_loadd(5, A + 16 * lda + kb * 32, sa);
            _tile_loadd(6, B0 + kb * ks, 64);
            if (tn == 2) _tile_loadd(7, B1 + kb * ks, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (tn == 2) _tile_dpbf16ps(1, 4, 7);
            if (tm == 2) _tile_dpbf16ps(2, 5, 6);
            if (tm == 2 && tn == 2) _tile_dpbf16ps(3, 5, 7);
        }
    }
    float buf[32 * 32] __attribute__((aligned(64)));
    float *dst = direct ? C : buf;
    const size_t ld = direct ? ldc : 32, sd = ld * 4;
    _tile_stored(0, dst, sd);
    if (tn == 2) _tile_stored(1, dst + 16, sd);
    if (tm == 2) _tile_stored(2, dst + 16 * ld, sd);
    if (tm == 2 && tn == 2) _tile_stored(3, dst + 16 * ld + 16, sd);
    if (direct) return;
    const __m512 al = _mm512_set1_ps(alpha);
    for (int r = 0; r < 16 * tm; r++)
        for (int c = 0; c < 16 * tn; c += 16) {
            __m512 v = _mm512_mul_ps(al, _mm512_load_ps(buf + r * 32 + c));
            float *o = C + (size_t)r * ldc + c;
            if (accumulate) v = _mm512_add_ps(v, _mm512_loadu_ps(o));
            _mm512_storeu_ps(o, v);
        }
}

// ks, ns: the packed B's strides (elements) between k blocks and between column blocks.
static void gemm_strided(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp, size_t ks,
                         size_t ns, int accumulate, float *C, size_t ldc) {
    cpu_amx_configure();
    const int kbs = K / 32;
    for (int m = 0; m < M; m += 32) {
        const int tm = M - m >= 32 ? 2 : 1;
        for (int n = 0; n < N; n += 32) {
            const int tn = N - n >= 32 ? 2 : 1;
            const uint16_t *B0 = Bp + (size_t)(n / 16) * ns;
            cpu_amx_block(tm, tn, kbs, ks, alpha, A + (size_t)m * lda, lda, B0, B0 + ns, accumulate, C + (size_t)m * ldc + n,
                  ldc);
        }
    }
}

void cpu_amx_gemm(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                  int kb_total, int accumulate, float *C, size_t ldc) {
    if (M % 16 || N % 16 || K % 32 || K / 32 > kb_total)
        mhe_fatal("cpu_amx_gemm: %d x %d x %d (k blocks %d): expected M, N multiples of 16, K of 32", M, N, K,
                  kb_total);
    gemm_strided(M, N, K, alpha, A, lda, Bp, 512, (size_t)kb_total * 512, accumulate, C, ldc);
}

void cpu_amx_gemm_kmajor(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                         int nb_total, int accumulate, float *C, size_t ldc) {
    if (M % 16 || N % 16 || K % 32 || N / 16 > nb_total)
        mhe_fatal("cpu_amx_gemm_kmajor: %d x %d x %d (column blocks %d): expected M, N multiples of 16, K of 32", M,
                  N, K, nb_total);
    gemm_strided(M, N, K, alpha, A, lda, Bp, (size_t)nb_total * 512, 512, accumulate, C, ldc);
}

#else

int cpu_amx_available(void) { return 0; }
void cpu_amx_pack_bt(const uint16_t *X, size_t ld, int n, int k, uint16_t *out) {
    (void)X, (void)ld, (void)n, (void)k, (void)out;
    mhe_fatal("cpu_amx_pack_bt: this build has no AMX");
}
void cpu_amx_pack_b(const uint16_t *X, size_t ld, int k, int n, uint16_t *out) {
    (void)X, (void)ld, (void)n, (void)k, (void)out;
    mhe_fatal("cpu_amx_pack_b: this build has no AMX");
}
void cpu_amx_transpose(const uint16_t *X, size_t ld, int rows, int cols, uint16_t *out, size_t ldo) {
    (void)X, (void)ld, (void)rows, (void)cols, (void)out, (void)ldo;
    mhe_fatal("cpu_amx_transpose: this build has no AMX");
}
void cpu_amx_transpose_f32(const float *X, size_t ld, int rows, int cols, float *dst, size_t ldd) {
    (void)X, (void)ld, (void)rows, (void)cols, (void)dst, (void)ldd;
    mhe_fatal("cpu_amx_transpose_f32: this build has no AMX");
}
void cpu_amx_gemm(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                  int kb_total, int accumulate, float *C, size_t ldc) {
    (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)Bp, (void)kb_total, (void)accumulate,
        (void)C, (void)ldc;
    mhe_fatal("cpu_amx_gemm: this build has no AMX");
}
void cpu_amx_gemm_kmajor(int M, int N, int K, float alpha, const uint16_t *A, size_t lda, const uint16_t *Bp,
                         int nb_total, int accumulate, float *C, size_t ldc) {
    (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)Bp, (void)nb_total, (void)accumulate,
        (void)C, (void)ldc;
    mhe_fatal("cpu_amx_gemm_kmajor: this build has no AMX");
}

#endif
