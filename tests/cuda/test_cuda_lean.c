// Lean bf16 twins (kernels/cuda/cuda_mirror.cu): in bf16 mode an activation that only matmuls
// read stops getting its fp32 copy after one optimizer step.  Two emulated bf16 backends run the
// same op sequence, one with MHE_CUDA_LEAN=0: the results must be bit-identical where the lean
// op stores exactly the value the dual store had (GELU, dropout), close where the lean form
// rounds the bias to bf16 (linear layers writing bf16), and an fp32 read of a lean buffer must
// get the twin's value back (widened) and pin the buffer dual; strided stores (column slices of
// one buffer) complete into one lean range; head_expand and its backward read lean inputs' twins;
// the attention backward with an output scale reads dout from its twin only.
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
    be->gelu_forward(be, GELU_ERF, (const Act *)(s->x), (Act *)(s->h), (size_t)M * K);
    be->matmul(be, 0, 0, M, N, K, 1.0f, mat_f32(s->h, K), mat_f32(s->W, N), 0.0f, out_f32(s->C, N));
    be->dropout(be, (const Act *)(s->C), (Act *)(s->d), (size_t)M * N, 0.25f, 7, (uint64_t)t);
    be->matmul(be, 1, 0, N, N, M, 1.0f, mat_f32(s->d, N), mat_f32(s->d, N), 0.0f, out_f32(s->G, N));
    // y [M, N] = h [M, K] Wᵀ with W as [N, K]: reuse the K x N weights read as [N, K]... a
    // fresh view is not needed: the shapes only have to be consistent, values are arbitrary.
    be->linear_forward(be, (const Act *)(s->h), s->W, s->b, M, K, N, (Act *)(s->y));
    be->matmul(be, 1, 0, N, N, M, 1.0f, mat_f32(s->y, N), mat_f32(s->y, N), 1.0f, out_f32(s->G, N));
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

// A lean side on random inputs after three steps: h, d and y lean (their fp32 stale).
static Side lean_side_after_three_steps(void) {
    float hx[M * K], hW[K * N], hb[N];
    for (int i = 0; i < M * K; i++) hx[i] = uniform();
    for (int i = 0; i < K * N; i++) hW[i] = uniform();
    for (int i = 0; i < N; i++) hb[i] = uniform();
    Side s = side(1, hx, hW, hb);
    for (int t = 0; t < 3; t++) step(&s, t);
    return s;
}

