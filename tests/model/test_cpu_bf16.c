// The CPU backend's bf16 mode (runtime.precision: bf16) op by op against its fp32 counterpart
// and against independent double-precision oracles.
//   matmul: equals the double product of the operands rounded to bf16 (the oracle rounds with
//     frexp/nearbyint, not the backend's bit trick) within 1e-5 relative (fp32 accumulation),
//     and the fp32 product within 1e-2 relative (Frobenius): bf16 keeps 8 significant bits,
//     so each operand carries a relative rounding error up to 2^-9 ≈ 2e-3.
//   attention core forward and backward (per-head and shared scores; causal, key mask,
//     dropout, key bias, output scale): within 1e-2 relative of the fp32 backend (bf16 inputs
//     to the score, P V and all backward products, bf16 outputs; the softmax and its
//     statistics stay fp32).
//   linear layer (fused bias; x, y, dy, dx bf16 activations): see check_linear.
// The bf16 backend's activations (Backend.act = DT_BF16) are bf16 storage: inputs go in with
// upload_act (rounded to nearest even) and outputs come back with download_act; the fp32
// backend's go through the same calls (plain copies).  Every other bf16 activation op is
// checked against fp32 in test_cpu_bf16_ops.c.
//   the primitive cache: right results across its refill (hundreds of shapes).
// Run also with ONEDNN_MAX_CPU_ISA=AVX2 (tests.cmake): no bf16 kernel, the emulated path.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"

typedef struct {
    Backend *f32, *bf16;
} Fixture;

static float *random_floats(size_t n, uint64_t seed, double scale) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 7, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_next_normal(&r));
    return x;
}

// Nearest bf16 (8 significant bits), ties to even: nearbyint in the default rounding mode.
static double oracle_bf16(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    double m = frexp((double)x, &e);  // |m| in [0.5, 1)
    return ldexp(nearbyint(ldexp(m, 8)), e - 8);
}

// A host array as an activation of be (rounded to bf16 on the bf16 backend), and back.
static Act *to_act(Backend *be, const float *host, size_t n) {
    Act *a = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, a, host, n);
    return a;
}
static void from_act(Backend *be, float *host, Act *a, size_t n) {
    be->download_act(be, host, a, n);
    be->free(be, a);
}

