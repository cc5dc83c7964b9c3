// The AMX products of the fused attention core (kernels/cpu/cpu_amx.h) against a double loop
// over the same bf16 operands: both packings (B = X^T, B = X) and the k-block-major layout,
// whole and partial tiles (M, N multiples of 16 but not of 32, K and N past a pack's edge,
// strided and odd leading dimensions), alpha, accumulation, and a prefix of a pack's k blocks
// (the causal case); the weight gradient's transposed product A^T B.  Skipped where the CPU or the
// kernel gives no AMX.
// Tolerance: |C - oracle| <= 1e-5 (|C| + 1) elementwise: the products of two bf16 values are
// exact in fp32, so only the fp32 accumulation order differs (K <= 512 terms of size ~1; the
// transposed product, up to 1,100 terms, 3e-5).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_amx_linear.h"

static float bf(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint16_t *random_bf16(size_t n, uint64_t seed) {
    uint16_t *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 3, 1);
    for (size_t i = 0; i < n; i++) {
        const float f = (float)rng_next_normal(&r);
        uint32_t u;
        memcpy(&u, &f, sizeof u);
        x[i] = (uint16_t)(u >> 16);
    }
    return x;
}

// C [M, N] = alpha A B (+ C); bt: B = X^T with X [N, Kx] (else X [Kx, N]).  K < Kx: the product
// reads the first K/32 k blocks of a pack of Kx; K > Kx: the pack's zero padding.
static void check(int M, int N, int K, int Kx, int bt, float alpha, int acc, size_t pad) {
    const size_t lda = (size_t)K + pad, ldc = (size_t)N + pad, ldx = (size_t)(bt ? Kx : N) + pad;
    const size_t xrows = (size_t)(bt ? N : Kx);
    uint16_t *A = random_bf16((size_t)M * lda, 1 + (uint64_t)M), *X = random_bf16(xrows * ldx, 2 + (uint64_t)N);
    uint16_t *Bp = mhe_malloc(cpu_amx_packed_elems(Kx, N) * sizeof *Bp);
    float *C = mhe_malloc((size_t)M * ldc * sizeof *C), *want = mhe_malloc((size_t)M * N * sizeof *want);
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = (float)((int)(i % 13) - 6) * 0.25f;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = 0;
            for (int k = 0; k < K && k < Kx; k++)  // past Kx the pack holds zeros
                sum += (double)bf(A[m * lda + k]) * bf(bt ? X[n * ldx + k] : X[k * ldx + n]);
            want[(size_t)m * N + n] = (float)(alpha * sum + (acc ? C[m * ldc + n] : 0.0));
        }
    if (bt) cpu_amx_pack_bt(X, ldx, N, Kx, Bp);
    else cpu_amx_pack_b(X, ldx, Kx, N, Bp);
    cpu_amx_gemm(M, N, K, alpha, A, lda, Bp, (Kx + 31) / 32, acc, C, ldc);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const double w = want[(size_t)m * N + n], e = fabs(C[m * ldc + n] - w) / (fabs(w) + 1);
            worst = e > worst ? e : worst;
        }
    print_message("M=%d N=%d K=%d of %d %s alpha=%g acc=%d pad=%zu: worst %.2e\n", M, N, K, Kx, bt ? "X^T" : "X",
                  alpha, acc, pad, worst);
    assert_true(worst <= 1e-5);
    free(A), free(X), free(Bp), free(C), free(want);
}

static void test_products(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    // The core's shapes: scores (K = d), P V and dQ (K = keys), dK^T / dV^T (K = rows).
    check(128, 512, 32, 32, 1, 1.0f, 0, 0);
    check(128, 512, 64, 64, 1, 1.0f, 0, 3);
    check(128, 32, 512, 512, 0, 1.0f, 0, 0);
    check(128, 64, 512, 512, 0, 0.125f, 1, 1);
    check(32, 256, 128, 128, 0, 0.17677669f, 1, 0);
    // Partial tiles: M and N of 16 past a 32 block; packs of X with N and Kx off the 16 / 32 grid.
    check(48, 80, 64, 64, 1, 1.0f, 1, 5);
    check(16, 16, 32, 32, 0, 0.5f, 1, 0);
    check(32, 48, 96, 96, 0, 1.0f, 1, 7);
    check(16, 48, 64, 40, 1, 2.0f, 0, 1);   // X^T has 40 columns: k blocks zero-padded
    check(32, 16, 64, 50, 0, 1.0f, 0, 2);   // X has 50 rows: zero rows past them
    check(64, 32, 32, 32, 1, -1.5f, 1, 0);
    // A prefix of the k blocks (causal: the keys up to a block's last row).
    check(64, 32, 128, 512, 0, 1.0f, 0, 0);
    check(32, 96, 64, 256, 0, 0.25f, 1, 0);
}

