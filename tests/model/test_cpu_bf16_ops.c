// Every activation op of the CPU backend in bf16 storage (Backend.act = DT_BF16) against the
// same op of the fp32 backend, the oracle, on the same inputs.  Inputs are exactly representable
// in bf16 (rounded on the host by frexp/nearbyint, not the backend's bit trick), so both
// backends start from identical values and the differences come from the bf16 path alone.
// Tolerances, and why:
//   one rounding: ops whose bf16 loop computes the fp32 loop's value in fp32 and rounds it once
//     when it stores (elementwise ops, bias, head broadcast, LayerNorm, embeddings, the loss
//     gradient): every element within half a bf16 ulp of the fp32 result (8 significant bits:
//     half an ulp is 2^(e-9) for a value m 2^e, m in [0.5, 1)) plus 1e-6 of the output's RMS for
//     fp32 reassociation.  A second rounding (an fp32 intermediate stored in bf16 and read back)
//     breaks this bound at a few elements in thousands.
//   products (matmul, linear): the same half ulp plus 1e-5 of the RMS: the bf16 and fp32 oneDNN
//     kernels sum the same exact products in different orders in fp32.
//   fp32 results of reductions over activations (parameter gradients, LayerNorm's dgamma/dbeta,
//     the loss and lse): 1e-6 relative (Frobenius); 1e-5 where a product's K-sum is in fp32.
//   row copies (gather, scatter): bit for bit.
//   attention core: 1e-2 relative (Frobenius), as test_cpu_bf16.c: the bf16 path also rounds
//     its internal operands (P, dS, G = dO ⊙ out_scale), each a relative 2^-9 per element.
//   upload_act / download_act: bit for bit on representable values; round to nearest, ties to
//     even, on the tie cases below; NaN stays NaN, overflow goes to infinity.
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"

typedef struct {
    Backend *be[2];  // [0] fp32 (the oracle), [1] bf16
} Fixture;

// Nearest bf16 (8 significant bits), ties to even: nearbyint in the default rounding mode.
static float host_bf16(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    double m = frexp((double)x, &e);
    return (float)ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

// n values of scale * N(0, 1) rounded to bf16 on the host.
static float *rand_bf16(size_t n, uint64_t seed, double scale) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 3, 1);
    for (size_t i = 0; i < n; i++) x[i] = host_bf16((float)(scale * rng_next_normal(&r)));
    return x;
}

static Act *up(Backend *be, const float *host, size_t n) {
    Act *a = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, a, host, n);
    return a;
}
// The activation's values as host floats (the buffer is freed).
static float *down(Backend *be, Act *a, size_t n) {
    float *h = mhe_malloc((n ? n : 1) * sizeof *h);
    be->download_act(be, h, a, n);
    be->free(be, a);
    return h;
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)(n ? n : 1));
}

// b (bf16 backend) within one rounding of f (fp32 backend) at every element; see the header.
static void assert_rounded_once(const char *what, const float *b, const float *f, size_t n, double slack) {
    const double tol = slack * rms(f, n);
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int e = 0;
        if (f[i] != 0.0f) frexp((double)f[i], &e);
        const double half_ulp = f[i] != 0.0f ? ldexp(1.0, e - 9) : 0.0;
        const double excess = fabs((double)b[i] - f[i]) - half_ulp;
        worst = excess > worst ? excess : worst;
        if (!(excess <= tol)) bad++;
    }
    print_message("  %-26s beyond half an ulp: worst %.2e (allowed %.2e), %zu of %zu elements over\n",
                  what, worst, tol, bad, n);
    assert_int_equal(bad, 0);
}

