// AMX products of the model's linear layers (cpu_amx_linear.h): the weight gradient A^T B and the
// activations' A B with bf16 results.  Built on cpu_amx.c's tiles and packs.
#include "kernels/cpu/cpu_amx_linear.h"

#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_amx_tiles.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include <omp.h>

// ---- A^T B: the weight gradient ----

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
    // The packed chunks, each thread's A^T and its 32-row block of C past M, then the column sums
    // in double (4 bf16 slots each).
    return 2 * (size_t)kc * N + (size_t)threads * (TN_GROUP * kc + 2 * 32 * (size_t)N) + 4 * ((size_t)M + 16);
}

void cpu_amx_gemm_tn(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *B, size_t ldb,
                     int accumulate, float *C, size_t ldc, float *colsum, int colsum_acc, uint16_t *scratch,
                     int threads) {
    // M off the 16 grid (the vocabulary head's dW): A's rows are read up to Mp, the last block's
    // C rows go through a buffer and only those below M are stored.
    const int Mp = (M + 15) / 16 * 16;
    if (M <= 0 || N % 16 || K <= 0 || lda < (size_t)Mp)
        mhe_fatal("cpu_amx_gemm_tn: %d x %d x %d (lda %zu): expected N a multiple of 16, K > 0 and A's rows "
                  "readable to M rounded up to 16", M, N, K, lda);
    const int kc_max = tn_chunk(N), chunks = (K + kc_max - 1) / kc_max, mblocks = (Mp + 31) / 32;
    const size_t bsz = (size_t)kc_max * N, per_thread = TN_GROUP * (size_t)kc_max + 2 * 32 * (size_t)N;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        cpu_amx_configure();
        uint16_t *at = scratch + 2 * bsz + (size_t)t * per_thread;
        float *tail = (float *)(at + TN_GROUP * (size_t)kc_max);  // [32, N]: the block holding row M - 1
        double *sums = colsum ? (double *)(scratch + 2 * bsz + (size_t)nt * per_thread) : NULL;
        const int mb0 = mblocks * t / nt, mb1 = mblocks * (t + 1) / nt, nbs = N / 16;
        const int m0 = mb0 * 32, m1 = mb1 * 32 < M ? mb1 * 32 : M, last = (mblocks - 1) * 32;
        const int own_tail = Mp != M && mb0 < mb1 && mb1 == mblocks;
        if (own_tail && accumulate)
            for (int m = last; m < M; m++) memcpy(tail + (size_t)(m - last) * N, C + (size_t)m * ldc, (size_t)N * 4);
        if (sums)
            for (int m = m0; m < (mb1 * 32 < Mp ? mb1 * 32 : Mp); m++) sums[m] = 0;
        for (int c = 0; c < chunks; c++) {
            const int k0 = c * kc_max, kc = K - k0 < kc_max ? K - k0 : kc_max, kbs = (kc + 31) / 32;
            // Two buffers: a thread packing chunk c + 1 never meets one still reading chunk c - 1
            // (every thread passed this chunk's barrier after its last use of that buffer).
            uint16_t *bp = scratch + (size_t)(c & 1) * bsz;
            {
                // The thread's column blocks in one call: pack_b walks them 32 rows at a time,
                // reading each row's share in one piece (per 16-column block, 32-byte pieces
                // strided down 512 rows: 2-12% of the product at the models' shapes).
                const int nb0 = nbs * t / nt, nb1 = nbs * (t + 1) / nt;
                if (nb1 > nb0)
                    cpu_amx_pack_b(B + (size_t)k0 * ldb + nb0 * 16, ldb, kc, (nb1 - nb0) * 16,
                                   bp + (size_t)nb0 * kbs * 512);
            }
#pragma omp barrier
            const int acc = accumulate || c > 0;
            for (int g0 = mb0; g0 < mb1; g0 += TN_GROUP / 32) {
                const int g1 = g0 + TN_GROUP / 32 < mb1 ? g0 + TN_GROUP / 32 : mb1;
                const int rows = (g1 * 32 < Mp ? g1 * 32 : Mp) - g0 * 32;
                // A's columns of the group, rows k0 .. k0 + kc - 1, as A^T tiles zero-padded to 32.
                cpu_amx_transpose(A + (size_t)k0 * lda + g0 * 32, lda, kc, rows, at, (size_t)kbs * 32);
                if (sums) row_sums(at, (size_t)kbs * 32, rows, kbs * 32, sums + g0 * 32);
                for (int n = 0; n < N; n += 32) {
                    const int tn = N - n >= 32 ? 2 : 1;
                    const uint16_t *B0 = bp + (size_t)(n / 16) * kbs * 512;
                    for (int r = 0; r < rows; r += 32) {
                        const int tm = rows - r >= 32 ? 2 : 1, m = g0 * 32 + r;
                        float *dst = own_tail && m == last ? tail + n : C + (size_t)m * ldc + n;
                        cpu_amx_block(tm, tn, kbs, 512, 1.0f, at + (size_t)r * kbs * 32, (size_t)kbs * 32, B0,
                                      B0 + (size_t)kbs * 512, acc, dst, own_tail && m == last ? (size_t)N : ldc);
                    }
                }
            }
        }
        if (own_tail)
            for (int m = last; m < M; m++) memcpy(C + (size_t)m * ldc, tail + (size_t)(m - last) * N, (size_t)N * 4);
        if (sums)
            for (int m = m0; m < m1; m++) colsum[m] = (colsum_acc ? colsum[m] : 0.0f) + (float)sums[m];
    }
}

