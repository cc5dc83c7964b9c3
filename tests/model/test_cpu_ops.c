// CPU backend ops the model tests do not reach on their own (every transpose/stride/alpha/beta
// combination of matmul, the sgemm split across threads, the K-chunked transposed-A products and
// their transposes, matmul_batched, the optimizer ops, GELU) against naive double-precision loops.  Tolerance: relative 1e-5 per result matrix (fp32
// sums of up to ~150 products), 1e-6 for the elementwise optimizer updates.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "tests/common/test_util.h"
#include "kernels/ops.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

static float *random_floats(size_t n, uint64_t seed) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 1, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_next_normal(&r);
    return x;
}

// C = alpha op(A) op(B) + beta C in double, row-major with leading dimensions.
static void naive_matmul(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda,
                         const float *B, int ldb, double beta, const float *C0, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                double b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += a * b;
            }
            C[(size_t)i * ldc + j] = alpha * s + beta * C0[(size_t)i * ldc + j];
        }
}

static double rel_err_matrix(const float *c, const double *ref, int M, int N, int ldc) {
    double num = 0, den = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double d = c[(size_t)i * ldc + j] - ref[(size_t)i * ldc + j];
            num += d * d;
            den += ref[(size_t)i * ldc + j] * ref[(size_t)i * ldc + j];
        }
    return sqrt(num / den);
}

static void check_matmul_ld(Backend *be, int ta, int tb, int M, int N, int K, int lda, int ldb, int ldc) {
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = random_floats(na, 1), *B = random_floats(nb, 2), *C0 = random_floats(nc, 3);
    float *C = mhe_malloc(nc * sizeof *C);
    double *ref = mhe_malloc(nc * sizeof *ref);
    memcpy(C, C0, nc * sizeof *C);
    be->matmul(be, ta, tb, M, N, K, 0.7f, mat_f32(A, lda), mat_f32(B, ldb), 0.3f, out_f32(C, ldc));
    naive_matmul(ta, tb, M, N, K, 0.7, A, lda, B, ldb, 0.3, C0, ref, ldc);
    double e = rel_err_matrix(C, ref, M, N, ldc);
    if (e > 1e-5) print_message("matmul ta=%d tb=%d %dx%dx%d: rel err %.3g\n", ta, tb, M, N, K, e);
    assert_true(e <= 1e-5);
    // Columns beyond N are the caller's: untouched.
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) assert_true(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
    free(A);
    free(B);
    free(C0);
    free(C);
    free(ref);
}

static void check_matmul(Backend *be, int ta, int tb, int M, int N, int K) {
    check_matmul_ld(be, ta, tb, M, N, K, (ta ? M : K) + 3, (tb ? K : N) + 2, N + 5);
}

static void test_matmul_matches_naive_for_every_transpose(void **state) {
    Backend *be = *state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(be, ta, tb, 37, 29, 53);    // one sgemm
            check_matmul(be, ta, tb, 150, 140, 130); // split over row slices
            check_matmul(be, ta, tb, 70, 190, 90);   // split over column slices
        }
}

// The transposed-A products that cpu_gemm.c runs in K chunks of 256 over copies with padded row
// strides at oneDNN's AVX2 level (tn_wins: a side of at most 256, the wider operand's rows a
// multiple of 512 floats apart, or 512 x 512) or, with MHE_CPU_GEMM_TN=1 (ctest
// cpu_ops_match_naive_tn), always: both orientations of the shape, widths on and off the 16 and
// 128 grids (pad_ld pads them differently), K with a tail chunk, alpha and beta (the first
// chunk's beta, the others' sums).  At full ISA without the variable they are the plain product:
// the same assertions.
static void test_matmul_tn_chunked_matches_naive(void **state) {
    Backend *be = *state;
    check_matmul_ld(be, 1, 0, 1024, 40, 600, 1024, 43, 41);  // A the wide operand
    check_matmul_ld(be, 1, 0, 40, 1024, 600, 45, 1024, 1030); // B the wide one
    check_matmul_ld(be, 1, 0, 256, 128, 700, 256, 128, 131);  // both widths on the 128 grid
    check_matmul_ld(be, 1, 0, 33, 17, 513, 35, 20, 19);      // chunks 256, 256, 1
}

// The products that cpu_gemm.c runs over a row-padded copy of B at oneDNN's AVX2 level
// (pad_b_wins: A B or A Bᵀ with N <= 256, K >= 768, M >= 512, B's rows a multiple of 128 floats
// apart) or, with MHE_CPU_GEMM_TN=1, every product without a transposed A (so every matmul case
// of this file): both orientations of B, widths off the 16 grid, alpha and beta.
static void test_matmul_pad_b_matches_naive(void **state) {
    Backend *be = *state;
    check_matmul_ld(be, 0, 1, 600, 40, 800, 803, 896, 45);   // Bᵀ: rows 896 floats apart
    check_matmul_ld(be, 0, 0, 600, 100, 790, 795, 128, 101); // B: rows 128 floats apart
}