static double rel_err(const float *x, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static void assert_rel(const char *what, const float *b, const float *f, size_t n, double tol) {
    const double e = rel_err(b, f, n);
    print_message("  %-26s relative error %.2e (allowed %.0e)\n", what, e, tol);
    assert_true(e <= tol);
}

static float *copy_floats(const float *x, size_t n) {
    float *c = mhe_malloc(n * sizeof *c);
    memcpy(c, x, n * sizeof *c);
    return c;
}

// ---- memory ----

static void test_upload_download(void **state) {
    const Fixture *fx = *state;
    Backend *bf = fx->be[1], *f32 = fx->be[0];
    assert_int_equal(bf->act, DT_BF16);
    assert_int_equal(f32->act, DT_F32);
    // Representable values (and zeros of both signs) come back bit for bit; n spans the
    // parallel split.
    const size_t n = 200003;
    float *x = rand_bf16(n, 1, 3.0);
    x[0] = -0.0f, x[1] = 0.0f, x[2] = INFINITY, x[3] = -INFINITY;
    float *back = down(bf, up(bf, x, n), n);
    assert_memory_equal(back, x, n * sizeof *x);
    free(back);
    // Unrepresentable values: nearest, ties to even, against the host oracle.
    Rng r = rng_stream(2, 3, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(100.0 * rng_next_normal(&r));
    back = down(bf, up(bf, x, n), n);
    for (size_t i = 0; i < n; i++)
        if (back[i] != host_bf16(x[i])) fail_msg("upload_act(%.9g) = %.9g, nearest bf16 %.9g", x[i], back[i], host_bf16(x[i]));
    free(back);
    // Ties: 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7 (odd); 1 + 3 2^-8 between
    // 1 + 2^-7 (odd) and 1 + 2^-6 (even); just above a tie rounds up.
    const float in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-8f + 0x1p-20f,
                        FLT_MAX, -FLT_MAX, 0x1.fep+127f, NAN};
    const float want[] = {1.0f, 1.0f + 0x1p-6f, -1.0f, 1.0f + 0x1p-7f, INFINITY, -INFINITY, 0x1.fep+127f, NAN};
    const size_t m = sizeof in / sizeof *in;
    back = down(bf, up(bf, in, m), m);
    for (size_t i = 0; i + 1 < m; i++)
        if (back[i] != want[i]) fail_msg("upload_act(%a) = %a, want %a", in[i], back[i], want[i]);
    assert_true(isnan(back[m - 1]));
    free(back);
    // The fp32 backend copies, NaN payloads included.
    back = down(f32, up(f32, in, m), m);
    assert_memory_equal(back, in, sizeof in);
    free(back);
    free(x);
}

// ---- dense ----

// One matmul with the given operand kinds on both backends: A [M,K] or transposed, B likewise,
// C with a padded leading dimension whose padding must stay untouched.
static void check_matmul(const Fixture *fx, int ta, int tb, int a_act, int b_act, int c_act,
                         float beta) {
    const int M = 150, N = 70, K = 130, lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 5;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = rand_bf16(na, 11, 1.0), *B = rand_bf16(nb, 12, 0.5), *C0 = rand_bf16(nc, 13, 1.0);
    float *res[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        Act *aA = a_act ? up(be, A, na) : NULL, *aB = b_act ? up(be, B, nb) : NULL;
        Act *aC = c_act ? up(be, C0, nc) : NULL;
        float *fC = c_act ? NULL : copy_floats(C0, nc);
        const MatIn mA = a_act ? mat_act(aA, lda) : mat_f32(A, lda), mB = b_act ? mat_act(aB, ldb) : mat_f32(B, ldb);
        be->matmul(be, ta, tb, M, N, K, 0.75f, mA, mB, beta, c_act ? out_act(aC, ldc) : out_f32(fC, ldc));
        res[p] = c_act ? down(be, aC, nc) : fC;
        if (aA) be->free(be, aA);
        if (aB) be->free(be, aB);
    }
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) assert_true(res[1][(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
    char what[64];
    snprintf(what, sizeof what, "matmul %d%d A%s B%s C%s", ta, tb, a_act ? "act" : "f32", b_act ? "act" : "f32",
             c_act ? "act" : "f32");
    if (c_act)
        assert_rounded_once(what, res[1], res[0], nc, 1e-5);
    else
        assert_rel(what, res[1], res[0], nc, 1e-5);
    free(res[0]), free(res[1]), free(A), free(B), free(C0);
}

static void test_matmul(void **state) {
    const Fixture *fx = *state;
    check_matmul(fx, 0, 1, 1, 0, 1, 0.0f);  // activation x weightᵀ -> activation
    check_matmul(fx, 1, 0, 1, 1, 0, 1.0f);  // dyᵀ x accumulated into an fp32 gradient
    check_matmul(fx, 0, 1, 1, 1, 1, 1.0f);  // activations accumulated into a bf16 activation
    check_matmul(fx, 1, 1, 1, 1, 1, 0.5f);
    check_matmul(fx, 0, 0, 0, 1, 1, 0.0f);
}

static void test_linear(void **state) {
    const Fixture *fx = *state;
    const int N = 300, in = 96, out = 80;
    float *x = rand_bf16((size_t)N * in, 21, 1.0), *W = rand_bf16((size_t)out * in, 22, 0.3);
    float *b = rand_bf16(out, 23, 1.0), *dy = rand_bf16((size_t)N * out, 24, 1.0), *dx0 = rand_bf16((size_t)N * in, 25, 1.0);
    for (int acc = 0; acc < 2; acc++) {
        float *y[2], *dx[2], *dW[2], *db[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, (size_t)N * in), *ady = up(be, dy, (size_t)N * out);
            Act *ay = be->alloc(be, (size_t)N * out * dtype_size(be->act)), *adx = up(be, dx0, (size_t)N * in);
            dW[p] = mhe_calloc((size_t)out * in, sizeof(float));
            db[p] = mhe_calloc(out, sizeof(float));
            be->linear_forward(be, ax, W, b, N, in, out, ay);
            be->linear_backward(be, ady, ax, W, N, in, out, adx, acc, dW[p], db[p], 0);
            y[p] = down(be, ay, (size_t)N * out);
            dx[p] = down(be, adx, (size_t)N * in);
            be->free(be, ax), be->free(be, ady);
        }
        assert_rounded_once("linear y", y[1], y[0], (size_t)N * out, 1e-5);
        assert_rounded_once(acc ? "linear dx (accumulate)" : "linear dx", dx[1], dx[0], (size_t)N * in, 1e-5);
        assert_rel("linear dW", dW[1], dW[0], (size_t)out * in, 1e-5);
        assert_rel("linear db", db[1], db[0], out, 1e-6);
        // dW_zero (ops.h): the gradients are stored, not added.  NaN where the promise says zeros
        // (breaking it on purpose) shows that neither dW nor db is read.
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, (size_t)N * in), *ady = up(be, dy, (size_t)N * out);
            float *sW = mhe_malloc((size_t)out * in * sizeof(float)), *sb = mhe_malloc(out * sizeof(float));
            for (size_t i = 0; i < (size_t)out * in; i++) sW[i] = NAN;
            for (int i = 0; i < out; i++) sb[i] = NAN;
            be->linear_backward(be, ady, ax, W, N, in, out, NULL, 0, sW, sb, 1);
            assert_rel("linear dW (dW_zero)", sW, dW[p], (size_t)out * in, 1e-6);
            assert_rel("linear db (dW_zero)", sb, db[p], out, 1e-6);
            free(sW), free(sb);
            be->free(be, ax), be->free(be, ady);
        }
        for (int p = 0; p < 2; p++) free(y[p]), free(dx[p]), free(dW[p]), free(db[p]);
    }
    free(x), free(W), free(b), free(dy), free(dx0);
}