// ---- A B with bf16 results: the forward's x W^T + b and the backward's dy W ----

// fp32 results (rows ldb apart in buf) + bias (+ the bf16 values there) into bf16 rows,
// only the first `rows` rows and `cols` (16 or 32) columns.  vcvtneps2bf16 rounds to nearest
// even as cpu_bf16.h's to_bf16 does, but flushes fp32 subnormals (below 1.2e-38) to zero; the
// same rounding in integer steps (to_bf16's) made the forward at K = 512 11-25% slower than
// oneDNN, the AMX unit idling through a longer epilogue.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void store_bf16(const float *buf, size_t ldb, int rows,
                                                                              int cols, const float *bias,
                                                                              int accumulate, uint16_t *C, size_t ldc,
                                                                              int stream) {
    // Streamed rows in a loop of their own: folding them into the loop below (the two halves
    // kept, then one store or the other) made the streamed 4,096 x 512 -> 2,048 forward 3-6% slower.
    if (stream && cols == 32) {  // C 64-byte aligned, rows a multiple of 64 bytes apart
        for (int r = 0; r < rows; r++) {
            __m512 v0 = _mm512_loadu_ps(buf + (size_t)r * ldb), v1 = _mm512_loadu_ps(buf + (size_t)r * ldb + 16);
            if (bias) v0 = _mm512_add_ps(v0, _mm512_loadu_ps(bias)), v1 = _mm512_add_ps(v1, _mm512_loadu_ps(bias + 16));
            const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(v0)),
                                                 (__m256i)_mm512_cvtneps_pbh(v1), 1);
            _mm512_stream_si512((__m512i *)(C + (size_t)r * ldc), h);
        }
        return;
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c += 16) {
            __m512 v = _mm512_loadu_ps(buf + (size_t)r * ldb + c);
            if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + c));
            uint16_t *o = C + (size_t)r * ldc + c;
            if (accumulate) {
                const __m512i old = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)o));
                v = _mm512_add_ps(v, _mm512_castsi512_ps(_mm512_slli_epi32(old, 16)));
            }
            _mm256_storeu_si256((__m256i *)o, (__m256i)_mm512_cvtneps_pbh(v));
        }
}

// Results of at least this many bytes (twice a core's L2) are stored past the cache: whole
// 64-byte rows of a 32-column block, non-temporal, as oneDNN stores large results.  Stored
// through the cache they left it full of dirty lines, and the pass that read them next paid the
// write-backs: GELU over 4,096 x 2,048 right after the up-projection took 1.81-2.10 ms against
// 1.38-1.53 after a streamed one (1.57-1.65 after another GELU).  Bench steps (8 steps, three
// alternating pairs, 2026-11-29): small mhe_mul 9,557-9,747 -> 10,310-10,674 tokens/s; tiny and
// tiny512 within their noise.
#define LIN_STREAM_MIN ((size_t)4 << 20)

// K past LIN_KMAX (the vocabulary head's dy W, K = V) goes in chunks of LIN_KCHUNK, the sums kept
// in fp32 rows per thread between them.
#define LIN_KMAX 4096
#define LIN_KCHUNK 2048

static int lin_rows_per_thread(int M, int threads) { return ((M + 31) / 32 + threads - 1) / threads * 32; }

size_t cpu_amx_linear_scratch(int M, int N, int K, int threads) {
    const size_t Kp = (size_t)(K + 31) / 32 * 32;
    // The packed B; per thread a zero-padded copy of the last partial block of 32 rows of A and,
    // when K is chunked, its rows' fp32 sums (2 bf16 slots each).
    const size_t acc = K > LIN_KMAX ? 2 * (size_t)lin_rows_per_thread(M, threads) * N : 0;
    return cpu_amx_packed_elems(K, N) + (size_t)threads * (32 * Kp + acc);
}