static void test_matmul_batched_matches_naive(void **state) {
    Backend *be = *state;
    const int M = 9, N = 11, K = 13, batch = 3;
    const long sa = (long)K * M + 7, sb = (long)N * K + 5, sc = (long)M * N + 3;
    float *A = random_floats((size_t)sa * batch, 4), *B = random_floats((size_t)sb * batch, 5);
    float *C0 = random_floats((size_t)sc * batch, 6), *C = mhe_malloc((size_t)sc * batch * sizeof *C);
    memcpy(C, C0, (size_t)sc * batch * sizeof *C);
    be->matmul_batched(be, 1, 0, M, N, K, 1.5f, A, M, sa, B, N, sb, 1.0f, C, N, sc, batch);
    double *ref = mhe_malloc((size_t)M * N * sizeof *ref);
    for (int i = 0; i < batch; i++) {
        naive_matmul(1, 0, M, N, K, 1.5, A + i * sa, M, B + i * sb, N, 1.0, C0 + i * sc, ref, N);
        assert_true(rel_err_matrix(C + i * sc, ref, M, N, N) <= 1e-5);
    }
    free(A);
    free(B);
    free(C0);
    free(C);
    free(ref);
}

static void test_optimizer_ops_match_formulas(void **state) {
    Backend *be = *state;
    const size_t n = 3000;
    float *p = random_floats(n, 7), *g = random_floats(n, 8), *m = random_floats(n, 9), *v = random_floats(n, 10);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += (double)g[i] * g[i];
    assert_true(fabs(be->sum_squares(be, g, n) - ss) <= 1e-12 * ss);

    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-6f, wd = 0.01f, bc1 = 0.19f, bc2 = 0.002f, gs = 0.5f;
    float *p2 = mhe_malloc(n * sizeof *p2), *m2 = mhe_malloc(n * sizeof *m2), *v2 = mhe_malloc(n * sizeof *v2);
    float *u = mhe_malloc(n * sizeof *u);
    memcpy(p2, p, n * sizeof *p);
    memcpy(m2, m, n * sizeof *m);
    memcpy(v2, v, n * sizeof *v);
    be->adamw_update(be, p2, g, m2, v2, n, b1, b2, eps, lr / bc1, 1.0f - lr * wd, sqrtf(bc2), gs);
    for (size_t i = 0; i < n; i++) {
        double gg = (double)g[i] * gs;
        double mm = b1 * (double)m[i] + (1 - b1) * gg, vv = b2 * (double)v[i] + (1 - b2) * gg * gg;
        double step = lr * ((mm / bc1) / (sqrt(vv / bc2) + eps) + wd * p[i]), pp = p[i] - step;
        assert_true(fabs(m2[i] - mm) <= 1e-6 * (fabs(b1 * m[i]) + fabs(gg)));
        assert_true(fabs(v2[i] - vv) <= 1e-6 * (fabs(vv) + 1e-6));
        // fp32 rounding of p and of the step: relative to their magnitudes, not to p - step
        // (which can cancel).
        if (fabs(p2[i] - pp) > 1e-6 * (fabs(p[i]) + fabs(step)))
            print_message("adamw %zu: %.9g vs %.9g (p %.9g step %.9g)\n", i, p2[i], pp, p[i], step);
        assert_true(fabs(p2[i] - pp) <= 1e-6 * (fabs(p[i]) + fabs(step)));
    }
    memcpy(m2, m, n * sizeof *m);
    memcpy(v2, v, n * sizeof *v);
    be->lamb_direction(be, p, g, m2, v2, u, n, b1, b2, eps, wd, bc1, bc2, gs);
    for (size_t i = 0; i < n; i++) {
        double gg = (double)g[i] * gs;
        double mm = b1 * (double)m[i] + (1 - b1) * gg, vv = b2 * (double)v[i] + (1 - b2) * gg * gg;
        double ratio = (mm / bc1) / (sqrt(vv / bc2) + eps), uu = ratio + wd * p[i];
        assert_true(fabs(u[i] - uu) <= 1e-5 * (fabs(ratio) + fabs(wd * p[i])) + 1e-6 * fabs(ratio) * (fabs(b1 * m[i]) + fabs(gg)) / (fabs(mm) + 1e-30));
    }
    free(p);
    free(g);
    free(m);
    free(v);
    free(p2);
    free(m2);
    free(v2);
    free(u);
}

