// Parity of every op of kernels/ops.h: the CUDA backend (run through the CPU emulation of CUDA,
// kernels/cuda/emu) against the CPU backend on the same inputs.  Tolerance is norm-wise:
// max|cuda - cpu| <= tol * max(max|cpu|, 1e-3), tol = 1e-5 in fp32 mode, 1e-2 in bf16 mode.
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

typedef struct {
    Backend *cpu, *gpu;
    uint64_t rng;
    int gpu_bf16;  // the CUDA backend runs in bf16 mode
} Fix;

// A buffer mirrored on both backends, with a host copy of its initial contents.
typedef struct {
    size_t n;
    float *host, *c, *g;
} Buf;

static float uniform(Fix *f) {
    f->rng = f->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((f->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static Buf buf_new(Fix *f, size_t n, float lo, float hi) {
    Buf b = {n, malloc((n ? n : 1) * sizeof(float)), NULL, NULL};
    for (size_t i = 0; i < n; i++) b.host[i] = lo + (hi - lo) * 0.5f * (uniform(f) + 1.0f);
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * sizeof(float));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload(f->gpu, b.g, b.host, n * sizeof(float));
    return b;
}
static Buf buf_rand(Fix *f, size_t n) { return buf_new(f, n, -1.0f, 1.0f); }

static void buf_free(Fix *f, Buf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
    free(b->host);
}

typedef struct {
    int32_t *c, *g;
} IBuf;

static IBuf ibuf_new(Fix *f, const int32_t *host, size_t n) {
    IBuf b = {f->cpu->alloc(f->cpu, n * 4), f->gpu->alloc(f->gpu, n * 4)};
    f->cpu->upload(f->cpu, b.c, host, n * 4);
    f->gpu->upload(f->gpu, b.g, host, n * 4);
    return b;
}
static void ibuf_free(Fix *f, IBuf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
}

// Compares the two copies; returns the norm-wise relative error after asserting it.
static double expect_close(Fix *f, const Buf *b, double tol, const char *what) {
    float *x = malloc(b->n * sizeof(float)), *y = malloc(b->n * sizeof(float));
    f->cpu->download(f->cpu, x, b->c, b->n * sizeof(float));
    f->gpu->download(f->gpu, y, b->g, b->n * sizeof(float));
    double mx = 1e-3, err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (fabs(x[i]) > mx) mx = fabs(x[i]);
        double e = fabs((double)x[i] - y[i]);
        if (!(e <= err)) {  // also catches NaN
            err = isnan(e) ? INFINITY : e;
            worst = i;
        }
    }
    double rel = err / mx;
    if (!(rel <= tol))
        print_error("%s: relative error %.3g > %.3g (element %zu: cpu %.8g cuda %.8g)\n", what, rel,
                    tol, worst, b->n ? x[worst] : 0.0, b->n ? y[worst] : 0.0);
    free(x);
    free(y);
    assert_true(rel <= tol);
    return rel;
}

static int setup_fp32(void **state) {
    Fix *f = calloc(1, sizeof *f);
    f->cpu = backend_cpu_create(2);
    f->gpu = backend_cuda_create(0, 0);
    f->rng = 12345;
    *state = f;
    return 0;
}
static int setup_bf16(void **state) {
    setup_fp32(state);
    Fix *f = *state;
    f->gpu->destroy(f->gpu);
    f->gpu = backend_cuda_create(0, 1);
    f->gpu_bf16 = 1;
    return 0;
}
static int teardown(void **state) {
    Fix *f = *state;
    f->cpu->destroy(f->cpu);
    f->gpu->destroy(f->gpu);
    free(f);
    return 0;
}

#define BOTH(f, op, ...)                                   \
    do {                                                   \
        (f)->cpu->op((f)->cpu, __VA_ARGS__);               \
        (f)->gpu->op((f)->gpu, __VA_ARGS__);               \
    } while (0)
// Arguments that differ per backend are written C(x) and picked by the macro below.
#define PAIR(f, op, ...)                                   \
    do {                                                   \
        {                                                  \
            int side_ = 0;                                 \
            Backend *be_ = (f)->cpu;                       \
            be_->op(be_, __VA_ARGS__);                     \
        }                                                  \
        {                                                  \
            int side_ = 1;                                 \
            Backend *be_ = (f)->gpu;                       \
            be_->op(be_, __VA_ARGS__);                     \
        }                                                  \
    } while (0)
#define D(b) (side_ ? (b).g : (b).c)

// Returns the largest relative error seen.
static double check_matmuls(void **state, double tol) {
    Fix *f = *state;
    double worst = 0, e;
    const int M = 5, N = 7, K = 9, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            Buf A = buf_rand(f, (size_t)(ta ? K : M) * lda);
            Buf B = buf_rand(f, (size_t)(tb ? N : K) * ldb);
            Buf C = buf_rand(f, (size_t)M * ldc);
            PAIR(f, matmul, ta, tb, M, N, K, 0.7f, D(A), lda, D(B), ldb, 0.5f, D(C), ldc);
            e = expect_close(f, &C, tol, "matmul");
            worst = e > worst ? e : worst;
            PAIR(f, matmul, ta, tb, M, N, K, 1.0f, D(A), lda, D(B), ldb, 0.0f, D(C), ldc);
            e = expect_close(f, &C, tol, "matmul beta=0");
            worst = e > worst ? e : worst;
            buf_free(f, &A);
            buf_free(f, &B);
            buf_free(f, &C);
        }
    // Batched, with B broadcast (stride 0) as the shared-K/V attention paths use it.
    const int batch = 3;
    Buf A = buf_rand(f, (size_t)batch * M * K), B = buf_rand(f, (size_t)N * K);
    Buf C = buf_rand(f, (size_t)batch * M * N);
    PAIR(f, matmul_batched, 0, 1, M, N, K, 1.0f, D(A), K, (long)M * K, D(B), K, 0L, 1.0f, D(C), N,
         (long)M * N, batch);
    e = expect_close(f, &C, tol, "matmul_batched");
    worst = e > worst ? e : worst;
    buf_free(f, &A);
    buf_free(f, &B);
    buf_free(f, &C);
    return worst;
}
static void test_matmul_matches_cpu(void **state) { check_matmuls(state, 1e-5); }
// Within 1e-2, and visibly rounded: an error this small would mean the bf16 path never ran.
static void test_matmul_bf16_within_1e2(void **state) { assert_true(check_matmuls(state, 1e-2) > 1e-5); }

