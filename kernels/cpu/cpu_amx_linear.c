// AMX products of the model's linear layers (cpu_amx_linear.h): the weight gradient A^T B and the
// activations' A B with bf16 results.  Built on cpu_amx.c's tiles and packs.
#include "kernels/cpu/cpu_amx_linear.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_amx_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <omp.h>

// ---- A^T B: the weight gradient ----

// A's columns m .. m + rows - 1, its rows k0 .. k0 + kc - 1, into out [rows, ldo] (k along a row),
// zero from kc to ldo: the transposed product's A tiles.  16 rows of A per gather of pairs, the
// rows outer so that each gather's 16 lines serve the next 31 column pairs from L1 (columns
// outer ran the whole 512 x 512 x 4096 product 30% slower).
__attribute__((target("avx512f"))) static void transpose_cols(const uint16_t *A, size_t lda, int kc, int rows,
                                                              uint16_t *out, int ldo) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)(lda * 2)));
    int k = 0;
    for (; k + 16 <= kc; k += 16)
        for (int c = 0; c < rows; c += 2) {
            const __m512i v = _mm512_i32gather_epi32(idx, (const void *)(A + (size_t)k * lda + c), 1);
            _mm256_storeu_si256((__m256i *)(out + (size_t)c * ldo + k), _mm512_cvtepi32_epi16(v));
            _mm256_storeu_si256((__m256i *)(out + (size_t)(c + 1) * ldo + k),
                                _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
        }
    for (int c = 0; c < rows; c++) {
        for (int r = k; r < kc; r++) out[(size_t)c * ldo + r] = A[(size_t)r * lda + c];
        for (int r = kc; r < ldo; r++) out[(size_t)c * ldo + r] = 0;
    }
}

// sums[c] += the bf16 values of row c of X [rows, ld] over its first n (a multiple of 32; zeros
// past the data): the bias gradient's column sums read from A^T while it is in L2.  fp32 lane
// sums of n / 16 <= 32 terms, then double: the order depends on the chunking, not the threads.
__attribute__((target("avx512f"))) static void row_sums(const uint16_t *X, size_t ld, int rows, int n, double *sums) {
    for (int c = 0; c < rows; c++) {
        __m512 acc = _mm512_setzero_ps();
        for (int k = 0; k < n; k += 16) {
            const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(X + (size_t)c * ld + k)));
            acc = _mm512_add_ps(acc, _mm512_castsi512_ps(_mm512_slli_epi32(h, 16)));
        }
        sums[c] += (double)_mm512_reduce_add_ps(acc);
    }
}

// K chunks of tn_chunk(N) rows: one chunk of B packed (up to 2 MiB, L2) serves every row block
// of C.  Within a chunk a thread takes its C rows TN_GROUP at a time, their A^T (128 KiB) in L2,
// and walks the column blocks with each 32-column B panel (32 KiB) in L1 across the group's row
// blocks.  Chunks of 128 rows ran the 512 x 2048 product at 1,230 GFLOP/s against 1,640 at 512
// (C is loaded and stored once per chunk); 256 and 512 measured alike on the narrower shapes.
#define TN_GROUP 128
static int tn_chunk(int N) { return N <= 2048 ? 512 : 256; }

size_t cpu_amx_gemm_tn_scratch(int M, int N, int threads) {
    const int kc = tn_chunk(N);
    // The packed chunks, each thread's A^T, then the column sums in double (4 bf16 slots each).
    return 2 * (size_t)kc * N + (size_t)threads * TN_GROUP * kc + 4 * (size_t)M;
}

