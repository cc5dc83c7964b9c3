// Lean bf16 twins (kernels/cuda/cuda_mirror.cu): in bf16 mode an activation that only matmuls
// read stops getting its fp32 copy after one optimizer step.  Two emulated bf16 backends run the
// same op sequence, one with MHE_CUDA_LEAN=0: the results must be bit-identical where the lean
// op stores exactly the value the dual store had (GELU, dropout), close where the lean form
// rounds the bias to bf16 (linear layers writing bf16), and an fp32 read of a lean buffer must
// get the twin's value back (widened) and pin the buffer dual.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/backend_info.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"

enum { M = 24, K = 40, N = 16 };

typedef struct {
    Backend *be;
    float *x, *h, *W, *C, *d, *G, *b, *y, *p, *g, *m, *v;
} Side;

static uint64_t rng = 0x1234;
static float uniform(void) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static float *dev(Backend *be, const float *host, size_t n) {
    float *p = be->alloc(be, n * sizeof(float));
    if (host) be->upload(be, p, host, n * sizeof(float));
    return p;
}

static Side side(int lean, const float *hx, const float *hW, const float *hb) {
    if (!lean) setenv("MHE_CUDA_LEAN", "0", 1);
    Side s = {.be = backend_cuda_create(0, 1)};
    unsetenv("MHE_CUDA_LEAN");
    Backend *be = s.be;
    s.x = dev(be, hx, (size_t)M * K);
    s.h = dev(be, NULL, (size_t)M * K);
    s.W = dev(be, hW, (size_t)K * N);
    s.C = dev(be, NULL, (size_t)M * N);
    s.d = dev(be, NULL, (size_t)M * N);
    s.G = dev(be, NULL, (size_t)N * N);
    s.b = dev(be, hb, N);
    s.y = dev(be, NULL, (size_t)M * N);
    s.p = dev(be, hb, N);  // a stand-in parameter: its optimizer step ends an epoch
    s.g = dev(be, hb, N);
    s.m = dev(be, NULL, N);
    s.v = dev(be, NULL, N);
    return s;
}

static void side_free(Side *s) {
    float *all[] = {s->x, s->h, s->W, s->C, s->d, s->G, s->b, s->y, s->p, s->g, s->m, s->v};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) s->be->free(s->be, all[i]);
    s->be->destroy(s->be);
}