// The number of recorded calls whose label ends with `suffix` (the cost model's records).
static long calls_labelled(const CostReport *r, const char *suffix) {
    long n = 0;
    const size_t ls = strlen(suffix);
    for (int i = 0; i < r->n_top; i++) {
        const size_t l = strlen(r->top[i].label);
        if (l >= ls && strcmp(r->top[i].label + l - ls, suffix) == 0) n += r->top[i].calls;
    }
    return n;
}

// linear_forward / linear_backward (kernels/cuda/cuda_linear.cu: cuBLASLt with the bias fused
// as the BIAS and BGRADB epilogues), against the CPU backend: with a bias the fused GEMMs
// must run (their records are counted), without one the plain matmul; the backward
// accumulates into dx, dW and db that start non-zero, and into cleared ones.  Twice, so bf16 mode also runs on twins
// made by the first pass.
static void check_linear(void **state, double tol) {
    Fix *f = *state;
    // Its own random stream: the later tests' inputs stay those their margins were seen with
    // (the bf16 attention case "mhe_add shared qkv" at T = 5 reaches 1.08e-2 on dk with other
    // draws: see kernels/cuda/README.md).
    const uint64_t rng = f->rng;
    f->rng = 777;
    const int N = 13, in = 24, out = 20;
    Buf x = buf_rand(f, (size_t)N * in), W = buf_rand(f, (size_t)out * in), b = buf_rand(f, out);
    Buf y = buf_rand(f, (size_t)N * out), dy = buf_rand(f, (size_t)N * out), dx = buf_rand(f, (size_t)N * in);
    Buf dW = buf_rand(f, (size_t)out * in), db = buf_rand(f, out);
    for (int pass = 0; pass < 2; pass++) {
        CostReport r;
        backend_cuda_cost_start();
        PAIR(f, linear_forward, D(x), D(W), D(b), N, in, out, D(y));
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_labelled(&r, " +bias"), 1);
        expect_close(f, &y, tol, "linear_forward");
        PAIR(f, linear_forward, D(x), D(W), NULL, N, in, out, D(y));
        expect_close(f, &y, tol, "linear_forward without bias");
        backend_cuda_cost_start();
        PAIR(f, linear_backward, D(dy), D(x), D(W), N, in, out, D(dx), 1, D(dW), D(db));
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_labelled(&r, " +bgrad"), 1);
        expect_close(f, &dx, tol, "linear_backward dx (accumulated)");
        expect_close(f, &dW, tol, "linear_backward dW");
        expect_close(f, &db, tol, "linear_backward db");
        PAIR(f, linear_backward, D(dy), D(x), D(W), N, in, out, NULL, 0, D(dW), NULL);
        expect_close(f, &dW, tol, "linear_backward dW without dx, db");
        PAIR(f, linear_backward, D(dy), D(x), D(W), N, in, out, D(dx), 0, D(dW), D(db));
        expect_close(f, &dx, tol, "linear_backward dx (overwritten)");
        expect_close(f, &db, tol, "linear_backward db (again)");
        // Gradients cleared first (the optimizer's zeros): bf16 mode stores instead of adding
        // (cuda_mirror_known_zero; the emulation checks the zeros are there).
        PAIR(f, zero, D(dW), (size_t)out * in * sizeof(float));
        PAIR(f, zero, D(db), (size_t)out * sizeof(float));
        PAIR(f, linear_backward, D(dy), D(x), D(W), N, in, out, D(dx), 1, D(dW), D(db));
        expect_close(f, &dW, tol, "linear_backward dW (from zeros)");
        expect_close(f, &db, tol, "linear_backward db (from zeros)");
        PAIR(f, linear_backward, D(dy), D(x), D(W), N, in, out, D(dx), 1, D(dW), D(db));
        expect_close(f, &dW, tol, "linear_backward dW (added to the stored sums)");
        expect_close(f, &db, tol, "linear_backward db (added to the stored sums)");
        PAIR(f, scale, D(dy), -0.5f, (size_t)N * out);  // new values under the twins
    }
    Buf *all[] = {&x, &W, &b, &y, &dy, &dx, &dW, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
    f->rng = rng;
}
static void test_linear_matches_cpu(void **state) { check_linear(state, 1e-5); }
static void test_linear_bf16_within_1e2(void **state) { check_linear(state, 1e-2); }

static void test_bias_and_elementwise_match_cpu(void **state) {
    Fix *f = *state;
    const int N = 37, C = 70;
    const size_t n = (size_t)N * C;
    Buf y = buf_rand(f, n), bias = buf_rand(f, C), db = buf_rand(f, C), a = buf_rand(f, n),
        b = buf_rand(f, n), o = buf_rand(f, n);
    PAIR(f, bias_add, D(y), D(bias), N, C);
    expect_close(f, &y, 1e-5, "bias_add");
    PAIR(f, bias_backward, D(a), N, C, D(db));
    expect_close(f, &db, 1e-5, "bias_backward");
    PAIR(f, add, D(a), D(b), D(o), n);
    expect_close(f, &o, 1e-5, "add");
    PAIR(f, axpy, -0.3f, D(a), D(o), n);
    expect_close(f, &o, 1e-5, "axpy");
    PAIR(f, scale, D(o), 1.7f, n);
    expect_close(f, &o, 1e-5, "scale");
    PAIR(f, add_scalar, D(o), 0.25f, D(o), n);
    expect_close(f, &o, 1e-5, "add_scalar");
    PAIR(f, mul, D(a), D(o), D(o), n);
    expect_close(f, &o, 1e-5, "mul");
    PAIR(f, mul_acc, D(a), D(b), D(o), n);
    expect_close(f, &o, 1e-5, "mul_acc");
    PAIR(f, dropout, D(a), D(o), n, 0.3f, 99u, 7u);
    expect_close(f, &o, 1e-5, "dropout");
    PAIR(f, dropout, D(a), D(o), n, 0.0f, 99u, 7u);
    expect_close(f, &o, 1e-5, "dropout p=0");
    double sc = f->cpu->sum_squares(f->cpu, a.c, n), sg = f->gpu->sum_squares(f->gpu, a.g, n);
    assert_true(fabs(sc - sg) <= 1e-9 * sc);
    Buf *all[] = {&y, &bias, &db, &a, &b, &o};
    for (int i = 0; i < 6; i++) buf_free(f, all[i]);
}

