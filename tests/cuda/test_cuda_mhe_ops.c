// The optional ops of kernels/ops.h that mhe_mul's glue uses on CUDA, against the op sequence
// they replace run on the CPU backend (whose own ops are checked against naive loops and, through
// the model, against PyTorch):
//   head_scales                == add_scalar x3 (+ mul) per row        exactly (the same fp32 ops)
//   head_expand_backward_prod  == zero dm, head_expand_backward, mul_acc x2
//                                 norm-wise relative error <= 1e-5 (fp32 mode; the column sums add
//                                 in another order), <= 1e-2 in bf16 mode
//   attention with q_scale     == head_expand, then attention with a Q head per query head
//                                 (bf16 tensor-core path) <= 1e-2
// Shapes: several row chunks of the column sums with a partial last one, n d not a multiple of
// the 32-column blocks, a strided x (a column slice), n d too wide for the fused dx + sums kernel,
// and layer rows at a stride wider than what they hold (parameters between them), over both
// backends' fp32 and bf16 modes (bf16: activations in bf16 on the CUDA side, the same draws
// rounded to bf16 on both).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"

typedef struct {
    Backend *cpu, *gpu;
    uint64_t rng;
    int bf16;
} Fix;

// A buffer on both backends with its initial host values.  An activation (act) is held on the
// CUDA side in its Backend.act type: bf16 storage in bf16 mode (the CPU reference keeps fp32).
typedef struct {
    size_t n;
    float *host, *c, *g;
    int act;
} Buf;

static float uniform(Fix *f) {
    f->rng = f->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((f->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static Buf buf_rand(Fix *f, size_t n) {
    Buf b = {n, malloc(n * sizeof(float)), NULL, NULL, 0};
    for (size_t i = 0; i < n; i++) b.host[i] = uniform(f);
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * sizeof(float));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload(f->gpu, b.g, b.host, n * sizeof(float));
    return b;
}

// x rounded to the nearest bf16, ties to even.
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
// An activation: the same draws as buf_rand, rounded to bf16 in bf16 mode so both backends start
// from the same values.
static Buf act_rand(Fix *f, size_t n) {
    Buf b = {n, malloc(n * sizeof(float)), NULL, NULL, 1};
    for (size_t i = 0; i < n; i++) b.host[i] = f->bf16 ? bf16_round(uniform(f)) : uniform(f);
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * dtype_size(f->gpu->act));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload_act(f->gpu, (Act *)b.g, b.host, n);
    return b;
}

static void buf_free(Fix *f, Buf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
    free(b->host);
}

// max |cuda - cpu| / max(max |cpu|, 1e-3) over the buffer, asserted <= tol (tol 0: equal).
static void expect_close(Fix *f, const Buf *b, double tol, const char *what) {
    float *x = malloc(b->n * sizeof(float)), *y = malloc(b->n * sizeof(float));
    f->cpu->download(f->cpu, x, b->c, b->n * sizeof(float));
    if (b->act)
        f->gpu->download_act(f->gpu, y, (const Act *)b->g, b->n);
    else
        f->gpu->download(f->gpu, y, b->g, b->n * sizeof(float));
    double mx = 1e-3, err = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (fabs(x[i]) > mx) mx = fabs(x[i]);
        const double e = fabs((double)x[i] - y[i]);
        if (!(e <= err)) err = isnan(e) ? INFINITY : e;
    }
    if (!(err / mx <= tol)) print_error("%s: relative error %.3g > %.3g\n", what, err / mx, tol);
    free(x);
    free(y);
    assert_true(err / mx <= tol);
}

static int setup(void **state, int bf16) {
    Fix *f = calloc(1, sizeof *f);
    // One thread under ThreadSanitizer: the CPU reference's OpenMP threads are not what it audits.
    // The reference is the fp32 CPU backend in both modes: its buffers here are raw floats, and a
    // bf16 CPU backend stores activations in bf16 (ops.h Backend.act); bf16 runs are held to the
    // bf16 tolerance against it.
#if defined(__SANITIZE_THREAD__)
    f->cpu = backend_cpu_create_for(1, 0);
#else
    f->cpu = backend_cpu_create_for(2, 0);
#endif
    // bf16: bf16 activations on the CUDA side (act_rand buffers).
    f->gpu = backend_cuda_create(0, bf16);
    assert_int_equal(f->gpu->act, bf16 ? DT_BF16 : DT_F32);
    f->rng = 777;
    f->bf16 = bf16;
    assert_non_null(f->gpu->head_scales);
    assert_non_null(f->gpu->head_expand_backward_prod);
    *state = f;
    return 0;
}
static int setup_fp32(void **state) { return setup(state, 0); }
static int setup_bf16(void **state) { return setup(state, 1); }
static int teardown(void **state) {
    Fix *f = *state;
    f->cpu->destroy(f->cpu);
    f->gpu->destroy(f->gpu);
    free(f);
    return 0;
}