// cpu_amx_gemm_kmajor with B packed here by cpu_amx.h's definition, k-block-major: element
// (p, j, e) of block (nb, kb) at (kb * nbs + nb) * 512 + (p * 16 + j) * 2 + e is X[kb*32 + 2p + e]
// [nb*16 + j] (as the fused core's element rows write the dropped P and dS).
static void test_kmajor(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    const int M = 64, N = 96, K = 128, nbs = N / 16, kbs = K / 32;
    uint16_t *A = random_bf16((size_t)M * K, 31), *X = random_bf16((size_t)K * N, 32);
    uint16_t *Bp = mhe_malloc((size_t)K * N * sizeof *Bp);
    for (int kb = 0; kb < kbs; kb++)
        for (int nb = 0; nb < nbs; nb++)
            for (int p = 0; p < 16; p++)
                for (int j = 0; j < 16; j++)
                    for (int e = 0; e < 2; e++)
                        Bp[((size_t)kb * nbs + nb) * 512 + (p * 16 + j) * 2 + e] = X[(size_t)(kb * 32 + 2 * p + e) * N + nb * 16 + j];
    float *C = mhe_calloc((size_t)M * N, sizeof *C);
    for (int pass = 0; pass < 2; pass++) cpu_amx_gemm_kmajor(M, N, K, 0.5f, A, K, Bp, nbs, 1, C, N);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = 0;
            for (int k = 0; k < K; k++) sum += (double)bf(A[(size_t)m * K + k]) * bf(X[(size_t)k * N + n]);
            const double e = fabs(C[(size_t)m * N + n] - sum) / (fabs(sum) + 1);  // two passes of 0.5
            worst = e > worst ? e : worst;
        }
    print_message("k-block-major %d x %d x %d, accumulated twice at alpha 0.5: worst %.2e\n", M, N, K, worst);
    assert_true(worst <= 1e-5);
    free(A), free(X), free(Bp), free(C);
}

// The transposes (bf16, fp32) against the plain index map: whole 16-row groups with even and odd widths,
// a tail of rows, a padded leading dimension, and bf16 rows padded with zeros.
static void test_transpose(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    const int shapes[][3] = {{128, 64, 64}, {128, 32, 37}, {48, 33, 40}, {20, 6, 6}, {7, 5, 9}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const int rows = shapes[t][0], cols = shapes[t][1];
        const size_t ld = (size_t)shapes[t][2];
        uint16_t *x = random_bf16((size_t)rows * ld, 9 + t), *o = mhe_malloc((size_t)rows * cols * sizeof *o);
        cpu_amx_transpose(x, ld, rows, cols, o, (size_t)rows);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) assert_int_equal(o[(size_t)c * rows + r], x[(size_t)r * ld + c]);
        // Into rows padded to the next 32 plus 32, over a non-zero fill: the padding written as zeros.
        const size_t ldo = ((size_t)rows + 31) / 32 * 32 + 32;
        uint16_t *op = mhe_malloc((size_t)cols * ldo * sizeof *op);
        for (size_t i = 0; i < (size_t)cols * ldo; i++) op[i] = 0x3f80;
        cpu_amx_transpose(x, ld, rows, cols, op, ldo);
        for (int c = 0; c < cols; c++)
            for (size_t r = 0; r < ldo; r++)
                assert_int_equal(op[(size_t)c * ldo + r], r < (size_t)rows ? x[r * ld + (size_t)c] : 0);
        free(op);
        // fp32, into rows ldd = rows + 3 apart.
        float *xf = mhe_malloc((size_t)rows * ld * sizeof *xf), *of = mhe_malloc((size_t)cols * (rows + 3) * sizeof *of);
        for (size_t i = 0; i < (size_t)rows * ld; i++) xf[i] = (float)x[i] - 7.0f;
        cpu_amx_transpose_f32(xf, ld, rows, cols, of, (size_t)rows + 3);
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) assert_true(of[(size_t)c * (rows + 3) + r] == xf[(size_t)r * ld + c]);
        free(x), free(o), free(xf), free(of);
    }
}