// Two shapes: one row chunk of the column sums (cuda_colsum.h), and several chunks and column
// blocks with a partial last one (N = 530 rows = 3 chunks of 256, n d = 45 columns).
static void head_expand_case(Fix *f, int N, int n, int d, int ldx) {
    Buf x = buf_rand(f, (size_t)N * ldx), mul = buf_rand(f, (size_t)n * d), add = buf_rand(f, (size_t)n * d);
    Buf out = buf_rand(f, (size_t)N * n * d), dx = buf_rand(f, (size_t)N * ldx);
    Buf dmul = buf_rand(f, (size_t)n * d), dadd = buf_rand(f, (size_t)n * d);
    PAIR(f, head_expand, D(x), ldx, D(mul), D(add), N, n, d, D(out));
    expect_close(f, &out, 1e-5, "head_expand");
    PAIR(f, head_expand, D(x), ldx, NULL, D(add), N, n, d, D(out));
    expect_close(f, &out, 1e-5, "head_expand add only");
    for (int acc = 0; acc < 2; acc++) {
        PAIR(f, head_expand_backward, D(out), D(x), ldx, D(mul), N, n, d, D(dx), acc, D(dmul), D(dadd));
        expect_close(f, &dx, 1e-5, "head_expand_backward dx");
        expect_close(f, &dmul, 1e-5, "head_expand_backward dmul");
        expect_close(f, &dadd, 1e-5, "head_expand_backward dadd");
    }
    PAIR(f, head_expand_backward, D(out), D(x), ldx, D(mul), N, n, d, D(dx), 1, NULL, D(dadd));
    expect_close(f, &dadd, 1e-5, "head_expand_backward dadd only");
    Buf *all[] = {&x, &mul, &add, &out, &dx, &dmul, &dadd};
    for (int i = 0; i < 7; i++) buf_free(f, all[i]);
}
static void test_head_expand_matches_cpu(void **state) {
    head_expand_case(*state, 11, 3, 8, 13);
    head_expand_case(*state, 530, 5, 9, 50);
}

// residual_layernorm_forward (one kernel) against the CPU backend's dropout, add and
// layernorm_forward: with dropout and without, s written over r (as the model calls it) and
// into a separate buffer; s, y, mean and rstd compared.  C = 300 is longer than the sums the
// kernel keeps in registers (4 per thread of the emulation's 64): the rest are recomputed.
static void residual_layernorm_case(Fix *f, int N, int C) {
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), r = buf_rand(f, n), g = buf_rand(f, C), bt = buf_rand(f, C);
    Buf y = buf_rand(f, n), s = buf_rand(f, n), mean = buf_rand(f, N), rstd = buf_rand(f, N);
    for (int variant = 0; variant < 3; variant++) {
        const float p = variant == 1 ? 0.0f : 0.25f;
        Buf *out = variant == 2 ? &s : &r;  // the sum over r, or into s
        f->cpu->dropout(f->cpu, r.c, out->c, n, p, 31, 5 + variant);
        f->cpu->add(f->cpu, x.c, out->c, out->c, n);
        f->cpu->layernorm_forward(f->cpu, out->c, g.c, bt.c, N, C, 1e-5f, y.c, mean.c, rstd.c);
        f->gpu->residual_layernorm_forward(f->gpu, x.g, r.g, p, 31, 5 + variant, g.g, bt.g, N, C, 1e-5f, out->g, y.g,
                                           mean.g, rstd.g);
        expect_close(f, out, 1e-5, "residual_layernorm s");
        expect_close(f, &y, 1e-5, "residual_layernorm y");
        expect_close(f, &mean, 1e-5, "residual_layernorm mean");
        expect_close(f, &rstd, 1e-5, "residual_layernorm rstd");
    }
    Buf *all[] = {&x, &r, &g, &bt, &y, &s, &mean, &rstd};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}
static void test_residual_layernorm_matches_cpu(void **state) {
    residual_layernorm_case(*state, 11, 80);
    residual_layernorm_case(*state, 7, 300);
}