// GELU (erf) forward and backward against double erf/exp on a grid over [-12, 12] (the
// backward shares one exp between erf and φ): absolute error <= 1e-6 (1 + |x|) forward and
// <= 1e-6 backward (measured 1.1e-7 and 2.3e-7; cpu_erff is within 5e-7, the rest is fp32
// rounding).
static void test_gelu_matches_double(void **state) {
    Backend *be = *state;
    const size_t n = 48001;
    float *x = mhe_malloc(n * sizeof *x), *y = mhe_malloc(n * sizeof *y), *ones = mhe_malloc(n * sizeof *ones);
    float *dx = mhe_malloc(n * sizeof *dx);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(-12.0 + 24.0 * (double)i / (double)(n - 1));
        ones[i] = 1.0f;
    }
    // The fixture's backend is fp32 (Backend.act == DT_F32): host floats are its activations.
    be->gelu_forward(be, GELU_ERF, (Act *)x, (Act *)y, n);
    be->gelu_backward(be, GELU_ERF, (Act *)x, (Act *)ones, (Act *)dx, n);
    double worst_f = 0, worst_b = 0;
    for (size_t i = 0; i < n; i++) {
        const double v = x[i], cdf = 0.5 * (1.0 + erf(v / sqrt(2.0)));
        const double fwd = v * cdf, bwd = cdf + v * exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
        const double ef = fabs(y[i] - fwd) / (1.0 + fabs(v)), eb = fabs(dx[i] - bwd);
        worst_f = ef > worst_f ? ef : worst_f;
        worst_b = eb > worst_b ? eb : worst_b;
    }
    print_message("gelu erf: worst forward %.3g (scaled by 1+|x|), backward %.3g\n", worst_f, worst_b);
    assert_true(worst_f <= 1e-6);
    assert_true(worst_b <= 1e-6);
    free(x);
    free(y);
    free(ones);
    free(dx);
}

// cpu_expf against double exp: relative error < 3e-7 on [-87, 88] (cpu_math.h's bound), 0 below
// -87.33, +inf above 88.72; cpu_expf_noover equal to cpu_expf bit for bit wherever it applies
// (x <= 88.72), so switching the softmax and loss loops to it changes no result.
static void test_expf_accuracy_and_noover(void **state) {
    (void)state;
    double worst = 0;
    long differ = 0;
    for (long i = 0; i <= 2000000; i++) {
        const float x = (float)(-100.0 + 188.72 * (double)i / 2000000.0);
        const float e = cpu_expf(x), en = cpu_expf_noover(x);
        if (memcmp(&e, &en, sizeof e) != 0) differ++;
        if (x >= -87.0f && x <= 88.0f) {
            const double r = fabs(e - exp((double)x)) / exp((double)x);
            worst = r > worst ? r : worst;
        }
        if (x < -87.34f) assert_true(e == 0.0f);
    }
    assert_true(isinf(cpu_expf(88.8f)) && cpu_expf(88.8f) > 0);
    print_message("cpu_expf: worst relative error %.3g; noover differs at %ld points\n", worst, differ);
    assert_true(worst < 3e-7);
    assert_int_equal(differ, 0);
}

// cpu_expf_bf16 (the fused attention core's bf16 probabilities) against double exp: relative
// error < 6e-6 on [-87, 88] (cpu_math.h's bound), 0 below -87.33; and its bf16 roundings
// equal cpu_expf's except rarely (one ulp, < 1% of points).
static void test_expf_bf16_accuracy(void **state) {
    (void)state;
    double worst = 0;
    long flips = 0, n = 0;
    for (long i = 0; i <= 2000000; i++) {
        const float x = (float)(-100.0 + 188.72 * (double)i / 2000000.0);
        const float e = cpu_expf_bf16(x);
        if (x >= -87.0f && x <= 88.0f) {
            const double r = fabs(e - exp((double)x)) / exp((double)x);
            worst = r > worst ? r : worst;
            const float ref = cpu_expf_noover(x);
            uint32_t a, b;
            memcpy(&a, &e, sizeof a);
            memcpy(&b, &ref, sizeof b);
            const long d = (long)((a + 0x7fffu + ((a >> 16) & 1u)) >> 16) - (long)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
            assert_true(d >= -1 && d <= 1);
            flips += d != 0;
            n++;
        }
        if (x < -87.34f) assert_true(e == 0.0f);
    }
    print_message("cpu_expf_bf16: worst relative error %.3g; bf16 value differs from cpu_expf's at %.3f%% of points\n",
                  worst, 100.0 * flips / n);
    assert_true(worst < 6e-6);
    assert_true(flips < n / 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_bf16_accuracy),
        cmocka_unit_test(test_matmul_matches_naive_for_every_transpose),
        cmocka_unit_test(test_matmul_tn_chunked_matches_naive),
        cmocka_unit_test(test_matmul_pad_b_matches_naive),
        cmocka_unit_test(test_matmul_batched_matches_naive),
        cmocka_unit_test(test_optimizer_ops_match_formulas),
        cmocka_unit_test(test_gelu_matches_double),
        cmocka_unit_test(test_expf_accuracy_and_noover),
    };
    return cmocka_run_group_tests(tests, cpu_backend_setup, cpu_backend_teardown);
}