// cpu_amx_gemm_tn, C = A^T B (+ C) with A [K, M], B [K, N] (the weight gradient dy^T x), against
// a double loop: several K chunks with a tail off the 16 and 32 grids, M and N of 16 past a 32
// block, M off the 16 grid, padded leading dimensions, accumulation, and teams of 1-3 threads
// splitting the rows.
static void check_tn(int M, int N, int K, size_t pad, int acc, int threads) {
    const size_t lda = (size_t)M + pad, ldb = (size_t)N + 2 * pad, ldc = (size_t)N + pad;
    uint16_t *A = random_bf16((size_t)K * lda, 40 + (uint64_t)M), *B = random_bf16((size_t)K * ldb, 41 + (uint64_t)N);
    // 32 rows past M hold a sentinel: the rows past M of a partial block must not be stored.
    float *C = mhe_malloc((size_t)(M + 32) * ldc * sizeof *C), *want = mhe_malloc((size_t)M * N * sizeof *want);
    for (size_t i = 0; i < (size_t)(M + 32) * ldc; i++) C[i] = i < (size_t)M * ldc ? (float)((int)(i % 11) - 5) * 0.5f : 7.0f;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = acc ? C[m * ldc + n] : 0.0;
            for (int k = 0; k < K; k++) sum += (double)bf(A[k * lda + m]) * bf(B[k * ldb + n]);
            want[(size_t)m * N + n] = (float)sum;
        }
    // The fused bias gradient: colsum[m] (+)= sum_k A[k][m].
    float *colsum = mhe_malloc((size_t)M * sizeof *colsum);
    double *want_sum = mhe_malloc((size_t)M * sizeof *want_sum);
    for (int m = 0; m < M; m++) {
        colsum[m] = (float)(m % 7) - 3.0f;
        want_sum[m] = acc ? colsum[m] : 0.0;
        for (int k = 0; k < K; k++) want_sum[m] += bf(A[k * lda + m]);
    }
    uint16_t *scratch = aligned_alloc(64, (cpu_amx_gemm_tn_scratch(M, N, threads) * 2 + 63) / 64 * 64);
    cpu_amx_gemm_tn(M, N, K, A, lda, B, ldb, acc, C, ldc, colsum, acc, scratch, threads);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const double w = want[(size_t)m * N + n], e = fabs(C[m * ldc + n] - w) / (fabs(w) + 1);
            worst = e > worst ? e : worst;
        }
    double worst_sum = 0;
    for (int m = 0; m < M; m++) {
        const double e = fabs(colsum[m] - want_sum[m]) / (fabs(want_sum[m]) + 1);
        worst_sum = e > worst_sum ? e : worst_sum;
    }
    for (size_t i = (size_t)M * ldc; i < (size_t)(M + 32) * ldc; i++) assert_true(C[i] == 7.0f);
    print_message("A^T B: M=%d N=%d K=%d pad=%zu acc=%d threads=%d: worst %.2e, column sums %.2e\n", M, N, K, pad,
                  acc, threads, worst, worst_sum);
    assert_true(worst_sum <= 1e-6);  // fp32 lane sums of <= 32 terms, then double
    // Up to 1,100 fp32 additions of partial sums ~33: 8e-6 measured at K = 1,100; a wrong chunk,
    // tail or row split is off by O(1).
    assert_true(worst <= 3e-5);
    free(A), free(B), free(C), free(want), free(scratch), free(colsum), free(want_sum);
}

static void test_transposed_products(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    check_tn(96, 80, 1100, 0, 0, 2);    // three 512-row chunks, the last 76 rows
    check_tn(160, 64, 64, 3, 1, 3);     // one chunk; 5 row blocks over 3 threads
    check_tn(144, 48, 530, 1, 1, 1);    // a 16-row block after 128 (a group's partial tile)
    check_tn(16, 16, 37, 0, 1, 2);      // fewer row blocks than threads; K under one tile
    check_tn(32, 2080, 300, 5, 0, 2);   // N past 2048: 256-row chunks
    check_tn(90, 48, 700, 6, 1, 2);     // M off the 16 grid (the head's vocabulary), rows read to 96
    check_tn(26, 32, 100, 6, 0, 3);     // one partial block, 3 threads
}