// layernorm_backward_dropout (one kernel) against the CPU backend's layernorm_backward then
// dropout: with dropout and without, dx written and accumulated, with and without dγ/dβ; 300
// rows so blocks take several (cuda_norm_loss.cu's chunks).
static void test_layernorm_backward_dropout_matches_cpu(void **state) {
    Fix *f = *state;
    const int N = 300, C = 80;
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), g = buf_rand(f, C), bt = buf_rand(f, C), y = buf_rand(f, n);
    Buf mean = buf_rand(f, N), rstd = buf_rand(f, N), dy = buf_rand(f, n), dx = buf_rand(f, n), dr = buf_rand(f, n);
    Buf dg = buf_rand(f, C), db = buf_rand(f, C);
    PAIR(f, layernorm_forward, D(x), D(g), D(bt), N, C, 1e-5f, D(y), D(mean), D(rstd));
    for (int v = 0; v < 4; v++) {
        const float p = v == 2 ? 0.0f : 0.3f;
        const int acc = v == 1;
        float *dgc = v == 3 ? NULL : dg.c, *dbc = v == 3 ? NULL : db.c;
        float *dgg = v == 3 ? NULL : dg.g, *dbg = v == 3 ? NULL : db.g;
        f->cpu->layernorm_backward(f->cpu, dy.c, x.c, g.c, mean.c, rstd.c, N, C, dx.c, acc, dgc, dbc);
        f->cpu->dropout(f->cpu, dx.c, dr.c, n, p, 77, 9 + v);
        f->gpu->layernorm_backward_dropout(f->gpu, dy.g, x.g, g.g, mean.g, rstd.g, N, C, dx.g, acc, dgg, dbg, p, 77,
                                           9 + v, dr.g);
        expect_close(f, &dx, 1e-5, "layernorm_backward_dropout dx");
        expect_close(f, &dr, 1e-5, "layernorm_backward_dropout dr");
        expect_close(f, &dg, 1e-5, "layernorm_backward_dropout dgamma");
        expect_close(f, &db, 1e-5, "layernorm_backward_dropout dbeta");
    }
    Buf *all[] = {&x, &g, &bt, &y, &mean, &rstd, &dy, &dx, &dr, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

static void layernorm_gelu_tanh_case(Fix *f, int N, int C) {
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), g = buf_rand(f, C), bt = buf_rand(f, C), y = buf_rand(f, n);
    Buf mean = buf_rand(f, N), rstd = buf_rand(f, N), dy = buf_rand(f, n), dx = buf_rand(f, n);
    Buf dg = buf_rand(f, C), db = buf_rand(f, C);
    PAIR(f, layernorm_forward, D(x), D(g), D(bt), N, C, 1e-5f, D(y), D(mean), D(rstd));
    expect_close(f, &y, 1e-5, "layernorm y");
    expect_close(f, &mean, 1e-5, "layernorm mean");
    expect_close(f, &rstd, 1e-5, "layernorm rstd");
    // dx = and +=, with dγ and dβ, either or neither (NULL: not written), without dx, then dx
    // written over dy (accumulate 0, as ops.h allows).
    for (int v = 0; v < 7; v++) {
        const int acc = v == 1 || v == 2;
        Buf *out = v == 6 ? &dy : &dx;
        PAIR(f, layernorm_backward, D(dy), D(x), D(g), D(mean), D(rstd), N, C, v == 5 ? NULL : D(*out), acc,
             v == 3 || v == 4 ? NULL : D(dg), v == 2 || v == 4 ? NULL : D(db));
        expect_close(f, out, 1e-5, "layernorm dx");
        expect_close(f, &dg, 1e-5, "layernorm dgamma");
        expect_close(f, &db, 1e-5, "layernorm dbeta");
    }
    for (int kind = 0; kind < 2; kind++) {
        PAIR(f, gelu_forward, (GeluKind)kind, D(x), D(y), n);
        expect_close(f, &y, 1e-5, "gelu_forward");
        PAIR(f, gelu_backward, (GeluKind)kind, D(x), D(dy), D(dx), n);
        expect_close(f, &dx, 1e-5, "gelu_backward");
    }
    PAIR(f, tanh_forward, D(x), D(y), n);
    expect_close(f, &y, 1e-6, "tanh_forward");
    PAIR(f, tanh_backward, D(y), D(dy), D(dx), n);
    expect_close(f, &dx, 1e-6, "tanh_backward");
    Buf *all[] = {&x, &g, &bt, &y, &mean, &rstd, &dy, &dx, &dg, &db};
    for (int i = 0; i < 10; i++) buf_free(f, all[i]);
}
// LayerNorm's backward gives each block ceil(N / 256) rows (cuda_norm_loss.cu): 9 rows one
// each; 600 three each (200 blocks; 70 columns over the emulation's 64 threads, so 6 threads
// own two; dγ/dβ's second stage: 9 blocks of 8 columns, the last partial); 1027 five each, the
// last block 2 (206 partials per column: chunk groups of 7 and of 6), 150 columns.
static void test_layernorm_gelu_tanh_match_cpu(void **state) {
    layernorm_gelu_tanh_case(*state, 9, 96);
    layernorm_gelu_tanh_case(*state, 600, 70);
    layernorm_gelu_tanh_case(*state, 1027, 150);
}

static void test_embeddings_and_cross_entropy_match_cpu(void **state) {
    Fix *f = *state;
    const int B = 2, T = 5, D = 16, V = 50, types = 2;
    int32_t ids[10], tids[10], labels[10];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7) % 6;  // repeated ids exercise the scatter-add
        tids[i] = i % 2;
        labels[i] = i % 3 == 0 ? -1 : (i * 11) % V;
    }
    IBuf I = ibuf_new(f, ids, 10), TI = ibuf_new(f, tids, 10), L = ibuf_new(f, labels, 10);
    Buf word = buf_rand(f, (size_t)V * D), pos = buf_rand(f, (size_t)T * D), typ = buf_rand(f, (size_t)types * D);
    Buf out = buf_rand(f, (size_t)B * T * D), dword = buf_rand(f, (size_t)V * D),
        dpos = buf_rand(f, (size_t)T * D), dtyp = buf_rand(f, (size_t)types * D);
    PAIR(f, embedding_forward, D(I), D(TI), D(word), D(pos), D(typ), B, T, D, D(out));
    expect_close(f, &out, 1e-5, "embedding_forward");
    PAIR(f, embedding_forward, D(I), NULL, D(word), D(pos), NULL, B, T, D, D(out));
    expect_close(f, &out, 1e-5, "embedding_forward no types");
    PAIR(f, embedding_backward, D(out), D(I), D(TI), B, T, D, D(dword), D(dpos), D(dtyp));
    expect_close(f, &dword, 1e-5, "embedding_backward word");
    expect_close(f, &dpos, 1e-5, "embedding_backward pos");
    expect_close(f, &dtyp, 1e-5, "embedding_backward type");

    Buf logits = buf_new(f, (size_t)B * T * V, -4.0f, 4.0f), loss = buf_rand(f, (size_t)B * T),
        lse = buf_rand(f, (size_t)B * T), dl = buf_rand(f, (size_t)B * T * V);
    PAIR(f, cross_entropy_forward, D(logits), D(L), B * T, V, D(loss), D(lse));
    expect_close(f, &loss, 1e-5, "cross_entropy loss");
    expect_close(f, &lse, 1e-5, "cross_entropy lse");
    PAIR(f, cross_entropy_backward, D(logits), D(lse), D(L), B * T, V, 0.125f, D(dl));
    expect_close(f, &dl, 1e-5, "cross_entropy_backward");
    // In place: the loss backward overwrites the logits.
    PAIR(f, cross_entropy_backward, D(logits), D(lse), D(L), B * T, V, 0.125f, D(logits));
    expect_close(f, &logits, 1e-5, "cross_entropy_backward in place");
    ibuf_free(f, &I);
    ibuf_free(f, &TI);
    ibuf_free(f, &L);
    Buf *all[] = {&word, &pos, &typ, &out, &dword, &dpos, &dtyp, &logits, &loss, &lse, &dl};
    for (int i = 0; i < 11; i++) buf_free(f, all[i]);
}