static double rel_err(const float *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (x[i] - ref[i]) * (x[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}
static double rel_err_f(const float *x, const float *ref, size_t n) {
    double *r = mhe_malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) r[i] = ref[i];
    double e = rel_err(x, r, n);
    free(r);
    return e;
}

static void check_matmul(const Fixture *f, int ta, int tb, int M, int N, int K, float beta) {
    const int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
    const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
    float *A = random_floats(na, 11 + ta, 1.0), *B = random_floats(nb, 13 + tb, 1.0), *C0 = random_floats(nc, 17, 1.0);
    float *C = mhe_malloc(nc * sizeof *C), *Cf = mhe_malloc(nc * sizeof *Cf);
    double *rounded = mhe_calloc(nc, sizeof *rounded);
    memcpy(C, C0, nc * sizeof *C);
    memcpy(Cf, C0, nc * sizeof *Cf);
    const float alpha = 0.75f;
    f->bf16->matmul(f->bf16, ta, tb, M, N, K, alpha, mat_f32(A, lda), mat_f32(B, ldb), beta, out_f32(C, ldc));
    f->f32->matmul(f->f32, ta, tb, M, N, K, alpha, mat_f32(A, lda), mat_f32(B, ldb), beta, out_f32(Cf, ldc));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += oracle_bf16(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     oracle_bf16(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            rounded[(size_t)i * ldc + j] = alpha * s + beta * C0[(size_t)i * ldc + j];
        }
    // Compare the M x N block only (columns beyond N must be untouched).
    for (int i = 0; i < M; i++)
        for (int j = N; j < ldc; j++) {
            assert_true(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
            rounded[(size_t)i * ldc + j] = C0[(size_t)i * ldc + j];
            Cf[(size_t)i * ldc + j] = C0[(size_t)i * ldc + j];
        }
    const double e_round = rel_err(C, rounded, nc), e_f32 = rel_err_f(C, Cf, nc);
    print_message("bf16 matmul ta=%d tb=%d %dx%dx%d beta=%g: vs rounded-operand oracle %.2e, vs fp32 %.2e\n",
                  ta, tb, M, N, K, beta, e_round, e_f32);
    assert_true(e_round <= 1e-5);
    assert_true(e_f32 <= 1e-2);
    assert_true(e_f32 >= 1e-5);  // it did round: bf16 is not fp32
    free(A);
    free(B);
    free(C0);
    free(C);
    free(Cf);
    free(rounded);
}

static void test_matmul_bf16(void **state) {
    const Fixture *f = *state;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            check_matmul(f, ta, tb, 37, 29, 53, 0.0f);
            check_matmul(f, ta, tb, 150, 140, 130, 1.0f);
        }
    check_matmul(f, 0, 1, 64, 48, 0 + 96, 0.5f);
}

// Worst |x - ref| beyond half a bf16 ulp of ref (2^-8 |ref| bounds it), relative to the RMS of
// ref: what a result rounded once to bf16 from an fp32 accumulation adds to the double oracle.
static double bf16_excess(const float *x, const double *ref, size_t n) {
    double ss = 0, worst = 0;
    for (size_t i = 0; i < n; i++) ss += ref[i] * ref[i];
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(x[i] - ref[i]) - ldexp(fabs(ref[i]), -8);
        worst = e > worst ? e : worst;
    }
    return worst / sqrt(ss / (double)n > 0 ? ss / (double)n : 1);
}

// The fused linear layer (ops.h linear_forward / linear_backward) on both backends against
// double oracles: fp32 within 1e-5 relative of the exact product; bf16 from the bf16-rounded
// activations (x, dy and the accumulated dx0 are stored in bf16) and W (rounded per product):
// dW within 1e-5 of the product of the rounded operands, y and dx (bf16 activations, rounded
// once when stored) within half a bf16 ulp of it per element plus 1e-5 of the RMS, and within
// 1e-2 of fp32; db is the sum of the stored dy (in double, 1e-6) at either precision.
static void check_linear(Backend *be, int bf16, int N, int in, int out, int accumulate) {
    float *x = random_floats((size_t)N * in, 31, 1.0), *W = random_floats((size_t)out * in, 37, 0.5);
    float *b = random_floats(out, 41, 1.0), *dy = random_floats((size_t)N * out, 43, 1.0);
    float *dx0 = random_floats((size_t)N * in, 47, 1.0), *dW0 = random_floats((size_t)out * in, 53, 1.0);
    float *db0 = random_floats(out, 59, 1.0);
    float *y = mhe_malloc((size_t)N * out * sizeof *y), *dx = mhe_malloc((size_t)N * in * sizeof *dx);
    float *dW = mhe_malloc((size_t)out * in * sizeof *dW), *db = mhe_malloc(out * sizeof *db);
    memcpy(dx, dx0, (size_t)N * in * sizeof *dx);
    memcpy(dW, dW0, (size_t)out * in * sizeof *dW);
    memcpy(db, db0, out * sizeof *db);
    Act *ax = to_act(be, x, (size_t)N * in), *ady = to_act(be, dy, (size_t)N * out);
    Act *ay = to_act(be, y, (size_t)N * out), *adx = to_act(be, dx, (size_t)N * in);
    be->linear_forward(be, ax, W, b, N, in, out, ay);
    be->linear_backward(be, ady, ax, W, N, in, out, adx, accumulate, dW, db, 0);
    from_act(be, y, ay, (size_t)N * out);
    from_act(be, dx, adx, (size_t)N * in);
    be->free(be, ax);
    be->free(be, ady);
#define R(v) (bf16 ? oracle_bf16(v) : (double)(v))
    double *ry = mhe_malloc((size_t)N * out * sizeof *ry), *rdx = mhe_malloc((size_t)N * in * sizeof *rdx);
    double *rdW = mhe_malloc((size_t)out * in * sizeof *rdW), *rdb = mhe_malloc(out * sizeof *rdb);
    for (int i = 0; i < N; i++)
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int k = 0; k < in; k++) s += R(x[(size_t)i * in + k]) * R(W[(size_t)o * in + k]);
            ry[(size_t)i * out + o] = s + b[o];
        }
    for (int i = 0; i < N; i++)
        for (int k = 0; k < in; k++) {
            double s = accumulate ? R(dx0[(size_t)i * in + k]) : 0.0;
            for (int o = 0; o < out; o++) s += R(dy[(size_t)i * out + o]) * R(W[(size_t)o * in + k]);
            rdx[(size_t)i * in + k] = s;
        }
    for (int o = 0; o < out; o++) {
        for (int k = 0; k < in; k++) {
            double s = dW0[(size_t)o * in + k];
            for (int i = 0; i < N; i++) s += R(dy[(size_t)i * out + o]) * R(x[(size_t)i * in + k]);
            rdW[(size_t)o * in + k] = s;
        }
        double s = 0;
        for (int i = 0; i < N; i++) s += R(dy[(size_t)i * out + o]);
        rdb[o] = db0[o] + s;
    }