// One "training step": h = gelu(x); C = h W (h a matmul operand only); d = dropout(C) (only read
// by the next matmul); G = dᵀ d; y = linear(h, Wᵀ, b) read by a matmul only (C again); then
// an optimizer step.
static void step(Side *s, int t) {
    Backend *be = s->be;
    be->gelu_forward(be, GELU_ERF, s->x, s->h, (size_t)M * K);
    be->matmul(be, 0, 0, M, N, K, 1.0f, s->h, K, s->W, N, 0.0f, s->C, N);
    be->dropout(be, s->C, s->d, (size_t)M * N, 0.25f, 7, (uint64_t)t);
    be->matmul(be, 1, 0, N, N, M, 1.0f, s->d, N, s->d, N, 0.0f, s->G, N);
    // y [M, N] = h [M, K] Wᵀ with W as [N, K]: reuse the K x N weights read as [N, K]... a
    // fresh view is not needed: the shapes only have to be consistent, values are arbitrary.
    be->linear_forward(be, s->h, s->W, s->b, M, K, N, s->y);
    be->matmul(be, 1, 0, N, N, M, 1.0f, s->y, N, s->y, N, 1.0f, s->G, N);
    be->adamw_update(be, s->p, s->g, s->m, s->v, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
}

static void download(Side *s, const float *p, float *host, size_t n) {
    s->be->download(s->be, host, p, n * sizeof(float));
}

static float bf16_round(float x) {  // round to nearest even, as __float2bfloat16
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static void test_lean_matches_dual(void **state) {
    (void)state;
    float hx[M * K], hW[K * N], hb[N];
    for (int i = 0; i < M * K; i++) hx[i] = 2.0f * uniform();
    for (int i = 0; i < K * N; i++) hW[i] = uniform();
    for (int i = 0; i < N; i++) hb[i] = 0.3f * uniform();
    Side lean = side(1, hx, hW, hb), dual = side(0, hx, hW, hb);
    float a[M * N], b[M * N], ga[N * N], gb[N * N];
    for (int t = 0; t < 5; t++) {
        step(&lean, t);
        step(&dual, t);
        // C = gelu(x) W reads h's twin on both sides: lean or not, the same bf16 values.
        download(&lean, lean.C, a, (size_t)M * N);
        download(&dual, dual.C, b, (size_t)M * N);
        assert_memory_equal(a, b, sizeof a);
        // G adds yᵀy, y from the bf16-bias GEMM on the lean side from step 2 on: close, not equal.
        download(&lean, lean.G, ga, (size_t)N * N);
        download(&dual, dual.G, gb, (size_t)N * N);
        double worst = 0, scale = 1e-3;
        for (int i = 0; i < N * N; i++) {
            scale = fmax(scale, fabs(gb[i]));
            worst = fmax(worst, fabs((double)ga[i] - gb[i]));
        }
        assert_true(worst <= 2e-2 * scale);
        size_t stale = 0;
        long n_lean = backend_cuda_mirror_lean(lean.be, &stale);
        // Step 0 makes the twins, step 1 shows who reads fp32 and its epoch turns h, d and y
        // lean (C is read in fp32 by dropout, G accumulated): stale fp32 from step 2 on.
        assert_int_equal(n_lean, t >= 1 ? 3 : 0);
        assert_true(stale == (t >= 2 ? (size_t)M * K + 2u * M * N : 0u));
        assert_int_equal(backend_cuda_mirror_lean(dual.be, NULL), 0);
    }
    // An fp32 read of the lean h (declared by download): the twin's values widened, i.e.
    // bf16(gelu(x)) of the dual side, and h is pinned dual from then on.
    float hl[M * K], hd[M * K];
    download(&lean, lean.h, hl, (size_t)M * K);
    download(&dual, dual.h, hd, (size_t)M * K);
    for (int i = 0; i < M * K; i++) assert_true(hl[i] == bf16_round(hd[i]));
    assert_int_equal(backend_cuda_mirror_lean(lean.be, NULL), 2);
    step(&lean, 5);
    step(&dual, 5);
    download(&lean, lean.h, hl, (size_t)M * K);
    download(&dual, dual.h, hd, (size_t)M * K);
    assert_memory_equal(hl, hd, sizeof hl);  // dual again: the exact fp32 values
    download(&lean, lean.C, a, (size_t)M * N);
    download(&dual, dual.C, b, (size_t)M * N);
    assert_memory_equal(a, b, sizeof a);
    side_free(&lean);
    side_free(&dual);
}

// The emulation's safety net: a lean buffer's fp32 data is NaN once the next op has declared its
// reads (emulated device memory is host memory), so an op reading it without declaring it would
// poison every test; a declared read (download) gets the value.
static void test_stale_fp32_is_poisoned_in_the_emulation(void **state) {
    (void)state;
    float hx[M * K], hW[K * N], hb[N];
    for (int i = 0; i < M * K; i++) hx[i] = uniform();
    for (int i = 0; i < K * N; i++) hW[i] = uniform();
    for (int i = 0; i < N; i++) hb[i] = uniform();
    Side s = side(1, hx, hW, hb);
    for (int t = 0; t < 3; t++) step(&s, t);
    // d = dropout(C) is lean; the next op's declaration (an unrelated read) fills it.
    s.be->scale(s.be, s.x, 1.0f, (size_t)M * K);
    s.be->synchronize(s.be);
    int nan = 0;
    for (int i = 0; i < M * N; i++) nan += isnan(s.d[i]);
    assert_int_equal(nan, M * N);
    float d[M * N];
    download(&s, s.d, d, (size_t)M * N);
    for (int i = 0; i < M * N; i++) assert_false(isnan(d[i]));
    side_free(&s);
}

// The FFN with its GELU fused into the GEMMs (cuda_linear.cu: cuBLASLt's GELU_AUX_BIAS and DGELU
// epilogues, GELU_TANH) once u, g and the GELU's input gradient are lean, against the dual side,
// which runs linear, GELU, linear backward and GELU backward as separate ops: the results agree
// to bf16 precision (the fused forward takes GELU of the fp32 sum, the fused backward multiplies
// the fp32 product), and the fused calls are the ones that ran.
enum { F = 32 };
static void ffn_step(Backend *be, float *const *t, int step) {
    float *x = t[0], *W1 = t[1], *b1 = t[2], *u = t[3], *g = t[4], *W2 = t[5], *b2 = t[6], *y = t[7], *G = t[8];
    float *e = t[9], *dF = t[10], *dW2 = t[11], *db2 = t[12], *dX = t[13], *p = t[14], *pg = t[15];
    float *pm = t[16], *pv = t[17];
    be->zero(be, dW2, (size_t)N * F * sizeof(float));
    be->zero(be, db2, N * sizeof(float));
    be->linear_gelu_forward(be, GELU_TANH, x, W1, b1, M, K, F, u, g);
    be->linear_forward(be, g, W2, b2, M, F, N, y);
    be->matmul(be, 1, 0, N, N, M, 1.0f, y, N, y, N, 0.0f, G, N);
    be->linear_backward_gelu(be, GELU_TANH, e, g, W2, M, F, N, u, dF, dW2, db2);
    be->matmul(be, 0, 0, M, K, F, 1.0f, dF, F, W1, K, 0.0f, dX, K);
    be->adamw_update(be, p, pg, pm, pv, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
    (void)step;
}

static void expect_near(Backend *a, Backend *b, const float *pa, const float *pb, size_t n, double tol) {
    float *ha = malloc(n * sizeof(float)), *hb = malloc(n * sizeof(float));
    a->download(a, ha, pa, n * sizeof(float));
    b->download(b, hb, pb, n * sizeof(float));
    double worst = 0, scale = 1e-3;
    for (size_t i = 0; i < n; i++) {
        scale = fmax(scale, fabs(hb[i]));
        worst = fmax(worst, fabs((double)ha[i] - hb[i]));
    }
    free(ha);
    free(hb);
    assert_true(worst <= tol * scale);
}

static long calls_labelled(const CostReport *r, const char *suffix) {
    long n = 0;
    for (int i = 0; i < r->n_top; i++) {
        const size_t l = strlen(r->top[i].label), ls = strlen(suffix);
        if (l >= ls && strcmp(r->top[i].label + l - ls, suffix) == 0) n += r->top[i].calls;
    }
    return n;
}

static void test_ffn_gelu_epilogues_match_separate_ops(void **state) {
    (void)state;
    enum { T = 18 };
    const size_t sizes[T] = {M * K, F * K, F, M * F, M * F, N * F, N, M * N, N * N,
                             M * N, M * F, N * F, N, M * K, N, N, N, N};
    float *host[T];
    for (int i = 0; i < T; i++) {
        host[i] = malloc(sizes[i] * sizeof(float));
        for (size_t j = 0; j < sizes[i]; j++) host[i][j] = (i == 0 ? 2.0f : 0.5f) * uniform();
    }
    Backend *bes[2];
    float *t[2][T];
    for (int side = 0; side < 2; side++) {
        if (side) setenv("MHE_CUDA_LEAN", "0", 1);
        bes[side] = backend_cuda_create(0, 1);
        unsetenv("MHE_CUDA_LEAN");
        for (int i = 0; i < T; i++) t[side][i] = dev(bes[side], host[i], sizes[i]);
    }
    for (int step = 0; step < 4; step++) {
        CostReport r;
        backend_cuda_cost_start();
        ffn_step(bes[0], t[0], step);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        ffn_step(bes[1], t[1], step);
        // Step 0 makes the twins, step 1's epoch turns u, g and dF lean: fused from step 2 on.
        assert_int_equal(calls_labelled(&r, " +bias+gelu"), step >= 2);
        assert_int_equal(calls_labelled(&r, " +dgelu"), step >= 2);
        expect_near(bes[0], bes[1], t[0][8], t[1][8], N * N, 3e-2);   // G = yᵀy (y from g)
        expect_near(bes[0], bes[1], t[0][11], t[1][11], N * F, 3e-2); // dW2 = eᵀ g
        expect_near(bes[0], bes[1], t[0][12], t[1][12], N, 1e-5);     // db2 = Σ e
        expect_near(bes[0], bes[1], t[0][13], t[1][13], M * K, 3e-2); // dX = dF W1
    }
    for (int side = 0; side < 2; side++) {
        for (int i = 0; i < T; i++) bes[side]->free(bes[side], t[side][i]);
        bes[side]->destroy(bes[side]);
    }
    for (int i = 0; i < T; i++) free(host[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lean_matches_dual),
        cmocka_unit_test(test_stale_fp32_is_poisoned_in_the_emulation),
        cmocka_unit_test(test_ffn_gelu_epilogues_match_separate_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