static void test_bias_and_add(void **state) {
    const Fixture *fx = *state;
    const int N = 300, C = 256;
    const size_t n = (size_t)N * C;
    float *y = rand_bf16(n, 31, 1.0), *bias = rand_bf16(C, 32, 1.0), *a = rand_bf16(n, 33, 2.0);
    float *out[2], *sum[2], *db[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        Act *ay = up(be, y, n), *aa = up(be, a, n);
        be->bias_add(be, ay, bias, N, C);
        db[p] = mhe_calloc(C, sizeof(float));
        be->bias_backward(be, aa, N, C, db[p]);
        be->add(be, ay, aa, aa, n);  // in place: aa = y + bias + a
        out[p] = down(be, ay, n);
        sum[p] = down(be, aa, n);
    }
    assert_rounded_once("bias_add", out[1], out[0], n, 1e-6);
    assert_rel("bias_backward", db[1], db[0], C, 1e-6);
    // add reads the stored (rounded) bias_add output on each backend; compare it with the fp32
    // sum of the bf16 backend's own inputs rounded once.
    float *want = mhe_malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = out[1][i] + a[i];
    assert_rounded_once("add (in place)", sum[1], want, n, 1e-6);
    free(want);
    for (int p = 0; p < 2; p++) free(out[p]), free(sum[p]), free(db[p]);
    free(y), free(bias), free(a);
}

static void test_head_expand(void **state) {
    const Fixture *fx = *state;
    const int N = 300, n = 4, d = 72, ldx = 2 * d + 8;
    const size_t nx = (size_t)N * ldx, no = (size_t)N * n * d;
    float *x = rand_bf16(nx, 41, 1.0), *mul = rand_bf16((size_t)n * d, 42, 1.0), *add = rand_bf16((size_t)n * d, 43, 1.0);
    float *dout = rand_bf16(no, 44, 1.0), *dx0 = rand_bf16(nx, 45, 1.0);
    for (int variant = 0; variant < 3; variant++) {
        const float *m = variant == 1 ? NULL : mul, *ad = variant == 2 ? NULL : add;
        const int acc = variant != 0;
        float *o[2], *dx[2], *dm[2], *da[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, nx), *ao = be->alloc(be, no * dtype_size(be->act)), *ad_out = up(be, dout, no);
            Act *adx = up(be, dx0, nx);
            dm[p] = mhe_calloc((size_t)n * d, sizeof(float));
            da[p] = mhe_calloc((size_t)n * d, sizeof(float));
            be->head_expand(be, ax, ldx, m, ad, N, n, d, ao);
            be->head_expand_backward(be, ad_out, ax, ldx, m, N, n, d, adx, acc, dm[p], da[p]);
            o[p] = down(be, ao, no);
            dx[p] = down(be, adx, nx);
            be->free(be, ax), be->free(be, ad_out);
        }
        assert_rounded_once("head_expand", o[1], o[0], no, 1e-6);
        assert_rounded_once(acc ? "head_expand_bwd dx (acc)" : "head_expand_bwd dx", dx[1], dx[0], nx, 1e-6);
        assert_rel("head_expand_bwd dmul", dm[1], dm[0], (size_t)n * d, 1e-6);
        assert_rel("head_expand_bwd dadd", da[1], da[0], (size_t)n * d, 1e-6);
        for (int p = 0; p < 2; p++) free(o[p]), free(dx[p]), free(dm[p]), free(da[p]);
    }
    free(x), free(mul), free(add), free(dout), free(dx0);
}