#undef R
    const double ey = rel_err(y, ry, (size_t)N * out), edx = rel_err(dx, rdx, (size_t)N * in);
    const double edW = rel_err(dW, rdW, (size_t)out * in), edb = rel_err(db, rdb, out);
    print_message("linear bf16=%d %dx%d->%d acc=%d: y %.2e dx %.2e dW %.2e db %.2e\n", bf16, N, in, out,
                  accumulate, ey, edx, edW, edb);
    if (bf16) {
        const double xy = bf16_excess(y, ry, (size_t)N * out), xdx = bf16_excess(dx, rdx, (size_t)N * in);
        print_message("  bf16 y, dx beyond half an ulp: %.2e %.2e (of the RMS)\n", xy, xdx);
        assert_true(xy <= 1e-5 && xdx <= 1e-5 && edW <= 1e-5);
    } else {
        assert_true(ey <= 1e-5 && edx <= 1e-5 && edW <= 1e-5);
    }
    assert_true(edb <= 1e-6);
    free(x), free(W), free(b), free(dy), free(dx0), free(dW0), free(db0);
    free(y), free(dx), free(dW), free(db), free(ry), free(rdx), free(rdW), free(rdb);
}

static void test_linear_bf16(void **state) {
    const Fixture *f = *state;
    for (int acc = 0; acc < 2; acc++) {
        check_linear(f->f32, 0, 300, 70, 90, acc);
        check_linear(f->bf16, 1, 300, 70, 90, acc);
    }
    check_linear(f->bf16, 1, 17, 33, 5, 0);
    // bf16 against fp32 on the same inputs (both backends' outputs): within 1e-2, db too (the
    // bf16 backend sums dy as stored, in bf16).
    const int N = 300, in = 70, out = 90;
    float *x = random_floats((size_t)N * in, 61, 1.0), *W = random_floats((size_t)out * in, 67, 0.5);
    float *b = random_floats(out, 71, 1.0), *dy = random_floats((size_t)N * out, 73, 1.0);
    float *y[2], *dx[2], *dW[2], *db[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = p ? f->bf16 : f->f32;
        y[p] = mhe_malloc((size_t)N * out * sizeof *y[p]);
        dx[p] = mhe_malloc((size_t)N * in * sizeof *dx[p]);
        dW[p] = mhe_calloc((size_t)out * in, sizeof *dW[p]);
        db[p] = mhe_calloc(out, sizeof *db[p]);
        Act *ax = to_act(be, x, (size_t)N * in), *ady = to_act(be, dy, (size_t)N * out);
        Act *ay = to_act(be, y[p], (size_t)N * out), *adx = to_act(be, dx[p], (size_t)N * in);
        be->linear_forward(be, ax, W, b, N, in, out, ay);
        be->linear_backward(be, ady, ax, W, N, in, out, adx, 0, dW[p], db[p], 0);
        from_act(be, y[p], ay, (size_t)N * out);
        from_act(be, dx[p], adx, (size_t)N * in);
        be->free(be, ax);
        be->free(be, ady);
    }
    const double ey = rel_err_f(y[1], y[0], (size_t)N * out), edx = rel_err_f(dx[1], dx[0], (size_t)N * in);
    const double edW = rel_err_f(dW[1], dW[0], (size_t)out * in), edb = rel_err_f(db[1], db[0], out);
    print_message("linear bf16 vs fp32: y %.2e dx %.2e dW %.2e db %.2e\n", ey, edx, edW, edb);
    assert_true(ey <= 1e-2 && edx <= 1e-2 && edW <= 1e-2 && edb <= 1e-2);
    assert_true(ey >= 1e-5);  // it did round
    for (int p = 0; p < 2; p++) free(y[p]), free(dx[p]), free(dW[p]), free(db[p]);
    free(x), free(W), free(b), free(dy);
}