// The emulation's safety net: a lean buffer's fp32 data is NaN once the next op has declared its
// reads (emulated device memory is host memory), so an op reading it without declaring it would
// poison every test; a declared read (download) gets the value.
static void test_stale_fp32_is_poisoned_in_the_emulation(void **state) {
    (void)state;
    Side s = lean_side_after_three_steps();
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

// A memset overwrites every byte of its range: the stale marks inside it go (the twin's values
// are dead), with no widening pass before it — as a device-to-device copy.  A scatter target that
// is zeroed every step (the post-LN MLM backward's running gradient) stays lean that way.
static void test_zero_drops_stale_marks(void **state) {
    (void)state;
    Side s = lean_side_after_three_steps();
    size_t stale = 0;
    assert_int_equal(backend_cuda_mirror_lean(s.be, &stale), 3);
    assert_true(stale == (size_t)M * K + 2u * M * N);  // h, d, y
    CostReport r;
    backend_cuda_cost_start();
    s.be->zero(s.be, s.h, (size_t)M * K * sizeof(float));
    backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    assert_int_equal(r.launches, 1);  // the memset alone
    backend_cuda_mirror_lean(s.be, &stale);
    assert_true(stale == 2u * M * N);
    float h[M * K];
    download(&s, s.h, h, (size_t)M * K);
    for (int i = 0; i < M * K; i++) assert_true(h[i] == 0.0f);
    side_free(&s);
}

// Strided stores (cuda_mirror.cu bands): three column slices of one [M, 3 DS] buffer Z, written
// by head_expand_backward (n = 1: dx = dout) as the fused Q/K/V projections' dQ, dK, dV are,
// then Z read whole by a matmul.  Once the slices tile whole rows they are one range of Z's
// twin: lean after an epoch (Z's fp32 stale, the matmul bit-identical to the dual side's).  A
// slice written alone stays a pending band; a declared fp32 read settles it (widened) and widens
// the rest: the twin's values.
enum { DS = 8, LDZ = 3 * DS };
static void strided_step(Backend *be, float *const dout[3], float *Z, float *G, float *p) {
    for (int j = 0; j < 3; j++)
        be->head_expand_backward(be, (const Act *)(dout[j]), NULL, LDZ, NULL, M, 1, DS, (Act *)(Z + j * DS), 0, NULL, NULL);
    be->matmul(be, 1, 0, LDZ, LDZ, M, 1.0f, mat_f32(Z, LDZ), mat_f32(Z, LDZ), 0.0f, out_f32(G, LDZ));
    be->adamw_update(be, p, p, p + N, p + 2 * N, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
}

static void test_strided_slices_complete_a_lean_range(void **state) {
    (void)state;
    float hd[3][M * DS];
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < M * DS; i++) hd[j][i] = uniform();
    Backend *bes[2];
    float *dout[2][3], *Z[2], *G[2], *p[2];
    for (int k = 0; k < 2; k++) {
        if (k) setenv("MHE_CUDA_LEAN", "0", 1);
        bes[k] = backend_cuda_create(0, 1);
        unsetenv("MHE_CUDA_LEAN");
        for (int j = 0; j < 3; j++) dout[k][j] = dev(bes[k], hd[j], (size_t)M * DS);
        Z[k] = dev(bes[k], NULL, (size_t)M * LDZ);
        G[k] = dev(bes[k], NULL, (size_t)LDZ * LDZ);
        p[k] = dev(bes[k], NULL, 3 * N);
    }
    float ga[LDZ * LDZ], gb[LDZ * LDZ];
    for (int t = 0; t < 4; t++) {
        for (int k = 0; k < 2; k++) strided_step(bes[k], dout[k], Z[k], G[k], p[k]);
        bes[0]->download(bes[0], ga, G[0], sizeof ga);
        bes[1]->download(bes[1], gb, G[1], sizeof gb);
        assert_memory_equal(ga, gb, sizeof ga);
        size_t stale = 0;
        const long n_lean = backend_cuda_mirror_lean(bes[0], &stale);
        // Step 0 makes Z's twin, step 1's epoch turns it lean (no fp32 reader), stale from step 2.
        assert_int_equal(n_lean, t >= 1 ? 1 : 0);
        assert_true(stale == (t >= 2 ? (size_t)M * LDZ : 0u));
    }
    // One slice alone (dK of a backward that stopped there) on the lean Z: a pending stale band.
    // A declared fp32 read settles it and widens the rest: bf16 of every current value, where the
    // dual side has the exact ones.
    for (int k = 0; k < 2; k++) {
        bes[k]->scale(bes[k], dout[k][1], 2.0f, (size_t)M * DS);
        bes[k]->head_expand_backward(bes[k], (const Act *)(dout[k][1]), NULL, LDZ, NULL, M, 1, DS, (Act *)(Z[k] + DS), 0, NULL, NULL);
    }
    float zl[M * LDZ], zd[M * LDZ];
    bes[0]->download(bes[0], zl, Z[0], sizeof zl);
    bes[1]->download(bes[1], zd, Z[1], sizeof zd);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < LDZ; c++) {
            const float want = (c / DS == 1 ? 2.0f : 1.0f) * hd[c / DS][r * DS + c % DS];
            assert_true(zd[r * LDZ + c] == want);
            assert_true(zl[r * LDZ + c] == bf16_round(want));
        }
    for (int k = 0; k < 2; k++) {
        for (int j = 0; j < 3; j++) bes[k]->free(bes[k], dout[k][j]);
        bes[k]->free(bes[k], Z[k]);
        bes[k]->free(bes[k], G[k]);
        bes[k]->free(bes[k], p[k]);
        bes[k]->destroy(bes[k]);
    }
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
    be->linear_gelu_forward(be, GELU_TANH, (const Act *)(x), W1, b1, M, K, F, (Act *)(u), (Act *)(g));
    be->linear_forward(be, (const Act *)(g), W2, b2, M, F, N, (Act *)(y));
    be->matmul(be, 1, 0, N, N, M, 1.0f, mat_f32(y, N), mat_f32(y, N), 0.0f, out_f32(G, N));
    be->linear_backward_gelu(be, GELU_TANH, (const Act *)(e), (const Act *)(g), W2, M, F, N, (const Act *)(u), (Act *)(dF), dW2, db2);
    be->matmul(be, 0, 0, M, K, F, 1.0f, mat_f32(dF, F), mat_f32(W1, K), 0.0f, out_f32(dX, K));
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
    if (getenv("MHE_TEST_VERBOSE")) fprintf(stderr, "worst %g scale %g tol %g\n", worst, scale, tol);
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

// Host tensors of the given sizes, uniform in [-0.5, 0.5) (tensor 0, the input, [-2, 2)), tensor
// `ones` (-1: none) shifted by 1 (a LayerNorm's gamma).
static void random_host(int T, const size_t *sizes, float **host, int ones) {
    for (int i = 0; i < T; i++) {
        host[i] = malloc(sizes[i] * sizeof(float));
        for (size_t j = 0; j < sizes[i]; j++) host[i][j] = (i == 0 ? 2.0f : 0.5f) * uniform() + (i == ones ? 1.0f : 0.0f);
    }
}
typedef void (*StepFn)(Backend *be, float *const *t, int step);
// One step on both sides, the lean side's calls recorded in *r.
static void step_both(StepFn fn, Backend **bes, float *const *t0, float *const *t1, int step, CostReport *r) {
    backend_cuda_cost_start();
    fn(bes[0], t0, step);
    backend_cuda_cost_stop(gpu_spec_find("h100"), r);
    fn(bes[1], t1, step);
}

// The two backends the comparisons below run side by side: [0] with lean twins, [1] without
// (MHE_CUDA_LEAN=0), each holding its own upload of the T host tensors.
static void two_sides(int T, const size_t *sizes, float *const *host, Backend **bes, float **t0, float **t1) {
    for (int side = 0; side < 2; side++) {
        if (side) setenv("MHE_CUDA_LEAN", "0", 1);
        bes[side] = backend_cuda_create(0, 1);
        unsetenv("MHE_CUDA_LEAN");
        for (int i = 0; i < T; i++) (side ? t1 : t0)[i] = dev(bes[side], host[i], sizes[i]);
    }
}
static void two_sides_free(int T, float **host, Backend **bes, float **t0, float **t1) {
    for (int side = 0; side < 2; side++) {
        for (int i = 0; i < T; i++) bes[side]->free(bes[side], (side ? t1 : t0)[i]);
        bes[side]->destroy(bes[side]);
    }
    for (int i = 0; i < T; i++) free(host[i]);
}

static void test_ffn_gelu_epilogues_match_separate_ops(void **state) {
    (void)state;
    enum { T = 18 };
    const size_t sizes[T] = {M * K, F * K, F, M * F, M * F, N * F, N, M * N, N * N,
                             M * N, M * F, N * F, N, M * K, N, N, N, N};
    float *host[T];
    random_host(T, sizes, host, -1);
    Backend *bes[2];
    float *t[2][T];
    two_sides(T, sizes, host, bes, t[0], t[1]);
    for (int step = 0; step < 4; step++) {
        CostReport r;
        step_both(ffn_step, bes, t[0], t[1], step, &r);
        // Step 0 makes the twins, step 1's epoch turns u, g and dF lean: fused from step 2 on.
        assert_int_equal(calls_labelled(&r, " +bias+gelu"), step >= 2);
        assert_int_equal(calls_labelled(&r, " +dgelu"), step >= 2);
        expect_near(bes[0], bes[1], t[0][8], t[1][8], N * N, 3e-2);   // G = yᵀy (y from g)
        expect_near(bes[0], bes[1], t[0][11], t[1][11], N * F, 3e-2); // dW2 = eᵀ g
        expect_near(bes[0], bes[1], t[0][12], t[1][12], N, 1e-5);     // db2 = Σ e
        expect_near(bes[0], bes[1], t[0][13], t[1][13], M * K, 3e-2); // dX = dF W1
    }
    two_sides_free(T, host, bes, t[0], t[1]);
}

// head_expand and its backward read their inputs from the twins once those are lean
// (cuda_elementwise.cu): X (the first DS columns of rows LDZ apart, as Q of the fused projections;
// the buffer ends with the last row's slice, so the slice's span is all of it) and dQ come from
// p = 0 dropouts (copies: exact, and lean-capable) that only these ops read, so from step 2 on
// they are bf16 only.  Checked against the host: the per-head output equals
// bf16(bf16(x) · mul) exactly, dmul = Σ_r bf16(dout) · bf16(x) (1e-5, the column sums' order),
// dx = bf16(Σ_h bf16(dout) · mul) within one bf16 step; and dmul from the fp32 values is
// measurably different (the test would see an fp32 read).
enum { HN = 3 };
static void test_head_expand_reads_lean_twins(void **state) {
    (void)state;
    const size_t nx = (size_t)(M - 1) * LDZ + DS, nq = (size_t)M * HN * DS, nm = (size_t)HN * DS;
    float *hx = malloc(nx * 4), *hq = malloc(nq * 4), hm[HN * DS];
    for (size_t i = 0; i < nx; i++) hx[i] = 2.0f * uniform();
    for (size_t i = 0; i < nq; i++) hq[i] = uniform();
    for (size_t i = 0; i < nm; i++) hm[i] = 1.0f + 0.5f * uniform();
    Backend *be = backend_cuda_create(0, 1);
    float *xs = dev(be, hx, nx), *X = dev(be, NULL, nx), *qs = dev(be, hq, nq), *dQ = dev(be, NULL, nq);
    float *mul = dev(be, hm, nm), *out = dev(be, NULL, nq), *dX = dev(be, NULL, (size_t)M * LDZ), *dmul = dev(be, NULL, nm);
    float *G = dev(be, NULL, nm * nm), *p = dev(be, NULL, 3 * N);
    for (int t = 0; t < 4; t++) {
        be->dropout(be, (const Act *)(xs), (Act *)(X), nx, 0.0f, 1, (uint64_t)t);
        be->dropout(be, (const Act *)(qs), (Act *)(dQ), nq, 0.0f, 1, (uint64_t)t);
        be->head_expand(be, (const Act *)(X), LDZ, mul, NULL, M, HN, DS, (Act *)(out));
        be->matmul(be, 1, 0, HN * DS, HN * DS, M, 1.0f, mat_f32(out, HN * DS), mat_f32(out, HN * DS), 0.0f, out_f32(G, HN * DS));
        be->zero(be, dmul, nm * sizeof(float));
        be->head_expand_backward(be, (const Act *)(dQ), (const Act *)(X), LDZ, mul, M, HN, DS, (Act *)(dX + DS), 0, dmul, NULL);
        be->adamw_update(be, p, p, p + N, p + 2 * N, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
    }
    float *ho = malloc(nq * 4), *hdx = malloc((size_t)M * LDZ * 4), hdm[HN * DS];
    be->download(be, ho, out, nq * 4);
    be->download(be, hdx, dX, (size_t)M * LDZ * 4);
    be->download(be, hdm, dmul, nm * 4);
    double worst = 0, apart = 0, scale = 1e-3;
    for (int r = 0; r < M; r++)
        for (int h = 0; h < HN; h++)
            for (int c = 0; c < DS; c++) {
                const float xb = bf16_round(hx[(size_t)r * LDZ + c]);
                assert_true(ho[((size_t)r * HN + h) * DS + c] == bf16_round(xb * hm[h * DS + c]));
            }
    for (int h = 0; h < HN; h++)
        for (int c = 0; c < DS; c++) {
            double want = 0, fp32 = 0;
            for (int r = 0; r < M; r++) {
                const float g = hq[((size_t)r * HN + h) * DS + c], x = hx[(size_t)r * LDZ + c];
                want += (double)bf16_round(g) * bf16_round(x);
                fp32 += (double)g * x;
            }
            if (fabs(want) > scale) scale = fabs(want);
            worst = fmax(worst, fabs(hdm[h * DS + c] - want));
            apart = fmax(apart, fabs(fp32 - want));
        }
    assert_true(worst <= 1e-5 * scale);
    assert_true(apart > 1e-3 * scale);
    for (int r = 0; r < M; r++)
        for (int c = 0; c < DS; c++) {
            float want = 0;
            for (int h = 0; h < HN; h++) want += bf16_round(hq[((size_t)r * HN + h) * DS + c]) * hm[h * DS + c];
            assert_true(fabsf(hdx[(size_t)r * LDZ + DS + c] - want) <= 0x1p-7f * fabsf(want) + 1e-6f);
        }
    float *all[] = {xs, X, qs, dQ, mul, out, dX, dmul, G, p};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(be, all[i]);
    be->destroy(be);
    free(hx);
    free(hq);
    free(ho);
    free(hdx);
}

// Post-LN's residual stream in bf16, forward and backward: two residual steps (x + dropout(
// linear(x)), LayerNorm), both LayerNorm backwards with a matmul adding into the gradient
// between them (the up projection's dX), and a dropout in place on the last one's dx (the
// embeddings' dropout).  Once the epochs have seen that only matmuls, residual steps, LayerNorm
// backwards and dropout read them, the sums s, the LayerNorm outputs and the gradients keep
// twins only: the residual step reads x and r from twins (cuda_norm_loss.cu's RlnTwins), the
// backward dy and x̂ (LnbTwins), the matmul adds into dy's twin (a bf16 C) and the dropout reads
// its twin.  Against the dual side (every read in fp32) the results agree to bf16 precision.
static void residual_step(Backend *be, float *const *t, int step) {
    float *x0 = t[0], *W1 = t[1], *b1 = t[2], *r1 = t[3], *h = t[4], *W2 = t[5], *b2 = t[6], *r2 = t[7];
    float *out = t[8], *G = t[9], *e = t[10], *dB = t[11], *dA = t[12], *ga = t[13], *be_ = t[14];
    float *dg = t[15], *db = t[16], *mu1 = t[17], *rs1 = t[18], *mu2 = t[19], *rs2 = t[20];
    float *p = t[21], *pg = t[22], *pm = t[23], *pv = t[24], *G2 = t[25];
    be->zero(be, dg, N * sizeof(float));
    be->zero(be, db, N * sizeof(float));
    be->linear_forward(be, (const Act *)(x0), W1, b1, M, N, N, (Act *)(r1));
    be->residual_layernorm_forward(be, (const Act *)(x0), (const Act *)(r1), 0.1f, 9, 2u * (uint64_t)step, ga, be_, M, N, 1e-5f, (Act *)(r1), (Act *)(h), mu1, rs1);
    be->linear_forward(be, (const Act *)(h), W2, b2, M, N, N, (Act *)(r2));
    be->residual_layernorm_forward(be, (const Act *)(h), (const Act *)(r2), 0.1f, 9, 2u * (uint64_t)step + 1, ga, be_, M, N, 1e-5f, (Act *)(r2), (Act *)(out), mu2,
                                   rs2);
    be->matmul(be, 1, 0, N, N, M, 1.0f, mat_f32(out, N), mat_f32(out, N), 0.0f, out_f32(G, N));
    be->layernorm_backward(be, (const Act *)(e), (const Act *)(r2), ga, mu2, rs2, M, N, (Act *)(dB), 0, dg, db);
    be->matmul(be, 0, 0, M, N, N, 0.5f, mat_f32(h, N), mat_f32(W2, N), 1.0f, out_f32(dB, N));
    be->layernorm_backward(be, (const Act *)(dB), (const Act *)(r1), ga, mu1, rs1, M, N, (Act *)(dA), 0, dg, db);
    be->dropout(be, (const Act *)(dA), (Act *)(dA), (size_t)M * N, 0.1f, 9, 100u + (uint64_t)step);
    be->matmul(be, 1, 0, N, N, M, 1.0f, mat_f32(dA, N), mat_f32(dA, N), 0.0f, out_f32(G2, N));
    be->adamw_update(be, p, pg, pm, pv, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
}

static void test_residual_stream_turns_lean(void **state) {
    (void)state;
    enum { T = 26 };
    const size_t MN = (size_t)M * N;
    const size_t sizes[T] = {MN, N * N, N, MN, MN, N * N, N, MN, MN, N * N, MN, MN, MN,
                             N, N, N, N, M, M, M, M, N, N, N, N, N * N};
    float *host[T];
    random_host(T, sizes, host, 13);
    Backend *bes[2];
    float *t[2][T];
    two_sides(T, sizes, host, bes, t[0], t[1]);
    for (int step = 0; step < 4; step++) {
        CostReport r;
        step_both(residual_step, bes, t[0], t[1], step, &r);
        // Step 0 makes the twins; its epoch turns the sums lean (their writer, the residual step,
        // saw them made): both backwards read bf16(s) from step 1.  Step 1's epoch turns the
        // linear outputs r1, r2, h and the gradients dB, dA lean: from step 2 the first residual
        // step reads r1's twin (x0 is uploaded fp32), the second both twins, LN1's backward dB's
        // twin (LN2's reads the uploaded e), the matmul adds into dB's twin and the dropout
        // reads dA's.
        assert_int_equal(calls_labelled(&r, "<RlnBranchTwin>"), step >= 2);
        assert_int_equal(calls_labelled(&r, "<RlnTwins>"), step >= 2);
        assert_int_equal(calls_labelled(&r, "<RlnFp32>"), step >= 2 ? 0 : 2);
        assert_int_equal(calls_labelled(&r, "layernorm_backward_kernel<LnbSumTwin>"), step == 0 ? 0 : step == 1 ? 2 : 1);
        assert_int_equal(calls_labelled(&r, "layernorm_backward_kernel<LnbTwins>"), step >= 2);
        assert_int_equal(calls_labelled(&r, "gemm 24x16x16 bf16->bf16"), step >= 2);
        assert_int_equal(calls_labelled(&r, "dropout_kernel<__nv_bfloat16>"), step >= 2);
        expect_near(bes[0], bes[1], t[0][9], t[1][9], N * N, 3e-2);   // G = outᵀ out
        // Through both backwards (x̂, dy and the matmul's sum in bf16 on the lean side): up to 6e-3
        // of the largest seen for G2, 2e-3 for dγ and dβ.
        expect_near(bes[0], bes[1], t[0][25], t[1][25], N * N, 2e-2); // G2 = dAᵀ dA, dA dropped out
        expect_near(bes[0], bes[1], t[0][15], t[1][15], N, 1e-2);     // dγ
        expect_near(bes[0], bes[1], t[0][16], t[1][16], N, 1e-2);     // dβ (LN1's dy is LN2's dx)
    }
    two_sides_free(T, host, bes, t[0], t[1]);
}

// mhe_mul's attention backward on the tensor-core path (d = 16, 3 heads sharing K and V, an
// output scale and shift with their gradients, dropout): the row dots read dout from its twin
// also with out_scale (G = bf16(bf16(dout) · out_scale)), so nothing reads dout in fp32 and the
// GEMM producing it (the output projection's dX) writes bf16 only from step 2 on.  The row dots'
// cost states 2 B per dout element; the scale/shift gradients match the dual side bit for bit
// (both read the twin) and every output matches the CPU backend norm-wise within 1e-2.
enum { AB = 2, AT = 40, AH = 3, AD = 16, AR = AB * AT, AC = AH * AD };
static void attention_step(Backend *be, float *const *t, int step) {
    float *A = t[0], *W = t[1], *dout = t[2], *q = t[3], *k = t[4], *v = t[5], *osc = t[6], *osh = t[7];
    float *out = t[8], *dq = t[9], *dk = t[10], *dv = t[11], *dosc = t[12], *dosh = t[13];
    float *p = t[14], *pg = t[15], *pm = t[16], *pv = t[17], *saved = t[18], *scratch = t[19];
    AttnShape s = {.B = AB, .T = AT, .n_heads = AH, .q_heads = AH, .k_heads = 1, .v_heads = 1, .qk_dim = AD,
                   .v_dim = AD, .ldq = AC, .ldk = AD, .ldv = AD, .scale = 0.25f, .out_scale = osc,
                   .out_shift = osh, .dropout = 0.1f, .seed = 5, .offset = (uint64_t)step};
    be->zero(be, dosc, AC * sizeof(float));
    be->zero(be, dosh, AC * sizeof(float));
    be->matmul(be, 0, 0, AR, AC, N, 1.0f, mat_f32(A, N), mat_f32(W, AC), 0.0f, out_f32(dout, AC));
    be->attention_forward(be, &s, (const Act *)(q), (const Act *)(k), (const Act *)(v), (Act *)(out), saved, scratch);
    be->attention_backward(be, &s, (const Act *)(q), (const Act *)(k), (const Act *)(v), saved, (const Act *)(dout), (Act *)(dq), (Act *)(dk), (Act *)(dv), NULL, dosc, dosh, scratch);
    be->adamw_update(be, p, pg, pm, pv, N, 0.9f, 0.999f, 1e-8f, 1e-3f, 1.0f, 1.0f, 1.0f);
}
static const CostEntry *entry_labelled(const CostReport *r, const char *label) {
    for (int i = 0; i < r->n_top; i++)
        if (strcmp(r->top[i].label, label) == 0) return &r->top[i];
    return NULL;
}
// ‖a − b‖ / ‖b‖ of n floats of two backends.
static double rel_norm(Backend *a, Backend *b, const float *pa, const float *pb, size_t n) {
    float *ha = malloc(n * sizeof(float)), *hb = malloc(n * sizeof(float));
    a->download(a, ha, pa, n * sizeof(float));
    b->download(b, hb, pb, n * sizeof(float));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)ha[i] - hb[i]) * ((double)ha[i] - hb[i]);
        den += (double)hb[i] * hb[i];
    }
    free(ha);
    free(hb);
    if (getenv("MHE_TEST_VERBOSE")) fprintf(stderr, "relative %g\n", sqrt(num / fmax(den, 1e-30)));
    return sqrt(num / fmax(den, 1e-30));
}