void cpu_amx_gemm_tn(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
                     int accumulate, float *C, size_t ldc, float *colsum, int colsum_acc, uint16_t *scratch,
                     int threads) {
    if (M % 16 || N % 16 || K <= 0)
        mhe_fatal("cpu_amx_gemm_tn: %d x %d x %d: expected M, N multiples of 16 and K > 0", M, N, K);
    const int kc_max = tn_chunk(N), chunks = (K + kc_max - 1) / kc_max, mblocks = (M + 31) / 32;
    const size_t bsz = (size_t)kc_max * N;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        cpu_amx_configure();
        uint16_t *at = scratch + 2 * bsz + (size_t)t * TN_GROUP * kc_max;
        double *sums = colsum ? (double *)(scratch + 2 * bsz + (size_t)nt * TN_GROUP * kc_max) : NULL;
        const int mb0 = mblocks * t / nt, mb1 = mblocks * (t + 1) / nt, nbs = N / 16;
        const int m0 = mb0 * 32, m1 = mb1 * 32 < M ? mb1 * 32 : M;
        if (sums)
            for (int m = m0; m < m1; m++) sums[m] = 0;
        for (int c = 0; c < chunks; c++) {
            const int k0 = c * kc_max, kc = K - k0 < kc_max ? K - k0 : kc_max, kbs = (kc + 31) / 32;
            // Two buffers: a thread packing chunk c + 1 never meets one still reading chunk c - 1
            // (every thread passed this chunk's barrier after its last use of that buffer).
            uint16_t *bp = scratch + (size_t)(c & 1) * bsz;
            for (int nb = nbs * t / nt; nb < nbs * (t + 1) / nt; nb++)
                cpu_amx_pack_b(B + (size_t)k0 * ldb + nb * 16, ldb, kc, 16, bp + (size_t)nb * kbs * 512);
#pragma omp barrier
            const int acc = accumulate || c > 0;
            for (int g0 = mb0; g0 < mb1; g0 += TN_GROUP / 32) {
                const int g1 = g0 + TN_GROUP / 32 < mb1 ? g0 + TN_GROUP / 32 : mb1;
                const int rows = (g1 * 32 < M ? g1 * 32 : M) - g0 * 32;
                transpose_cols(A + (size_t)k0 * lda + g0 * 32, lda, kc, rows, at, kbs * 32);
                if (sums) row_sums(at, (size_t)kbs * 32, rows, kbs * 32, sums + g0 * 32);
                for (int n = 0; n < N; n += 32) {
                    const int tn = N - n >= 32 ? 2 : 1;
                    const uint16_t *B0 = bp + (size_t)(n / 16) * kbs * 512;
                    for (int r = 0; r < rows; r += 32) {
                        const int tm = rows - r >= 32 ? 2 : 1;
                        cpu_amx_block(tm, tn, kbs, 512, 1.0f, at + (size_t)r * kbs * 32, (size_t)kbs * 32, B0,
                                      B0 + (size_t)kbs * 512, acc, C + (size_t)(g0 * 32 + r) * ldc + n, ldc);
                    }
                }
            }
        }
        if (sums)
            for (int m = m0; m < m1; m++) colsum[m] = (colsum_acc ? colsum[m] : 0.0f) + (float)sums[m];
    }
}


// ---- A B with bf16 results: the forward's x W^T + b and the backward's dy W ----

// 32 x 32 fp32 results (rows 32 apart in buf) + bias (+ the bf16 values there) into bf16 rows,
// only the first `rows` rows and `cols` (16 or 32) columns.  vcvtneps2bf16 rounds to nearest
// even as cpu_bf16.h's to_bf16 does, but flushes fp32 subnormals (below 1.2e-38) to zero; the
// same rounding in integer steps (to_bf16's) made the forward at K = 512 11-25% slower than
// oneDNN, the AMX unit idling through a longer epilogue.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void store_bf16(const float *buf, int rows, int cols,
                                                                              const float *bias, int accumulate,
                                                                              uint16_t *C, size_t ldc) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c += 16) {
            __m512 v = _mm512_load_ps(buf + r * 32 + c);
            if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + c));
            uint16_t *o = C + (size_t)r * ldc + c;
            if (accumulate) {
                const __m512i old = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)o));
                v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(old, 16)));
            }
            _mm256_storeu_si256((__m256i *)o, (__m256i)_mm512_cvtneps_pbh(v));
        }
}

size_t cpu_amx_linear_scratch(int M, int N, int K, int threads) {
    (void)M;
    // The packed B, then each thread's zero-padded copy of a last partial block of 32 rows of A.
    return cpu_amx_packed_elems(K, N) + (size_t)threads * 32 * K;
}