// cpu_amx_linear, C (bf16) = A B + bias (+ C) with B = W^T (W [N, K], the forward) or B = W (W
// [K, N], dx = dy W), against a double loop: rows off the 16 and 32 grids (a zero-padded last
// block), K off the 32 grid, K in chunks (past 4,096), N of 16 past a 32 block, padded strides,
// 1-3 threads.  Tolerance: rounded once to
// bf16, |C - oracle| <= half a bf16 ulp of the oracle + 1e-5 (|oracle| + 1) for the fp32 sum's
// order.
static void check_linear(int M, int N, int K, int w_rows_n, int with_bias, int acc, size_t pad, int threads) {
    const size_t lda = (size_t)K + pad, ldc = (size_t)N + 2 * pad, ldw = (size_t)(w_rows_n ? K : N) + pad;
    uint16_t *A = random_bf16((size_t)M * lda, 50 + (uint64_t)M), *W = random_bf16((size_t)(w_rows_n ? N : K) * ldw, 51);
    // C 64-byte aligned, as the backend's buffers are: results of 4 MiB and more are streamed
    // there (whole 64-byte rows), the path the large cases below take.
    uint16_t *C0 = random_bf16((size_t)M * ldc, 52), *C = aligned_alloc(64, ((size_t)M * ldc * 2 + 63) / 64 * 64);
    memcpy(C, C0, (size_t)M * ldc * 2);
    free(C0);
    float *bias = mhe_malloc((size_t)N * sizeof *bias);
    for (int n = 0; n < N; n++) bias[n] = (float)(n % 5) * 0.75f - 1.5f;
    double *want = mhe_malloc((size_t)M * N * sizeof *want);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double sum = (with_bias ? bias[n] : 0.0) + (acc ? bf(C[m * ldc + n]) : 0.0);
            for (int k = 0; k < K; k++)
                sum += (double)bf(A[m * lda + k]) * bf(w_rows_n ? W[n * ldw + k] : W[k * ldw + n]);
            want[(size_t)m * N + n] = sum;
        }
    uint16_t *scratch = aligned_alloc(64, (cpu_amx_linear_scratch(M, N, K, threads) * 2 + 63) / 64 * 64);
    cpu_amx_linear(M, N, K, A, lda, W, ldw, w_rows_n, with_bias ? bias : NULL, acc, C, ldc, scratch, threads);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const double w = want[(size_t)m * N + n];
            int ex = 0;
            if (w != 0.0) frexp(w, &ex);
            const double half_ulp = w != 0.0 ? ldexp(1.0, ex - 9) : 0.0;
            const double e = (fabs(bf(C[m * ldc + n]) - w) - half_ulp) / (1e-5 * (fabs(w) + 1));
            worst = e > worst ? e : worst;
        }
    print_message("A B -> bf16: M=%d N=%d K=%d %s bias=%d acc=%d pad=%zu threads=%d: beyond half an ulp %.2f of "
                  "the slack\n", M, N, K, w_rows_n ? "W^T" : "W", with_bias, acc, pad, threads, worst);
    assert_true(worst <= 1.0);
    free(A), free(W), free(C), free(bias), free(want), free(scratch);
}

static void test_linear_products(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    check_linear(300, 80, 96, 1, 1, 0, 0, 2);    // the forward: 9 whole blocks, a last block of 12 rows
    check_linear(70, 48, 64, 0, 0, 1, 3, 3);     // dx accumulated: 3 blocks over 3 threads, 6 rows last
    check_linear(128, 96, 512, 0, 0, 0, 1, 2);   // K of 512 in one block's sums
    check_linear(32, 16, 32, 1, 1, 1, 0, 1);     // one tile of columns
    check_linear(17, 32, 64, 1, 0, 0, 2, 2);     // fewer blocks than threads, rows 17
    check_linear(70, 48, 100, 1, 1, 1, 1, 2);    // K off the 32 grid: a k tail in place and padded
    check_linear(40, 32, 5000, 0, 0, 1, 6, 2);   // K chunked (the head's dy W, K = V) with a tail
    check_linear(64, 16, 4130, 1, 1, 0, 0, 3);   // chunked, whole row blocks only, 3 threads
    check_linear(2050, 1024, 64, 1, 1, 0, 0, 2); // 4.2 MB of results, streamed; a last block of 2 rows
    check_linear(2048, 1040, 64, 0, 0, 0, 8, 3); // streamed but for the last 16 columns of each row
    check_linear(2048, 1024, 64, 1, 0, 0, 4, 2); // rows 2,064 bytes apart: stored through the cache
}

// The entry point refuses shapes off the tile grid: exit status 1 with a message, not a wrong
// result.  Run in a child process, since mhe_fatal exits.
static int status_of(int K, int kb_total) {
    const pid_t pid = fork();
    if (pid == 0) {
        static uint16_t A[16 * 64], B[64 * 16];
        static float C[16 * 16];
        cpu_amx_gemm(16, 16, K, 1.0f, A, 64, B, kb_total, 0, C, 16);
        _exit(0);
    }
    int st = 0;
    assert_true(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}
static void test_refuses_partial_shapes(void **state) {
    (void)state;
    if (!cpu_amx_available()) skip();
    assert_int_equal(status_of(32, 1), 0);
    assert_int_equal(status_of(48, 2), 1);  // K not a multiple of 32
    assert_int_equal(status_of(64, 1), 1);  // K past the pack's k blocks
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_products),
        cmocka_unit_test(test_transpose),
        cmocka_unit_test(test_kmajor),
        cmocka_unit_test(test_transposed_products),
        cmocka_unit_test(test_linear_products),
        cmocka_unit_test(test_refuses_partial_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