static void test_gather_scatter(void **state) {
    const Fixture *fx = *state;
    const int rows = 400, C = 200, M = 150;
    int32_t idx[150];
    for (int i = 0; i < M; i++) idx[i] = (i * 7 + 3) % rows;  // distinct: 7 is prime to 400
    float *src = rand_bf16((size_t)rows * C, 51, 1.0), *dst0 = rand_bf16((size_t)rows * C, 52, 1.0);
    float *g[2], *s[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        Act *as = up(be, src, (size_t)rows * C), *ag = be->alloc(be, (size_t)M * C * dtype_size(be->act));
        Act *ad = up(be, dst0, (size_t)rows * C);
        be->gather_rows(be, as, idx, M, C, ag, rows);
        be->scatter_rows(be, ag, idx, M, C, ad, rows);
        g[p] = down(be, ag, (size_t)M * C);
        s[p] = down(be, ad, (size_t)rows * C);
        be->free(be, as);
    }
    assert_memory_equal(g[1], g[0], (size_t)M * C * sizeof(float));
    assert_memory_equal(s[1], s[0], (size_t)rows * C * sizeof(float));
    for (int p = 0; p < 2; p++) free(g[p]), free(s[p]);
    free(src), free(dst0);
}

// ---- normalisation, activations, dropout ----

static void test_layernorm(void **state) {
    const Fixture *fx = *state;
    const int N = 300, C = 320;
    const size_t n = (size_t)N * C;
    float *x = rand_bf16(n, 61, 2.0), *gamma = rand_bf16(C, 62, 1.0), *beta = rand_bf16(C, 63, 1.0);
    float *dy = rand_bf16(n, 64, 1.0), *dx0 = rand_bf16(n, 65, 1.0);
    for (int mode = 0; mode < 2; mode++) {  // 0: separate buffers, accumulate; 1: y = x, dx = dy
        float *y[2], *dx[2], *mean[2], *rstd[2], *dg[2], *db[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, n), *ay = mode ? ax : be->alloc(be, n * dtype_size(be->act));
            Act *ady = up(be, dy, n), *adx = mode ? ady : up(be, dx0, n);
            mean[p] = mhe_malloc(N * sizeof(float)), rstd[p] = mhe_malloc(N * sizeof(float));
            dg[p] = mhe_calloc(C, sizeof(float)), db[p] = mhe_calloc(C, sizeof(float));
            be->layernorm_forward(be, ax, gamma, beta, N, C, 1e-5f, ay, mean[p], rstd[p]);
            // The backward's x: the input again (the forward may have overwritten it in place).
            Act *ax2 = up(be, x, n);
            be->layernorm_backward(be, ady, ax2, gamma, mean[p], rstd[p], N, C, adx, !mode, dg[p], db[p]);
            y[p] = down(be, ay, n);
            dx[p] = down(be, adx, n);
            if (!mode) be->free(be, ax), be->free(be, ady);
            be->free(be, ax2);
        }
        assert_rounded_once(mode ? "layernorm y (in place)" : "layernorm y", y[1], y[0], n, 1e-6);
        assert_rel("layernorm mean", mean[1], mean[0], N, 1e-6);
        assert_rel("layernorm rstd", rstd[1], rstd[0], N, 1e-6);
        assert_rounded_once(mode ? "layernorm dx (= dy)" : "layernorm dx (accumulate)", dx[1], dx[0], n, 1e-6);
        assert_rel("layernorm dgamma", dg[1], dg[0], C, 1e-6);
        assert_rel("layernorm dbeta", db[1], db[0], C, 1e-6);
        for (int p = 0; p < 2; p++) free(y[p]), free(dx[p]), free(mean[p]), free(rstd[p]), free(dg[p]), free(db[p]);
    }
    free(x), free(gamma), free(beta), free(dy), free(dx0);
}