static void test_attention_dout_turns_lean_with_out_scale(void **state) {
    (void)state;
    enum { T = 20, TD = 18 };  // TD tensors uploaded; saved and scratch per backend
    const size_t sizes[TD] = {(size_t)AR * N, (size_t)N * AC, (size_t)AR * AC, (size_t)AR * AC, (size_t)AR * AD,
                              (size_t)AR * AD, AC, AC, (size_t)AR * AC, (size_t)AR * AC, (size_t)AR * AD,
                              (size_t)AR * AD, AC, AC, N, N, N, N};
    float *host[TD];
    random_host(TD, sizes, host, 6);
    Backend *bes[2], *cpu = backend_cpu_create(1);
    float *t[3][T];
    two_sides(TD, sizes, host, bes, t[0], t[1]);
    for (int i = 0; i < TD; i++) t[2][i] = dev(cpu, host[i], sizes[i]);
    Backend *all[3] = {bes[0], bes[1], cpu};
    AttnShape s = {.B = AB, .T = AT, .n_heads = AH, .q_heads = AH, .k_heads = 1, .v_heads = 1, .qk_dim = AD, .v_dim = AD};
    for (int side = 0; side < 3; side++) {
        size_t sv = 0, sc = 0;
        all[side]->attention_sizes(all[side], &s, &sv, &sc);
        t[side][18] = dev(all[side], NULL, sv);
        t[side][19] = dev(all[side], NULL, sc);
    }
    const double el = (double)AR * AC;
    for (int step = 0; step < 4; step++) {
        CostReport r;
        step_both(attention_step, bes, t[0], t[1], step, &r);
        attention_step(cpu, t[2], step);
        // Step 0 makes the twins; step 1's epoch sees dout read by nothing in fp32.
        assert_int_equal(calls_labelled(&r, "gemm 80x48x16 bf16->bf16"), step >= 2);
        const CostEntry *rd = entry_labelled(&r, "flash_rowdot_sums_kernel<__nv_bfloat16>");
        assert_non_null(rd);
        assert_int_equal(rd->calls, 1);
        // dout's twin (2 B) + Opre (4) + the scaled G stored (2) per element, D, one chunk of
        // partials (Σ dout ⊙ Opre and Σ dout).
        assert_true(fabs(rd->bytes - (8.0 * el + 4.0 * AR * AH + 4.0 * 2 * AC)) < 0.5);
        for (int side = 0; side < 2; side++) {
            assert_true(rel_norm(bes[side], cpu, t[side][8], t[2][8], (size_t)AR * AC) <= 1e-2);  // out
            assert_true(rel_norm(bes[side], cpu, t[side][9], t[2][9], (size_t)AR * AC) <= 1e-2);  // dq
            assert_true(rel_norm(bes[side], cpu, t[side][10], t[2][10], (size_t)AR * AD) <= 1e-2);  // dk
            assert_true(rel_norm(bes[side], cpu, t[side][11], t[2][11], (size_t)AR * AD) <= 1e-2);  // dv
            assert_true(rel_norm(bes[side], cpu, t[side][12], t[2][12], AC) <= 1e-2);  // dout_scale
            assert_true(rel_norm(bes[side], cpu, t[side][13], t[2][13], AC) <= 1e-2);  // dout_shift
        }
        for (int g = 12; g <= 13; g++) assert_true(rel_norm(bes[0], bes[1], t[0][g], t[1][g], AC) == 0.0);
    }
    for (int side = 0; side < 3; side++)
        for (int i = TD; i < T; i++) all[side]->free(all[side], t[side][i]);
    for (int i = 0; i < TD; i++) cpu->free(cpu, t[2][i]);
    cpu->destroy(cpu);
    two_sides_free(TD, host, bes, t[0], t[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lean_matches_dual),
        cmocka_unit_test(test_stale_fp32_is_poisoned_in_the_emulation),
        cmocka_unit_test(test_zero_drops_stale_marks),
        cmocka_unit_test(test_strided_slices_complete_a_lean_range),
        cmocka_unit_test(test_ffn_gelu_epilogues_match_separate_ops),
        cmocka_unit_test(test_head_expand_reads_lean_twins),
        cmocka_unit_test(test_residual_stream_turns_lean),
        cmocka_unit_test(test_attention_dout_turns_lean_with_out_scale),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