void cpu_amx_linear(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *W, size_t ldw, int w_rows_n,
                    const float *bias, int accumulate, uint16_t *C, size_t ldc, uint16_t *scratch, int threads) {
    if (N % 16 || K % 32 || M <= 0)
        mhe_fatal("cpu_amx_linear: %d x %d x %d: expected N a multiple of 16, K of 32, M > 0", M, N, K);
    const int kbs = K / 32, nbs = N / 16, mblocks = (M + 31) / 32;
    uint16_t *bp = scratch;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        for (int nb = nbs * t / nt; nb < nbs * (t + 1) / nt; nb++) {
            uint16_t *o = bp + (size_t)nb * kbs * 512;
            if (w_rows_n) cpu_amx_pack_bt(W + (size_t)nb * 16 * ldw, ldw, 16, K, o);  // B = W^T, W [N, K]
            else cpu_amx_pack_b(W + (size_t)nb * 16, ldw, K, 16, o);                // B = W, W [K, N]
        }
#pragma omp barrier
        cpu_amx_configure();
        uint16_t *pad = scratch + cpu_amx_packed_elems(K, N) + (size_t)t * 32 * K;
        float buf[32 * 32] __attribute__((aligned(64)));
        const int mb0 = mblocks * t / nt, mb1 = mblocks * (t + 1) / nt;
        // Column chunks of B small enough to stay in L2 (K x nc x 2 bytes <= 512 KiB), then
        // groups of 4 row blocks walking a chunk's column blocks together: each 32-column panel
        // of B is read from L2 once per group, the group's rows of A (4 x 32 x K) stay in L2.
        int nc = (int)((size_t)256 * 1024 / K) / 32 * 32;
        nc = nc < 32 ? 32 : nc;
        for (int c0 = 0; c0 < N; c0 += nc)
        for (int g0 = mb0; g0 < mb1; g0 += 4) {
            const int g1 = g0 + 4 < mb1 ? g0 + 4 : mb1;
            for (int n = c0; n < N && n < c0 + nc; n += 32) {
                const int tn = N - n >= 32 ? 2 : 1;
                const uint16_t *B0 = bp + (size_t)(n / 16) * kbs * 512;
                for (int mb = g0; mb < g1; mb++) {
                    const int m = mb * 32, rows = M - m < 32 ? M - m : 32;
                    const uint16_t *a = A + (size_t)m * lda;
                    size_t la = lda;
                    if (rows < 32) {  // tiles read whole 16-row groups: the last rows from a zero-padded copy
                        if (n == c0) {
                            memset(pad, 0, (size_t)32 * K * sizeof *pad);
                            for (int r = 0; r < rows; r++) memcpy(pad + (size_t)r * K, a + (size_t)r * lda, (size_t)K * 2);
                        }
                        a = pad;
                        la = (size_t)K;
                    }
                    const int tm = rows > 16 ? 2 : 1;
                    cpu_amx_block(tm, tn, kbs, 512, 1.0f, a, la, B0, B0 + (size_t)kbs * 512, 0, buf, 32);
                    store_bf16(buf, rows, 16 * tn, bias ? bias + n : NULL, accumulate, C + (size_t)m * ldc + n, ldc);
                }
            }
        }
    }
}

#else

size_t cpu_amx_gemm_tn_scratch(int M, int N, int threads) {
    (void)M, (void)N, (void)threads;
    return 0;
}
void cpu_amx_gemm_tn(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
                     int accumulate, float *C, size_t ldc, float *colsum, int colsum_acc, uint16_t *scratch,
                     int threads) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)ldb, (void)accumulate, (void)C, (void)ldc,
        (void)colsum, (void)colsum_acc, (void)scratch, (void)threads;
    mhe_fatal("cpu_amx_gemm_tn: this build has no AMX");
}
size_t cpu_amx_linear_scratch(int M, int N, int K, int threads) {
    (void)M, (void)N, (void)K, (void)threads;
    return 0;
}
void cpu_amx_linear(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *W, size_t ldw, int w_rows_n,
                    const float *bias, int accumulate, uint16_t *C, size_t ldc, uint16_t *scratch, int threads) {
    (void)M, (void)N, (void)K, (void)A, (void)lda, (void)W, (void)ldw, (void)w_rows_n, (void)bias, (void)accumulate,
        (void)C, (void)ldc, (void)scratch, (void)threads;
    mhe_fatal("cpu_amx_linear: this build has no AMX");
}

#endif