static void test_gelu_tanh(void **state) {
    const Fixture *fx = *state;
    const size_t n = 100003;
    float *x = rand_bf16(n, 71, 3.0), *dy = rand_bf16(n, 72, 1.0);
    for (int k = 0; k < 3; k++) {  // GELU erf, GELU tanh, tanh
        float *y[2], *dx[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, n), *ay = be->alloc(be, n * dtype_size(be->act)), *ad = up(be, dy, n);
            if (k < 2) {
                const GeluKind kind = k ? GELU_TANH : GELU_ERF;
                be->gelu_forward(be, kind, ax, ay, n);
                be->gelu_backward(be, kind, ax, ad, ad, n);  // dx in place of dy
            } else {
                be->tanh_forward(be, ax, ay, n);
                be->tanh_backward(be, ay, ad, ad, n);
            }
            y[p] = down(be, ay, n);
            dx[p] = down(be, ad, n);
            be->free(be, ax);
        }
        const char *name[3][2] = {{"gelu erf", "gelu erf backward"}, {"gelu tanh", "gelu tanh backward"},
                                  {"tanh", "tanh backward"}};
        assert_rounded_once(name[k][0], y[1], y[0], n, 1e-6);
        if (k < 2) {
            assert_rounded_once(name[k][1], dx[1], dx[0], n, 1e-6);
        } else {
            // tanh's backward reads the stored y, rounded on the bf16 backend: compare with the
            // fp32 formula on the bf16 backend's own y.
            float *want = mhe_malloc(n * sizeof *want);
            for (size_t i = 0; i < n; i++) want[i] = dy[i] * (1.0f - y[1][i] * y[1][i]);
            assert_rounded_once(name[k][1], dx[1], want, n, 1e-6);
            free(want);
        }
        for (int p = 0; p < 2; p++) free(y[p]), free(dx[p]);
    }
    free(x), free(dy);
}

static void test_dropout(void **state) {
    const Fixture *fx = *state;
    const size_t n = 100003;
    float *x = rand_bf16(n, 81, 1.0);
    for (int k = 0; k < 3; k++) {  // p = 0.1, p = 0.1 in place, p = 0 (a copy)
        const float pr = k == 2 ? 0.0f : 0.1f;
        float *y[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *ax = up(be, x, n), *ay = k == 1 ? ax : be->alloc(be, n * dtype_size(be->act));
            be->dropout(be, ax, ay, n, pr, 1234, 56);
            y[p] = down(be, ay, n);
            if (k != 1) be->free(be, ax);
        }
        assert_rounded_once(k == 2 ? "dropout p=0" : k ? "dropout (in place)" : "dropout", y[1], y[0], n, 1e-6);
        // The same elements are dropped.
        for (size_t i = 0; i < n; i++) assert_true((y[1][i] == 0.0f) == (y[0][i] == 0.0f));
        for (int p = 0; p < 2; p++) free(y[p]);
    }
    free(x);
}

// ---- embeddings, loss ----

static void test_embedding(void **state) {
    const Fixture *fx = *state;
    const int B = 3, T = 100, D = 256, V = 60;
    int32_t ids[300], tids[300];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 13) % V, tids[i] = i % 2;
    float *word = rand_bf16((size_t)V * D, 91, 1.0), *pos = rand_bf16((size_t)T * D, 92, 1.0);
    float *type = rand_bf16(2 * (size_t)D, 93, 1.0), *dout = rand_bf16((size_t)B * T * D, 94, 1.0);
    const size_t no = (size_t)B * T * D;
    float *o[2], *dw[2], *dp[2], *dt[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        Act *ao = be->alloc(be, no * dtype_size(be->act)), *ad = up(be, dout, no);
        dw[p] = mhe_calloc((size_t)V * D, sizeof(float)), dp[p] = mhe_calloc((size_t)T * D, sizeof(float));
        dt[p] = mhe_calloc(2 * (size_t)D, sizeof(float));
        be->embedding_forward(be, ids, tids, word, pos, type, B, T, D, ao);
        be->embedding_backward(be, ad, ids, tids, B, T, D, dw[p], dp[p], dt[p]);
        o[p] = down(be, ao, no);
        be->free(be, ad);
    }
    assert_rounded_once("embedding_forward", o[1], o[0], no, 1e-6);
    assert_rel("embedding_backward dword", dw[1], dw[0], (size_t)V * D, 1e-6);
    assert_rel("embedding_backward dpos", dp[1], dp[0], (size_t)T * D, 1e-6);
    assert_rel("embedding_backward dtype", dt[1], dt[0], 2 * (size_t)D, 1e-6);
    for (int p = 0; p < 2; p++) free(o[p]), free(dw[p]), free(dp[p]), free(dt[p]);
    free(word), free(pos), free(type), free(dout);
}