// One attention configuration run on both backends; forward outputs and all gradients compared.
static void check_attention(const Fixture *f, int shared, int causal, float dropout, int extras) {
    AttnShape s = {0};
    s.B = 2, s.T = 48, s.n_heads = 4;
    s.q_heads = s.k_heads = shared ? 1 : 4;
    s.v_heads = 4;
    s.qk_dim = 16, s.v_dim = 16;
    s.ldq = s.q_heads * s.qk_dim, s.ldk = s.k_heads * s.qk_dim, s.ldv = s.v_heads * s.v_dim;
    s.scale = 0.25f;
    s.causal = causal;
    s.dropout = dropout;
    s.seed = 99, s.offset = 3;
    const int BT = s.B * s.T, n = s.n_heads;
    const size_t nq = (size_t)BT * s.ldq, nk = (size_t)BT * s.ldk, nv = (size_t)BT * s.ldv, no = (size_t)BT * n * s.v_dim;
    float *q = random_floats(nq, 21, 1.0), *k = random_floats(nk, 22, 1.0), *v = random_floats(nv, 23, 1.0);
    float *dout = random_floats(no, 24, 1.0);
    int32_t *km = mhe_malloc((size_t)BT * sizeof *km);
    for (int i = 0; i < BT; i++) km[i] = i % 11 != 5;
    float *kb = extras ? random_floats((size_t)BT * n, 25, 0.5) : NULL;
    float *osc = extras ? random_floats((size_t)n * s.v_dim, 26, 1.0) : NULL;
    float *osh = extras ? random_floats((size_t)n * s.v_dim, 27, 1.0) : NULL;
    s.key_mask = km;

    s.out_scale = osc;
    s.out_shift = osh;
    Backend *bes[2] = {f->f32, f->bf16};
    float *out[2], *dq[2], *dk[2], *dv[2], *dkb[2], *dsc[2], *dsh[2];
    for (int p = 0; p < 2; p++) {
        Backend *be = bes[p];
        size_t saved_n, scratch_n;
        be->attention_sizes(be, &s, &saved_n, &scratch_n);
        float *saved = mhe_calloc(saved_n, sizeof(float)), *scratch = mhe_calloc(scratch_n, sizeof(float));
        out[p] = mhe_calloc(no, sizeof(float));
        dq[p] = mhe_calloc(nq, sizeof(float));
        dk[p] = mhe_calloc(nk, sizeof(float));
        dv[p] = mhe_calloc(nv, sizeof(float));
        dkb[p] = mhe_calloc((size_t)BT * n, sizeof(float));
        dsc[p] = mhe_calloc((size_t)n * s.v_dim, sizeof(float));
        dsh[p] = mhe_calloc((size_t)n * s.v_dim, sizeof(float));
        Act *aq = to_act(be, q, nq), *ak = to_act(be, k, nk), *av = to_act(be, v, nv);
        Act *ado = to_act(be, dout, no), *akb = kb ? to_act(be, kb, (size_t)BT * n) : NULL;
        Act *aout = to_act(be, out[p], no), *adq = to_act(be, dq[p], nq), *adk = to_act(be, dk[p], nk);
        Act *adv = to_act(be, dv[p], nv), *adkb = to_act(be, dkb[p], (size_t)BT * n);
        s.key_bias = akb;
        be->attention_forward(be, &s, aq, ak, av, aout, saved, scratch);
        be->attention_backward(be, &s, aq, ak, av, saved, ado, adq, adk, adv, extras ? adkb : NULL,
                               extras ? dsc[p] : NULL, extras ? dsh[p] : NULL, scratch);
        from_act(be, out[p], aout, no);
        from_act(be, dq[p], adq, nq);
        from_act(be, dk[p], adk, nk);
        from_act(be, dv[p], adv, nv);
        from_act(be, dkb[p], adkb, (size_t)BT * n);
        be->free(be, aq), be->free(be, ak), be->free(be, av), be->free(be, ado), be->free(be, akb);
        free(saved);
        free(scratch);
    }
    const double e[] = {rel_err_f(out[1], out[0], no), rel_err_f(dq[1], dq[0], nq), rel_err_f(dk[1], dk[0], nk),
                        rel_err_f(dv[1], dv[0], nv), extras ? rel_err_f(dkb[1], dkb[0], (size_t)BT * n) : 0,
                        extras ? rel_err_f(dsc[1], dsc[0], (size_t)n * s.v_dim) : 0};
    print_message("bf16 attention shared=%d causal=%d dropout=%g extras=%d: out %.2e dq %.2e dk %.2e dv %.2e "
                  "dkbias %.2e dscale %.2e\n", shared, causal, dropout, extras, e[0], e[1], e[2], e[3], e[4], e[5]);
    for (int i = 0; i < 6; i++) assert_true(e[i] <= 1e-2);
    assert_true(e[0] >= 1e-5);  // the bf16 path was taken
    for (int p = 0; p < 2; p++) {
        free(out[p]);
        free(dq[p]);
        free(dk[p]);
        free(dv[p]);
        free(dkb[p]);
        free(dsc[p]);
        free(dsh[p]);
    }
    free(q);
    free(k);
    free(v);
    free(dout);
    free(km);
    free(kb);
    free(osc);
    free(osh);
}