// The compact MLM head's row gather and scatter (rows distinct, unordered; untouched rows of the
// scatter target keep their values).
static void test_gather_scatter_rows_match_cpu(void **state) {
    Fix *f = *state;
    const int N = 11, C = 37, M = 4;
    int32_t rows[4] = {9, 0, 5, 10};
    IBuf R = ibuf_new(f, rows, M);
    Buf src = buf_rand(f, (size_t)N * C), dst = buf_rand(f, (size_t)M * C), big = buf_rand(f, (size_t)N * C);
    PAIR(f, gather_rows, D(src), D(R), M, C, D(dst), N);
    expect_close(f, &dst, 0.0, "gather_rows");
    PAIR(f, scatter_rows, D(dst), D(R), M, C, D(big), N);
    expect_close(f, &big, 0.0, "scatter_rows");
    ibuf_free(f, &R);
    buf_free(f, &src);
    buf_free(f, &dst);
    buf_free(f, &big);
}

static void test_optimizers_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 333;
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n), u = buf_rand(f, n);
    Buf v = buf_new(f, n, 0.0f, 0.5f);
    for (int step = 1; step <= 3; step++) {
        float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        PAIR(f, adamw_update, D(p), D(g), D(m), D(v), n, 0.9f, 0.999f, 1e-8f, 1e-2f / bc1, 1.0f - 1e-2f * 0.01f, sqrtf(bc2),
             0.5f);
    }
    expect_close(f, &p, 1e-5, "adamw p");
    expect_close(f, &m, 1e-5, "adamw m");
    expect_close(f, &v, 1e-5, "adamw v");
    PAIR(f, lamb_direction, D(p), D(g), D(m), D(v), D(u), n, 0.9f, 0.999f, 1e-6f, 0.01f, 0.1f, 0.001f, 1.0f);
    expect_close(f, &u, 1e-5, "lamb u");
    expect_close(f, &m, 1e-5, "lamb m");
    Buf *all[] = {&p, &g, &m, &v, &u};
    for (int i = 0; i < 5; i++) buf_free(f, all[i]);
}