void cpu_amx_linear(int M, int N, int K, const uint16_t *A, size_t lda, const uint16_t *W, size_t ldw, int w_rows_n,
                    const float *bias, int accumulate, uint16_t *C, size_t ldc, uint16_t *scratch, int threads) {
    if (N % 16 || K <= 0 || M <= 0)
        mhe_fatal("cpu_amx_linear: %d x %d x %d: expected N a multiple of 16, K and M > 0", M, N, K);
    const int kbs = (K + 31) / 32, kfull = K / 32, ktail = K % 32, nbs = N / 16, mblocks = (M + 31) / 32;
    const int chunked = K > LIN_KMAX, kcb = chunked ? LIN_KCHUNK / 32 : kbs;
    const size_t Kp = (size_t)kbs * 32, acc_elems = chunked ? 2 * (size_t)lin_rows_per_thread(M, threads) * N : 0;
    const int stream = !accumulate && (size_t)M * N * 2 >= LIN_STREAM_MIN && ((uintptr_t)C & 63) == 0 && ldc % 32 == 0;
    uint16_t *bp = scratch;
#pragma omp parallel num_threads(threads)
    {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        for (int nb = nbs * t / nt; nb < nbs * (t + 1) / nt; nb++) {
            uint16_t *o = bp + (size_t)nb * kbs * 512;
            if (w_rows_n) cpu_amx_pack_bt(W + (size_t)nb * 16 * ldw, ldw, 16, K, o);  // B = W^T, W [N, K]
            else cpu_amx_pack_b(W + (size_t)nb * 16, ldw, K, 16, o);                // B = W, W [K, N]
        }
        uint16_t *pad = scratch + cpu_amx_packed_elems(K, N) + (size_t)t * (32 * Kp + acc_elems);
        float *sums = (float *)(pad + 32 * Kp);  // [rows of this thread, N] when chunked
        const int mb0 = mblocks * t / nt, mb1 = mblocks * (t + 1) / nt, m0 = mb0 * 32;
        // Tiles read whole 16-row groups and 32-column k blocks: a last block of fewer than 32
        // rows reads a zero-padded copy (its k tail zero too); the others take a k tail < 32 from
        // a 32 x 32 copy.
        if (mb1 == mblocks && mb0 < mb1 && M % 32) {
            const int m = (mblocks - 1) * 32;
            memset(pad, 0, 32 * Kp * sizeof *pad);
            for (int r = m; r < M; r++) memcpy(pad + (size_t)(r - m) * Kp, A + (size_t)r * lda, (size_t)K * 2);
        }
#pragma omp barrier
        cpu_amx_configure();
        float buf[32 * 32] __attribute__((aligned(64)));
        uint16_t tailbuf[32 * 32] __attribute__((aligned(64)));
        for (int kb0 = 0; kb0 < kbs; kb0 += kcb) {
            const int kb1 = kb0 + kcb < kbs ? kb0 + kcb : kbs, last = kb1 == kbs;
            // Column chunks of B small enough to stay in L2 (this k chunk x nc x 2 bytes <= 512
            // KiB), then groups of 4 row blocks walking a chunk's column blocks together: each
            // 32-column panel of B is read from L2 once per group, the group's rows of A stay in L2.
            int nc = (int)((size_t)256 * 1024 / ((size_t)(kb1 - kb0) * 32)) / 32 * 32;
            nc = nc < 32 ? 32 : nc;
            for (int c0 = 0; c0 < N; c0 += nc)
                for (int g0 = mb0; g0 < mb1; g0 += 4) {
                    const int g1 = g0 + 4 < mb1 ? g0 + 4 : mb1;
                    for (int n = c0; n < N && n < c0 + nc; n += 32) {
                        const int tn = N - n >= 32 ? 2 : 1;
                        const uint16_t *B0 = bp + (size_t)(n / 16) * kbs * 512, *B1 = B0 + (size_t)kbs * 512;
                        for (int mb = g0; mb < g1; mb++) {
                            const int m = mb * 32, rows = M - m < 32 ? M - m : 32, tm = rows > 16 ? 2 : 1;
                            const int padded = rows < 32;
                            const uint16_t *a = padded ? pad : A + (size_t)m * lda;
                            const size_t la = padded ? Kp : lda;
                            float *dst = chunked ? sums + (size_t)(m - m0) * N + n : buf;
                            const size_t ld = chunked ? (size_t)N : 32;
                            // Whole k blocks of this chunk read in place; the k tail of the last one
                            // (K % 32 columns) from tailbuf, except in the padded copy.
                            const int kb_end = padded || !last || !ktail ? kb1 : kfull;
                            int acc = kb0 > 0;
                            if (kb_end > kb0) {
                                cpu_amx_block(tm, tn, kb_end - kb0, 512, 1.0f, a + (size_t)kb0 * 32, la,
                                              B0 + (size_t)kb0 * 512, B1 + (size_t)kb0 * 512, acc, dst, ld);
                                acc = 1;
                            }
                            if (kb_end < kb1) {
                                memset(tailbuf, 0, sizeof tailbuf);
                                for (int r = 0; r < rows; r++)
                                    memcpy(tailbuf + r * 32, a + (size_t)r * la + (size_t)kfull * 32, (size_t)ktail * 2);
                                cpu_amx_block(tm, tn, 1, 512, 1.0f, tailbuf, 32, B0 + (size_t)kfull * 512,
                                              B1 + (size_t)kfull * 512, acc, dst, ld);
                            }
                            if (last)
                                store_bf16(dst, ld, rows, 16 * tn, bias ? bias + n : NULL, accumulate,
                                           C + (size_t)m * ldc + n, ldc, stream);
                        }
                    }
                }
        }
        _mm_sfence();  // the streamed rows ordered before the team's end
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