static void test_cross_entropy(void **state) {
    const Fixture *fx = *state;
    const int N = 97, V = 3001;
    const size_t n = (size_t)N * V;
    int32_t labels[97];
    for (int i = 0; i < N; i++) labels[i] = i % 9 == 4 ? -1 : (i * 31) % V;
    float *z = rand_bf16(n, 101, 4.0);
    for (int alias = 0; alias < 2; alias++) {
        float *loss[2], *lse[2], *g[2];
        for (int p = 0; p < 2; p++) {
            Backend *be = fx->be[p];
            Act *az = up(be, z, n), *ag = alias ? az : be->alloc(be, n * dtype_size(be->act));
            loss[p] = mhe_malloc(N * sizeof(float)), lse[p] = mhe_malloc(N * sizeof(float));
            be->cross_entropy_forward(be, az, labels, N, V, V, loss[p], lse[p]);
            be->cross_entropy_backward(be, az, lse[p], labels, N, V, V, 1.0f / 80, ag);
            g[p] = down(be, ag, n);
            if (!alias) be->free(be, az);
        }
        assert_rel("cross_entropy loss", loss[1], loss[0], N, 1e-6);
        assert_rel("cross_entropy lse", lse[1], lse[0], N, 1e-6);
        assert_rounded_once(alias ? "cross_entropy dlogits (=)" : "cross_entropy dlogits", g[1], g[0], n, 1e-6);
        for (int i = 0; i < N; i++)
            if (labels[i] < 0) assert_true(loss[1][i] == 0.0f && g[1][(size_t)i * V] == 0.0f);
        for (int p = 0; p < 2; p++) free(loss[p]), free(lse[p]), free(g[p]);
    }
    // A NaN logit makes its row's loss and gradient NaN on both backends (the trainer's
    // divergence check reads the loss), and leaves the other rows as they were.
    z[(size_t)1 * V + 17] = NAN;
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        Act *az = up(be, z, n);
        float loss[97], lse[97];
        be->cross_entropy_forward(be, az, labels, N, V, V, loss, lse);
        be->cross_entropy_backward(be, az, lse, labels, N, V, V, 1.0f / 80, az);
        float *g = down(be, az, n);
        assert_true(isnan(loss[1]) && isnan(g[(size_t)1 * V + 5]));
        assert_true(isfinite(loss[0]) && isfinite(loss[2]) && isfinite(g[(size_t)2 * V + 5]));
        free(g);  // down freed az
    }
    free(z);
}