static void test_attention_bf16(void **state) {
    const Fixture *f = *state;
    check_attention(f, 0, 0, 0.0f, 0);
    check_attention(f, 0, 1, 0.1f, 1);
    check_attention(f, 1, 0, 0.0f, 1);
    check_attention(f, 1, 1, 0.1f, 0);
}

// The primitive cache empties itself past a few hundred shapes (the MLM head's row count changes
// every batch): 450 row counts in both precisions, each still right (bf16 against the rounded-
// operand oracle, 1e-5), and shapes from before the refill still work.
static void test_cache_refills(void **state) {
    const Fixture *f = *state;
    const int N = 24, K = 40, maxM = 450;
    float *A = random_floats((size_t)maxM * K, 31, 1.0), *B = random_floats((size_t)N * K, 32, 1.0);
    float *C = mhe_malloc((size_t)maxM * N * sizeof *C);
    double *ref = mhe_malloc((size_t)maxM * N * sizeof *ref);
    for (int pass = 0; pass < 2; pass++)
        for (int M = 1; M <= maxM; M += pass ? 37 : 1) {
            for (int p = 0; p < 2; p++) {
                Backend *be = p ? f->bf16 : f->f32;
                be->matmul(be, 0, 1, M, N, K, 1.0f, mat_f32(A, K), mat_f32(B, K), 0.0f, out_f32(C, N));
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double sum = 0;
                        for (int k = 0; k < K; k++)
                            sum += p ? oracle_bf16(A[(size_t)i * K + k]) * oracle_bf16(B[(size_t)j * K + k])
                                     : (double)A[(size_t)i * K + k] * B[(size_t)j * K + k];
                        ref[(size_t)i * N + j] = sum;
                    }
                assert_true(rel_err(C, ref, (size_t)M * N) <= 1e-5);
            }
        }
    free(A);
    free(B);
    free(C);
    free(ref);
}

static int setup(void **state) {
    Fixture *f = mhe_calloc(1, sizeof *f);
    f->f32 = backend_cpu_create_for(0, 0);
    f->bf16 = backend_cpu_create_for(0, 1);
    *state = f;
    return 0;
}
static int teardown(void **state) {
    Fixture *f = *state;
    f->f32->destroy(f->f32);
    f->bf16->destroy(f->bf16);
    free(f);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_bf16),
        cmocka_unit_test(test_linear_bf16),
        cmocka_unit_test(test_attention_bf16),
        cmocka_unit_test(test_cache_refills),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