static void test_head_scales_equal_add_scalar_and_mul(void **state) {
    Fix *f = *state;
    const int rows = 5, w = 45;
    const size_t lde = 3 * w + 17, lds = 4 * w + 3;  // gaps between the rows
    for (int prod = 0; prod < 2; prod++) {
        Buf e = buf_rand(f, rows * lde), s = buf_rand(f, rows * lds);
        for (int r = 0; r < rows; r++) {
            float *sr = s.c + r * lds;
            const float *er = e.c + r * lde;
            for (int j = 0; j < 3; j++) f->cpu->add_scalar(f->cpu, er + j * w, 1.0f, sr + j * w, w);
            if (prod) f->cpu->mul(f->cpu, sr, sr + w, sr + 3 * w, w);
        }
        f->gpu->head_scales(f->gpu, e.g, lde, rows, w, prod, s.g, lds);
        // Also the gaps: left as they were on both sides.
        expect_close(f, &s, 0.0, prod ? "head_scales with the products" : "head_scales");
        buf_free(f, &e);
        buf_free(f, &s);
    }
}

static void prod_case(Fix *f, int N, int n, int d, int ldx, double tol) {
    const size_t nd = (size_t)n * d;
    Buf dout = act_rand(f, (size_t)N * nd), x = act_rand(f, (size_t)N * ldx), fv = buf_rand(f, nd),
        gv = buf_rand(f, nd), mul = buf_rand(f, nd), dx = act_rand(f, (size_t)N * ldx), df = buf_rand(f, nd),
        dg = buf_rand(f, nd);
    float *dm = f->cpu->alloc(f->cpu, nd * sizeof(float));
    for (int acc = 0; acc < 2; acc++) {
        f->cpu->zero(f->cpu, dm, nd * sizeof(float));
        f->cpu->head_expand_backward(f->cpu, (const Act *)(dout.c), (const Act *)(x.c), ldx, mul.c, N, n, d, (Act *)(dx.c), acc, dm, NULL);
        f->cpu->mul_acc(f->cpu, dm, gv.c, df.c, nd);
        f->cpu->mul_acc(f->cpu, dm, fv.c, dg.c, nd);
        f->gpu->head_expand_backward_prod(f->gpu, (const Act *)(dout.g), (const Act *)(x.g), ldx, mul.g, fv.g, gv.g, N, n, d, (Act *)(dx.g), acc, df.g,
                                          dg.g);
        expect_close(f, &dx, tol, "head_expand_backward_prod dx");
        expect_close(f, &df, tol, "head_expand_backward_prod df");
        expect_close(f, &dg, tol, "head_expand_backward_prod dg");
    }
    // One of the two outputs; no dx.
    f->cpu->zero(f->cpu, dm, nd * sizeof(float));
    f->cpu->head_expand_backward(f->cpu, (const Act *)(dout.c), (const Act *)(x.c), ldx, mul.c, N, n, d, NULL, 0, dm, NULL);
    f->cpu->mul_acc(f->cpu, dm, gv.c, df.c, nd);
    f->gpu->head_expand_backward_prod(f->gpu, (const Act *)(dout.g), (const Act *)(x.g), ldx, mul.g, fv.g, gv.g, N, n, d, NULL, 0, df.g, NULL);
    expect_close(f, &df, tol, "head_expand_backward_prod df only");
    expect_close(f, &dg, tol, "head_expand_backward_prod dg untouched");
    f->cpu->free(f->cpu, dm);
    Buf *all[] = {&dout, &x, &fv, &gv, &mul, &dx, &df, &dg};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

static void run_prod_cases(Fix *f, double tol) {
    prod_case(f, 7, 2, 8, 8, tol);
    prod_case(f, 600, 3, 15, 40, tol);  // 3 chunks of 256 rows, 45 columns, x a column slice
    // n d = 6400 columns: the fused dx + sums kernel's per-warp rows exceed 48 KB of shared memory
    // at the emulation's default 64 threads, so the separate dx and column-sum kernels run.
    prod_case(f, 40, 4, 1600, 1600, tol);
}
static void test_head_expand_backward_prod_fp32(void **state) { run_prod_cases(*state, 1e-5); }
static void test_head_expand_backward_prod_bf16(void **state) { run_prod_cases(*state, 1e-2); }

// AttnShape.q_scale (mhe_mul's per-head query scale applied by the attention core instead of a
// materialised head_expand): offered on the bf16 tensor-core path only (not in fp32 mode, not
// by the CPU backend).  There the core reads the shared q (a column slice, as in the fused Q|K|V
// buffer) and the scale; against the CPU backend's attention on Q_h = head_expand(q, scale) with
// a head per query head: out, the per-head dQ, dK, dV and the output scale/shift gradients.
static void test_attention_q_scale(void **state) {
    Fix *f = *state;
    enum { B = 2, T = 40, n = 4, d = 16, N = B * T, nd = n * d, ldq = 3 * d };
    const AttnShape s = {.B = B, .T = T, .n_heads = n, .q_heads = 1, .k_heads = 1, .v_heads = 1, .qk_dim = d,
                         .v_dim = d, .ldq = ldq, .ldk = d, .ldv = d, .scale = 0.25f, .dropout = 0.1f, .seed = 3,
                         .offset = 9};
    assert_null(f->cpu->attention_q_scale);
    assert_non_null(f->gpu->attention_q_scale);
    assert_int_equal(!!f->gpu->attention_q_scale(f->gpu, &s), f->bf16);
    if (!f->bf16) return;
    Buf q = act_rand(f, (size_t)N * ldq), k = act_rand(f, (size_t)N * d), v = act_rand(f, (size_t)N * d),
        qs = buf_rand(f, nd), osc = buf_rand(f, nd), osh = buf_rand(f, nd), dout = act_rand(f, (size_t)N * nd),
        out = act_rand(f, (size_t)N * nd), dq = act_rand(f, (size_t)N * nd), dk = act_rand(f, (size_t)N * d),
        dv = act_rand(f, (size_t)N * d), dosc = buf_rand(f, nd), dosh = buf_rand(f, nd);
    for (int i = 0; i < nd; i++) qs.host[i] = 1.0f + 0.5f * qs.host[i];
    f->cpu->upload(f->cpu, qs.c, qs.host, nd * sizeof(float));
    f->gpu->upload(f->gpu, qs.g, qs.host, nd * sizeof(float));
    AttnShape c = s, g = s;
    c.q_heads = n;
    c.ldq = nd;
    c.out_scale = osc.c;
    c.out_shift = osh.c;
    g.q_scale = qs.g;
    g.out_scale = osc.g;
    g.out_shift = osh.g;
    float *qh = f->cpu->alloc(f->cpu, (size_t)N * nd * sizeof(float));
    f->cpu->head_expand(f->cpu, (const Act *)(q.c), ldq, qs.c, NULL, N, n, d, (Act *)(qh));
    size_t sv[2], sc[2];
    f->cpu->attention_sizes(f->cpu, &c, &sv[0], &sc[0]);
    f->gpu->attention_sizes(f->gpu, &g, &sv[1], &sc[1]);
    float *saved[2] = {f->cpu->alloc(f->cpu, sv[0] * 4), f->gpu->alloc(f->gpu, sv[1] * 4)};
    float *scratch[2] = {f->cpu->alloc(f->cpu, sc[0] * 4), f->gpu->alloc(f->gpu, sc[1] * 4)};
    f->cpu->attention_forward(f->cpu, &c, (const Act *)(qh), (const Act *)(k.c), (const Act *)(v.c), (Act *)(out.c), saved[0], scratch[0]);
    f->cpu->attention_backward(f->cpu, &c, (const Act *)(qh), (const Act *)(k.c), (const Act *)(v.c), saved[0], (const Act *)(dout.c), (Act *)(dq.c), (Act *)(dk.c), (Act *)(dv.c), NULL, dosc.c, dosh.c,
                               scratch[0]);
    f->gpu->attention_forward(f->gpu, &g, (const Act *)(q.g), (const Act *)(k.g), (const Act *)(v.g), (Act *)(out.g), saved[1], scratch[1]);
    f->gpu->attention_backward(f->gpu, &g, (const Act *)(q.g), (const Act *)(k.g), (const Act *)(v.g), saved[1], (const Act *)(dout.g), (Act *)(dq.g), (Act *)(dk.g), (Act *)(dv.g), NULL, dosc.g, dosh.g,
                               scratch[1]);
    expect_close(f, &out, 1e-2, "q_scale attention out");
    expect_close(f, &dq, 1e-2, "q_scale attention per-head dq");
    expect_close(f, &dk, 1e-2, "q_scale attention dk");
    expect_close(f, &dv, 1e-2, "q_scale attention dv");
    expect_close(f, &dosc, 1e-2, "q_scale attention dout_scale");
    expect_close(f, &dosh, 1e-2, "q_scale attention dout_shift");
    f->cpu->free(f->cpu, qh);
    f->cpu->free(f->cpu, saved[0]);
    f->cpu->free(f->cpu, scratch[0]);
    f->gpu->free(f->gpu, saved[1]);
    f->gpu->free(f->gpu, scratch[1]);
    Buf *all[] = {&q, &k, &v, &qs, &osc, &osh, &dout, &out, &dq, &dk, &dv, &dosc, &dosh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

int main(void) {
    const struct CMUnitTest fp32[] = {
        cmocka_unit_test(test_head_scales_equal_add_scalar_and_mul),
        cmocka_unit_test(test_head_expand_backward_prod_fp32),
        cmocka_unit_test(test_attention_q_scale),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_head_scales_equal_add_scalar_and_mul),
        cmocka_unit_test(test_head_expand_backward_prod_bf16),
        cmocka_unit_test(test_attention_q_scale),
    };
    int failed = cmocka_run_group_tests_name("mhe ops fp32", fp32, setup_fp32, teardown);
    failed += cmocka_run_group_tests_name("mhe ops bf16", bf16, setup_bf16, teardown);
    return failed;
}