// The vocabulary head in rows of ops_head_ld (3001 wide in rows of 3008, the padded product of
// cpu_gemm_padded_weight) against the fp32 backend's unpadded layer: the same tolerances as the
// linear layer and the loss, from the same inputs at each stage, and zeros in every padding column.
// Outside and inside a weights_steady window (the weight's padded copy made per call, or kept).
static float *pad_rows(const float *x, int N, int V, int ld) {
    float *p = mhe_calloc((size_t)N * ld, sizeof *p);
    for (int r = 0; r < N; r++) memcpy(p + (size_t)r * ld, x + (size_t)r * V, (size_t)V * sizeof *p);
    return p;
}
static float *unpad_rows(const float *p, int N, int V, int ld) {
    float *x = mhe_malloc((size_t)N * V * sizeof *x);
    for (int r = 0; r < N; r++) {
        memcpy(x + (size_t)r * V, p + (size_t)r * ld, (size_t)V * sizeof *x);
        for (int c = V; c < ld; c++) assert_true(p[(size_t)r * ld + c] == 0.0f);
    }
    return x;
}
static void test_vocabulary_head(void **state) {
    const Fixture *fx = *state;
    const int N = 300, in = 96, V = 3001, ld = ops_head_ld(DT_BF16, V);
    assert_int_equal(ld, 3008);
    assert_int_equal(ops_head_ld(DT_F32, V), V);
    int32_t labels[300];
    for (int i = 0; i < N; i++) labels[i] = i % 9 == 4 ? -1 : (i * 31) % V;
    float *x = rand_bf16((size_t)N * in, 31, 1.0), *W = rand_bf16((size_t)V * in, 32, 0.3), *b = rand_bf16(V, 33, 1.0);
    float *z = rand_bf16((size_t)N * V, 34, 4.0), *dy = rand_bf16((size_t)N * V, 35, 1.0);
    float *zp = pad_rows(z, N, V, ld), *dyp = pad_rows(dy, N, V, ld);
    Backend *f32 = fx->be[0], *bf = fx->be[1];
    for (int window = 0; window < 2; window++) {
        if (window) bf->weights_steady(bf, W, (size_t)V * in);
        // The product.
        Act *x32 = up(f32, x, (size_t)N * in), *xb = up(bf, x, (size_t)N * in);
        Act *y32 = f32->alloc(f32, (size_t)N * V * 4), *yb = up(bf, zp, (size_t)N * ld);  // padding overwritten
        f32->linear_forward(f32, x32, W, b, N, in, V, y32);
        bf->linear_forward_ld(bf, xb, W, b, N, in, V, ld, yb);
        float *y0 = down(f32, y32, (size_t)N * V), *ybp = down(bf, yb, (size_t)N * ld), *y1 = unpad_rows(ybp, N, V, ld);
        assert_rounded_once("head y (padded rows)", y1, y0, (size_t)N * V, 1e-5);
        // The loss from the same logits.
        float loss[2][300], lse[2][300];
        Act *z32 = up(f32, z, (size_t)N * V), *zb = up(bf, zp, (size_t)N * ld);
        f32->cross_entropy_forward(f32, z32, labels, N, V, V, loss[0], lse[0]);
        bf->cross_entropy_forward(bf, zb, labels, N, V, ld, loss[1], lse[1]);
        f32->cross_entropy_backward(f32, z32, lse[0], labels, N, V, V, 1.0f / 80, z32);
        bf->cross_entropy_backward(bf, zb, lse[1], labels, N, V, ld, 1.0f / 80, zb);
        assert_rel("head loss (padded rows)", loss[1], loss[0], N, 1e-6);
        assert_rel("head lse (padded rows)", lse[1], lse[0], N, 1e-6);
        float *g0 = down(f32, z32, (size_t)N * V), *gbp = down(bf, zb, (size_t)N * ld), *g1 = unpad_rows(gbp, N, V, ld);
        assert_rounded_once("head dlogits (padded rows)", g1, g0, (size_t)N * V, 1e-6);
        // The backward from the same gradient.
        Act *dy32 = up(f32, dy, (size_t)N * V), *dyb = up(bf, dyp, (size_t)N * ld);
        Act *dx32 = f32->alloc(f32, (size_t)N * in * 4), *dxb = bf->alloc(bf, (size_t)N * in * 2);
        float *dW[2] = {mhe_calloc((size_t)V * in, sizeof(float)), mhe_calloc((size_t)V * in, sizeof(float))};
        float *db[2] = {mhe_calloc(V, sizeof(float)), mhe_calloc(V, sizeof(float))};
        f32->linear_backward(f32, dy32, x32, W, N, in, V, dx32, 0, dW[0], db[0], 0);
        bf->linear_backward_ld(bf, dyb, xb, W, N, in, V, ld, dxb, 0, dW[1], db[1], 0);
        float *dx0 = down(f32, dx32, (size_t)N * in), *dx1 = down(bf, dxb, (size_t)N * in);
        assert_rounded_once("head dx (padded rows)", dx1, dx0, (size_t)N * in, 1e-5);
        assert_rel("head dW (padded rows)", dW[1], dW[0], (size_t)V * in, 1e-5);
        assert_rel("head db (padded rows)", db[1], db[0], V, 1e-6);
        if (window) bf->weights_steady(bf, NULL, 0);
        f32->free(f32, x32), bf->free(bf, xb), f32->free(f32, dy32), bf->free(bf, dyb);
        free(y0), free(ybp), free(y1), free(g0), free(gbp), free(g1), free(dx0), free(dx1);
        for (int p = 0; p < 2; p++) free(dW[p]), free(db[p]);
    }
    free(x), free(W), free(b), free(z), free(dy), free(zp), free(dyp);
}

// ---- attention ----