// adamw_update_ranges (one launch over many tensors) against the CPU backend's adamw_update per
// range: ranges with and without weight decay, gaps between them (left untouched), moments
// offset by m_base, three steps.  In bf16 mode a matmul reads part of p before and after, so
// the weights' twins must follow the update (a stale one fails the comparison, and the
// emulation's twin check).
static void test_adamw_ranges_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 500, m_base = 50;
    const size_t start[5] = {50, 150, 160, 250, 300}, len[5] = {100, 0, 90, 1, 150};
    const unsigned char decays[5] = {1, 1, 0, 1, 1};
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n - m_base), x = buf_rand(f, 8 * 10),
        y = buf_rand(f, 8 * 20);
    Buf v = buf_new(f, n - m_base, 0.0f, 0.5f);
    const float lr = 1e-2f, wd = 0.01f;
    for (int step = 1; step <= 3; step++) {
        PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, D(x), 10, D(p) + 300, 20, 0.0f, D(y), 20);  // W = p[300 .. 500)
        expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
        const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        const float step_size = lr / bc1, decay = 1.0f - lr * wd;
        for (int r = 0; r < 5; r++)
            f->cpu->adamw_update(f->cpu, p.c + start[r], g.c + start[r], m.c + start[r] - m_base,
                                 v.c + start[r] - m_base, len[r], 0.9f, 0.999f, 1e-8f, step_size,
                                 decays[r] ? decay : 1.0f, sqrtf(bc2), 0.5f);
        f->gpu->adamw_update_ranges(f->gpu, p.g, g.g, m.g, v.g, m_base, 5, start, len, decays, 0.9f, 0.999f,
                                    1e-8f, step_size, decay, sqrtf(bc2), 0.5f);
        expect_close(f, &p, 1e-5, "adamw ranges p");
        expect_close(f, &m, 1e-5, "adamw ranges m");
        expect_close(f, &v, 1e-5, "adamw ranges v");
    }
    PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, D(x), 10, D(p) + 300, 20, 0.0f, D(y), 20);
    expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
    Buf *all[] = {&p, &g, &m, &v, &x, &y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

// lamb_direction_ranges + axpy_ranges (LAMB in three launches) against the CPU backend's
// lamb_direction, sum_squares and axpy per range: ranges with and without weight decay, an
// empty one, one longer than a chunk (8192) so its sums join several blocks, gaps left
// untouched, moments offset by m_base, three steps; the weights' twins follow the step.
static void test_lamb_ranges_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 20000, m_base = 100;
    const size_t start[5] = {100, 300, 300, 9400, 19000}, len[5] = {150, 0, 9000, 1, 1000};
    const float wds[5] = {0.01f, 0.01f, 0.01f, 0.0f, 0.01f};
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n - m_base), u = buf_rand(f, n - m_base),
        x = buf_rand(f, 8 * 10), y = buf_rand(f, 8 * 20);
    Buf v = buf_new(f, n - m_base, 0.0f, 0.5f);
    const float lr = 1e-2f;
    double sq[10];
    float coef[5];
    for (int step = 1; step <= 3; step++) {
        PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, D(x), 10, D(p) + 19000, 20, 0.0f, D(y), 20);  // W in range 4
        expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
        const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        f->gpu->lamb_direction_ranges(f->gpu, p.g, g.g, m.g, v.g, u.g, m_base, 5, start, len, wds, 0.9f, 0.999f,
                                      1e-6f, bc1, bc2, 0.5f, sq);
        for (int r = 0; r < 5; r++) {
            const size_t at = start[r] - m_base;
            f->cpu->lamb_direction(f->cpu, p.c + start[r], g.c + start[r], m.c + at, v.c + at, u.c + at, len[r],
                                   0.9f, 0.999f, 1e-6f, wds[r], bc1, bc2, 0.5f);
            const double pp = f->cpu->sum_squares(f->cpu, p.c + start[r], len[r]);
            const double uu = f->cpu->sum_squares(f->cpu, u.c + at, len[r]);
            assert_true(fabs(sq[r] - pp) <= 1e-6 * pp && fabs(sq[5 + r] - uu) <= 1e-5 * uu);
            if (!len[r]) assert_true(sq[r] == 0.0 && sq[5 + r] == 0.0);
            coef[r] = -lr * (pp > 0 && uu > 0 ? (float)sqrt(pp / uu) : 1.0f);
        }
        expect_close(f, &u, 1e-5, "lamb ranges u");
        expect_close(f, &m, 1e-5, "lamb ranges m");
        expect_close(f, &v, 1e-5, "lamb ranges v");
        for (int r = 0; r < 5; r++)
            f->cpu->axpy(f->cpu, coef[r], u.c + start[r] - m_base, p.c + start[r], len[r]);
        f->gpu->axpy_ranges(f->gpu, p.g, u.g, m_base, 5, start, len, coef);
        expect_close(f, &p, 1e-5, "lamb ranges p");
    }
    PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, D(x), 10, D(p) + 19000, 20, 0.0f, D(y), 20);
    expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
    Buf *all[] = {&p, &g, &m, &v, &u, &x, &y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

// One attention configuration, forward and backward, every output compared.
typedef struct {
    const char *name;
    int B, T, n, qh, kh, vh, dq, dv, causal, use_mask, use_bias, use_scale, use_shift;
    float dropout;
    int mask_all_of_seq1;  // sequence 1 has no visible key: rows of zeros, output = shift
} AttnCase;

// rewrite (bf16 tensor-core shapes without out_scale): after the first comparison, Q and K are
// rewritten by ops that store their bf16 twins alongside (scale, GELU over the operand's span),
// V by an upload (which only invalidates its twin) and dout by scale; the second forward +
// backward must again match the CPU backend, and must round exactly one operand (V) to bf16:
// the fused kernels stage Q, K and dout tiles from the twins the writers left (the emulation
// aborts on a twin that differs from bf16(fp32)).
static void check_attention(Fix *f, const AttnCase *ac, double tol, int rewrite) {
    AttnShape s = {0};
    s.B = ac->B;
    s.T = ac->T;
    s.n_heads = ac->n;
    s.q_heads = ac->qh;
    s.k_heads = ac->kh;
    s.v_heads = ac->vh;
    s.qk_dim = ac->dq;
    s.v_dim = ac->dv;
    s.ldq = ac->qh * ac->dq + 2;  // padded rows: strides are honoured
    s.ldk = ac->kh * ac->dq + 1;
    s.ldv = ac->vh * ac->dv + 3;
    s.scale = 1.0f / sqrtf((float)ac->dq);
    s.causal = ac->causal;
    s.dropout = ac->dropout;
    s.seed = 4242;
    s.offset = 17;
    const size_t rows = (size_t)ac->B * ac->T;
    int32_t mask[512];
    assert_true((size_t)ac->B * ac->T <= 512);
    for (size_t i = 0; i < rows; i++)
        mask[i] = ac->mask_all_of_seq1 && (int)(i / ac->T) == 1 ? 0 : (i % ac->T) != 2;
    IBuf M = ibuf_new(f, mask, rows);
    Buf q = buf_new(f, rows * s.ldq, -2.0f, 2.0f), k = buf_new(f, rows * s.ldk, -2.0f, 2.0f),
        v = buf_rand(f, rows * s.ldv);
    Buf kb = buf_rand(f, rows * ac->n), osc = buf_rand(f, (size_t)ac->n * ac->dv),
        osh = buf_rand(f, (size_t)ac->n * ac->dv);
    Buf out = buf_rand(f, rows * ac->n * ac->dv), dout = buf_rand(f, rows * ac->n * ac->dv);
    Buf dq = buf_rand(f, rows * s.ldq), dk = buf_rand(f, rows * s.ldk), dv = buf_rand(f, rows * s.ldv);
    Buf dkb = buf_rand(f, rows * ac->n), dosc = buf_rand(f, (size_t)ac->n * ac->dv),
        dosh = buf_rand(f, (size_t)ac->n * ac->dv);
    size_t sv[2], sc[2];
    f->cpu->attention_sizes(f->cpu, &s, &sv[0], &sc[0]);
    f->gpu->attention_sizes(f->gpu, &s, &sv[1], &sc[1]);
    float *saved[2] = {f->cpu->alloc(f->cpu, sv[0] * 4), f->gpu->alloc(f->gpu, sv[1] * 4)};
    float *scratch[2] = {f->cpu->alloc(f->cpu, sc[0] * 4), f->gpu->alloc(f->gpu, sc[1] * 4)};
    char what[128];
#define CLOSE(b, label)                                                                  \
    snprintf(what, sizeof what, "attention %s%s: %s", ac->name, pass ? " (rewritten)" : "", label); \
    expect_close(f, &(b), tol, what)
    for (int pass = 0; pass <= rewrite; pass++) {
        if (pass) {
            const size_t qspan = (rows - 1) * s.ldq + (size_t)ac->qh * ac->dq;
            const size_t kspan = (rows - 1) * s.ldk + (size_t)ac->kh * ac->dq;
            PAIR(f, scale, D(q), 0.75f, qspan);
            PAIR(f, gelu_forward, GELU_ERF, D(k), D(k), kspan);
            for (size_t i = 0; i < v.n; i++) v.host[i] = 0.5f * v.host[i] - 0.25f;
            PAIR(f, upload, D(v), v.host, v.n * sizeof(float));
            PAIR(f, scale, D(dout), -1.5f, dout.n);
            backend_cuda_cost_start();
        }
        for (int side_ = 0; side_ < 2; side_++) {
            Backend *be = side_ ? f->gpu : f->cpu;
            AttnShape t = s;
            t.key_mask = ac->use_mask ? D(M) : NULL;
            t.key_bias = ac->use_bias ? D(kb) : NULL;
            t.out_scale = ac->use_scale ? D(osc) : NULL;
            t.out_shift = ac->use_shift ? D(osh) : NULL;
            be->attention_forward(be, &t, D(q), D(k), D(v), D(out), saved[side_], scratch[side_]);
            be->attention_backward(be, &t, D(q), D(k), D(v), saved[side_], D(dout), D(dq), D(dk), D(dv),
                                   ac->use_bias ? D(dkb) : NULL, ac->use_scale ? D(dosc) : NULL,
                                   ac->use_shift ? D(dosh) : NULL, scratch[side_]);
        }
        if (pass) {
            CostReport r;
            backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
            long rounded = 0;
            for (int i = 0; i < r.n_top; i++)
                if (strcmp(r.top[i].label, "to_bf16_kernel") == 0) rounded = r.top[i].calls;
            print_message("attention %s (rewritten): %ld bf16 rounding launches\n", ac->name, rounded);
            assert_int_equal(rounded, 1);
        }
        CLOSE(out, "out");
        // Only the head columns are defined in the gradients; padding keeps its initial value on
        // both sides, so whole buffers compare.
        CLOSE(dq, "dq");
        CLOSE(dk, "dk");
        CLOSE(dv, "dv");
        if (ac->use_bias) { CLOSE(dkb, "dkey_bias"); }
        if (ac->use_scale) { CLOSE(dosc, "dout_scale"); }
        if (ac->use_shift) { CLOSE(dosh, "dout_shift"); }
    }
#undef CLOSE
    f->cpu->free(f->cpu, saved[0]);
    f->gpu->free(f->gpu, saved[1]);
    f->cpu->free(f->cpu, scratch[0]);
    f->gpu->free(f->gpu, scratch[1]);
    ibuf_free(f, &M);
    Buf *all[] = {&q, &k, &v, &kb, &osc, &osh, &out, &dout, &dq, &dk, &dv, &dkb, &dosc, &dosh};
    for (int i = 0; i < 14; i++) buf_free(f, all[i]);
}

static const AttnCase ATTN_CASES[] = {
        // name     B  T  n qh kh vh dq dv causal mask bias scale shift dropout all-masked
        {"mha causal dropout", 2, 6, 2, 2, 2, 2, 8, 8, 1, 0, 0, 0, 0, 0.2f, 0},
        {"gqa padding mask", 2, 5, 4, 4, 2, 2, 4, 4, 0, 1, 0, 0, 0, 0.0f, 0},
        {"mqa causal+mask", 1, 7, 3, 3, 1, 1, 6, 6, 1, 1, 0, 0, 0, 0.0f, 0},
        {"mhe_add shared qkv, key bias, shift", 2, 5, 3, 1, 1, 1, 4, 4, 0, 1, 1, 0, 1, 0.1f, 0},
        {"mhe_mul scale+shift", 2, 4, 2, 2, 1, 1, 4, 4, 1, 0, 0, 1, 1, 0.0f, 0},
        {"fully masked sequence", 2, 4, 2, 2, 2, 2, 4, 6, 0, 1, 1, 1, 1, 0.0f, 1},
        {"mqa dropout, scale, shift", 2, 5, 3, 3, 1, 1, 4, 4, 1, 1, 1, 1, 1, 0.3f, 0},
        {"gqa dropout, causal", 2, 5, 6, 6, 3, 3, 4, 4, 1, 1, 0, 0, 0, 0.2f, 0},
        {"q 3 heads, k 6, v 1 of 6", 1, 5, 6, 3, 6, 1, 4, 4, 0, 0, 1, 1, 1, 0.0f, 0},
        {"gqa groups not a block (k 3, v 2 of 6)", 1, 4, 6, 6, 3, 2, 4, 4, 1, 0, 0, 0, 0, 0.0f, 0},
        // Longer than the fused kernels' 32-row tiles and not a multiple of them.
        {"mha T=45 causal dropout mask", 2, 45, 2, 2, 2, 2, 8, 8, 1, 1, 0, 0, 0, 0.1f, 0},
        {"mhe T=70 shared qkv, bias, scale, shift", 1, 70, 3, 1, 1, 1, 6, 5, 0, 1, 1, 1, 1, 0.1f, 0},
        {"gqa T=37 dq != dv, causal", 2, 37, 4, 4, 2, 1, 4, 6, 1, 0, 0, 1, 0, 0.0f, 0},
        // Head dims of the tensor-core kernels (bf16 mode; fp32 mode runs the CUDA-core ones).
        {"mha d=16 T=45 causal dropout mask", 2, 45, 2, 2, 2, 2, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        {"mhe d=32 T=37 shared qkv, bias, scale, shift", 1, 37, 3, 1, 1, 1, 32, 32, 0, 1, 1, 1, 1, 0.1f, 0},
        {"gqa d=16 T=33 k 2 v 1 of 4, masked seq", 2, 33, 4, 4, 2, 1, 16, 16, 0, 1, 1, 0, 1, 0.0f, 1},
        // Past the tensor-core dK/dV kernel's 128-row key tiles (causal: each key tile's queries
        // start at its first key).
        {"mha d=16 T=150 causal dropout, key bias", 1, 150, 2, 2, 2, 2, 16, 16, 1, 0, 1, 0, 0, 0.1f, 0},
        // Past the forward's and dQ's 256-row query tiles too, ending 14 and 4 rows into the
        // next: causal and not, dropout, masks, shared K/V heads (a dK/dV block owning 4 heads).
        {"mha d=16 T=270 causal dropout mask", 1, 270, 2, 2, 2, 2, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        {"gqa d=32 T=260 k 2 v 1 of 4, bias, scale, shift, dropout", 1, 260, 4, 4, 2, 1, 32, 32, 0, 1, 1, 1, 1, 0.1f, 0},
        // A dK/dV grid of 2 tiles x 14 heads x 2 sequences = 56 blocks: 128-row key tiles (grids
        // of at most 54, the cases above, take 64-row ones), the second ending 2 rows in.
        {"mha 14 heads d=16 T=130 causal dropout mask", 2, 130, 14, 14, 14, 14, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        // d = 64: the dK/dV kernel's 64 KB of shared memory (opted in past 48 KB).
        {"mha d=64 T=21 mask", 1, 21, 1, 1, 1, 1, 64, 64, 0, 1, 0, 0, 0, 0.0f, 0},
};

static void run_attention_cases(Fix *f, double tol) {
    for (size_t i = 0; i < sizeof ATTN_CASES / sizeof ATTN_CASES[0]; i++) check_attention(f, &ATTN_CASES[i], tol, 0);
}
// The default path: the fused (flash) kernels.
static void test_attention_matches_cpu(void **state) { run_attention_cases(*state, 1e-5); }
// cuBLAS GEMMs + row kernels (gqa with 1 < groups < n uses the plain kernels).
static void test_attention_gemm_path_matches_cpu(void **state) {
    Fix *f = *state;
    Backend *dflt = f->gpu;
    setenv("MHE_CUDA_ATTENTION", "gemm", 1);
    f->gpu = backend_cuda_create(0, 0);
    unsetenv("MHE_CUDA_ATTENTION");
    run_attention_cases(f, 1e-5);
    f->gpu->destroy(f->gpu);
    f->gpu = dflt;
}
// The plain kernels, the GEMM path's reference, on every case.
static void test_attention_plain_kernels_match_cpu(void **state) {
    Fix *f = *state;
    Backend *gemm = f->gpu;
    setenv("MHE_CUDA_ATTENTION", "plain", 1);
    f->gpu = backend_cuda_create(0, 0);
    unsetenv("MHE_CUDA_ATTENTION");
    run_attention_cases(f, 1e-5);
    f->gpu->destroy(f->gpu);
    f->gpu = gemm;
}
static void test_attention_bf16_within_1e2(void **state) { run_attention_cases(*state, 1e-2); }
// The tensor-core kernels read the bf16 twins of their inputs (see check_attention's rewrite).
static void test_attention_bf16_reads_twins(void **state) {
    static const AttnCase cases[] = {
        {"mha d=16 T=40 dropout mask", 2, 40, 2, 2, 2, 2, 16, 16, 0, 1, 0, 0, 0, 0.1f, 0},
        {"gqa d=32 T=33 causal, key bias, shift", 1, 33, 4, 4, 2, 1, 32, 32, 1, 1, 1, 0, 1, 0.0f, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_attention(*state, &cases[i], 1e-2, 1);
}

// The bf16 twins of matmul operands (kernels/cuda/cuda_mirror.cu): after the first matmul made
// twins of A and W, every kind of write to A — ops that store the twin alongside (LayerNorm,
// scale, GELU, dropout, bias_add) and ops that only invalidate it (upload, scatter_rows, zero,
// copy, matmul output) — is followed by a matmul that must match the CPU backend within 1e-2
// (a stale twin would multiply old values; the emulated backend also compares every twin it
// hands to cuBLAS with bf16(fp32) and aborts on a difference).  No write creates a twin: the
// count stays at the first matmul's two.
static void test_bf16_twins_follow_every_write(void **state) {
    Fix *f = *state;
    const int M = 16, K = 24, N = 20;
    Buf A = buf_rand(f, (size_t)M * K), W = buf_rand(f, (size_t)K * N), C = buf_rand(f, (size_t)M * N);
    Buf other = buf_rand(f, (size_t)M * K), g = buf_new(f, K, 0.5f, 1.5f), bias = buf_rand(f, K);
    Buf mean = buf_rand(f, M), rstd = buf_rand(f, M);
    int32_t rows[3] = {7, 2, 11};
    IBuf R = ibuf_new(f, rows, 3);
    float *host = malloc((size_t)M * K * sizeof(float));
    for (int i = 0; i < M * K; i++) host[i] = 0.01f * (float)(i % 37) - 0.2f;
    size_t twin_bytes = 0;
    for (int step = 0; step < 11; step++) {
        switch (step) {
        case 1: PAIR(f, layernorm_forward, D(A), D(g), D(bias), M, K, 1e-5f, D(A), D(mean), D(rstd)); break;
        case 2: PAIR(f, scale, D(A), 0.5f, (size_t)M * K); break;
        case 3: PAIR(f, upload, D(A), host, (size_t)M * K * sizeof(float)); break;
        case 4: PAIR(f, scatter_rows, D(other), D(R), 3, K, D(A), M); break;
        case 5: PAIR(f, gelu_forward, GELU_ERF, D(A), D(A), (size_t)M * K); break;
        case 6: PAIR(f, dropout, D(A), D(A), (size_t)M * K, 0.3f, 9, 4); break;
        case 7: PAIR(f, bias_add, D(A), D(bias), M, K); break;
        case 8: PAIR(f, copy, D(A), D(other), (size_t)M * K * sizeof(float)); break;
        case 9: PAIR(f, matmul, 0, 1, M, K, N, 1.0f, D(C), N, D(W), N, 0.0f, D(A), K); break;  // A = C Wᵀ (C's twin is new)
        case 10: PAIR(f, zero, D(A), (size_t)M * K * sizeof(float)); break;
        default: break;
        }
        PAIR(f, matmul, 0, 0, M, N, K, 1.0f, D(A), K, D(W), N, 0.0f, D(C), N);
        char what[64];
        snprintf(what, sizeof what, "matmul after write %d", step);
        expect_close(f, &C, 1e-2, what);
        // Rows 4..11 of A (inside A's twin): no new twin.
        PAIR(f, matmul, 0, 0, 8, N, K, 1.0f, D(A) + 4 * K, K, D(W), N, 0.0f, D(C), N);
        expect_close(f, &C, 1e-2, what);
        assert_int_equal(backend_cuda_mirror_segments(f->gpu, &twin_bytes), step < 9 ? 2 : 3);
    }
    assert_true(twin_bytes == 2u * (size_t)(M * K + K * N + M * N));
    free(host);
    ibuf_free(f, &R);
    Buf *all[] = {&A, &W, &C, &other, &g, &bias, &mean, &rstd};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

int main(void) {
    const struct CMUnitTest fp32[] = {
        cmocka_unit_test(test_matmul_matches_cpu),
        cmocka_unit_test(test_linear_matches_cpu),
        cmocka_unit_test(test_bias_and_elementwise_match_cpu),
        cmocka_unit_test(test_head_expand_matches_cpu),
        cmocka_unit_test(test_layernorm_gelu_tanh_match_cpu),
        cmocka_unit_test(test_embeddings_and_cross_entropy_match_cpu),
        cmocka_unit_test(test_gather_scatter_rows_match_cpu),
        cmocka_unit_test(test_optimizers_match_cpu),
        cmocka_unit_test(test_adamw_ranges_match_cpu),
        cmocka_unit_test(test_lamb_ranges_match_cpu),
        cmocka_unit_test(test_attention_matches_cpu),
        cmocka_unit_test(test_attention_gemm_path_matches_cpu),
        cmocka_unit_test(test_attention_plain_kernels_match_cpu),
        cmocka_unit_test(test_residual_layernorm_matches_cpu),
        cmocka_unit_test(test_layernorm_backward_dropout_matches_cpu),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_matmul_bf16_within_1e2),
        cmocka_unit_test(test_linear_bf16_within_1e2),
        cmocka_unit_test(test_attention_bf16_within_1e2),
        cmocka_unit_test(test_attention_bf16_reads_twins),
        cmocka_unit_test(test_bf16_twins_follow_every_write),
        cmocka_unit_test(test_adamw_ranges_match_cpu),
        cmocka_unit_test(test_lamb_ranges_match_cpu),
    };
    int failed = cmocka_run_group_tests_name("cuda parity fp32", fp32, setup_fp32, teardown);
    failed += cmocka_run_group_tests_name("cuda parity bf16", bf16, setup_bf16, teardown);
    return failed ? 1 : 0;
}