// Strided q, k, v (row strides wider than the heads), key bias, output scale and shift, causal
// with a key mask and dropout; per-head and shared scores.
static void check_attention(const Fixture *fx, int shared) {
    AttnShape s = {0};
    s.B = 2, s.T = 40, s.n_heads = 4;
    s.q_heads = s.k_heads = shared ? 1 : 4;
    s.v_heads = 2;
    s.qk_dim = 16, s.v_dim = 8;
    s.ldq = s.q_heads * s.qk_dim + 5, s.ldk = s.k_heads * s.qk_dim + 3, s.ldv = s.v_heads * s.v_dim + 7;
    s.scale = 0.25f;
    s.causal = 1;
    s.dropout = 0.1f;
    s.seed = 7, s.offset = 11;
    const int BT = s.B * s.T, n = s.n_heads;
    const size_t nq = (size_t)BT * s.ldq, nk = (size_t)BT * s.ldk, nv = (size_t)BT * s.ldv;
    const size_t no = (size_t)BT * n * s.v_dim, nb = (size_t)BT * n;
    float *q = rand_bf16(nq, 111, 1.0), *k = rand_bf16(nk, 112, 1.0), *v = rand_bf16(nv, 113, 1.0);
    float *dout = rand_bf16(no, 114, 1.0), *kb = rand_bf16(nb, 115, 0.5);
    float *osc = rand_bf16((size_t)n * s.v_dim, 116, 1.0), *osh = rand_bf16((size_t)n * s.v_dim, 117, 1.0);
    int32_t km[80];
    for (int i = 0; i < BT; i++) km[i] = i % 7 != 3;
    s.key_mask = km;
    s.out_scale = osc;
    s.out_shift = osh;
    float *out[2], *dq[2], *dk[2], *dv[2], *dkb[2], *dsc[2], *dsh[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = fx->be[p];
        size_t saved_n, scratch_n;
        be->attention_sizes(be, &s, &saved_n, &scratch_n);
        float *saved = mhe_calloc(saved_n, sizeof(float)), *scratch = mhe_calloc(scratch_n, sizeof(float));
        Act *aq = up(be, q, nq), *ak = up(be, k, nk), *av = up(be, v, nv), *ad = up(be, dout, no);
        Act *akb = up(be, kb, nb);
        // Gradients start from the inputs so the padding columns (untouched) compare too.
        Act *ao = be->alloc(be, no * dtype_size(be->act)), *adq = up(be, q, nq), *adk = up(be, k, nk);
        Act *adv = up(be, v, nv), *adkb = be->alloc(be, nb * dtype_size(be->act));
        dsc[p] = mhe_calloc((size_t)n * s.v_dim, sizeof(float)), dsh[p] = mhe_calloc((size_t)n * s.v_dim, sizeof(float));
        s.key_bias = akb;
        be->attention_forward(be, &s, aq, ak, av, ao, saved, scratch);
        be->attention_backward(be, &s, aq, ak, av, saved, ad, adq, adk, adv, adkb, dsc[p], dsh[p], scratch);
        out[p] = down(be, ao, no), dq[p] = down(be, adq, nq), dk[p] = down(be, adk, nk);
        dv[p] = down(be, adv, nv), dkb[p] = down(be, adkb, nb);
        be->free(be, aq), be->free(be, ak), be->free(be, av), be->free(be, ad), be->free(be, akb);
        free(saved), free(scratch);
    }
    print_message("attention shared=%d:\n", shared);
    assert_rel("attention out", out[1], out[0], no, 1e-2);
    assert_rel("attention dq", dq[1], dq[0], nq, 1e-2);
    assert_rel("attention dk", dk[1], dk[0], nk, 1e-2);
    assert_rel("attention dv", dv[1], dv[0], nv, 1e-2);
    assert_rel("attention dkey_bias", dkb[1], dkb[0], nb, 1e-2);
    assert_rel("attention dout_scale", dsc[1], dsc[0], (size_t)n * s.v_dim, 1e-2);
    assert_rel("attention dout_shift", dsh[1], dsh[0], (size_t)n * s.v_dim, 1e-6);
    for (int r = 0; r < BT; r++) {
        for (int c = s.q_heads * s.qk_dim; c < s.ldq; c++) assert_true(dq[1][(size_t)r * s.ldq + c] == q[(size_t)r * s.ldq + c]);
        for (int c = s.k_heads * s.qk_dim; c < s.ldk; c++) assert_true(dk[1][(size_t)r * s.ldk + c] == k[(size_t)r * s.ldk + c]);
        for (int c = s.v_heads * s.v_dim; c < s.ldv; c++) assert_true(dv[1][(size_t)r * s.ldv + c] == v[(size_t)r * s.ldv + c]);
    }
    for (int p = 0; p < 2; p++)
        free(out[p]), free(dq[p]), free(dk[p]), free(dv[p]), free(dkb[p]), free(dsc[p]), free(dsh[p]);
    free(q), free(k), free(v), free(dout), free(kb), free(osc), free(osh);
}

static void test_attention(void **state) {
    check_attention(*state, 0);
    check_attention(*state, 1);
}

static int setup(void **state) {
    Fixture *fx = mhe_calloc(1, sizeof *fx);
    fx->be[0] = backend_cpu_create_for(0, 0);
    fx->be[1] = backend_cpu_create_for(0, 1);
    *state = fx;
    return 0;
}
static int teardown(void **state) {
    Fixture *fx = *state;
    fx->be[0]->destroy(fx->be[0]);
    fx->be[1]->destroy(fx->be[1]);
    free(fx);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upload_download), cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_linear),          cmocka_unit_test(test_bias_and_add),
        cmocka_unit_test(test_head_expand),     cmocka_unit_test(test_gather_scatter),
        cmocka_unit_test(test_layernorm),       cmocka_unit_test(test_gelu_tanh),
        cmocka_unit_test(test_dropout),         cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_cross_entropy),   cmocka_unit_test(test_vocabulary_head),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
