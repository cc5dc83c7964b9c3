// The optional ops of kernels/ops.h that mhe_mul's glue uses on CUDA, against the op sequence
// they replace run on the CPU backend (whose own ops are checked against naive loops and, through
// the model, against PyTorch):
//   head_scales                == add_scalar x3 (+ mul) per row        exactly (the same fp32 ops)
//   head_expand_backward_prod  == zero dm, head_expand_backward, mul_acc x2
//                                 norm-wise relative error <= 1e-5 (fp32 mode; the column sums add
//                                 in another order), <= 1e-2 in bf16 mode
// Shapes: several row chunks of the column sums with a partial last one, n d not a multiple of
// the 32-column blocks, a strided x (a column slice), n d too wide for the fused dx + sums kernel,
// and layer rows at a stride wider than what they hold (parameters between them), over both
// backends' fp32 and bf16 modes.
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
} Fix;

typedef struct {
    size_t n;
    float *host, *c, *g;
} Buf;

static float uniform(Fix *f) {
    f->rng = f->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((f->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static Buf buf_rand(Fix *f, size_t n) {
    Buf b = {n, malloc(n * sizeof(float)), NULL, NULL};
    for (size_t i = 0; i < n; i++) b.host[i] = uniform(f);
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * sizeof(float));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload(f->gpu, b.g, b.host, n * sizeof(float));
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
    f->cpu = backend_cpu_create_for(2, bf16);
    f->gpu = backend_cuda_create(0, bf16);
    f->rng = 777;
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
    Buf dout = buf_rand(f, (size_t)N * nd), x = buf_rand(f, (size_t)N * ldx), fv = buf_rand(f, nd),
        gv = buf_rand(f, nd), mul = buf_rand(f, nd), dx = buf_rand(f, (size_t)N * ldx), df = buf_rand(f, nd),
        dg = buf_rand(f, nd);
    float *dm = f->cpu->alloc(f->cpu, nd * sizeof(float));
    for (int acc = 0; acc < 2; acc++) {
        f->cpu->zero(f->cpu, dm, nd * sizeof(float));
        f->cpu->head_expand_backward(f->cpu, dout.c, x.c, ldx, mul.c, N, n, d, dx.c, acc, dm, NULL);
        f->cpu->mul_acc(f->cpu, dm, gv.c, df.c, nd);
        f->cpu->mul_acc(f->cpu, dm, fv.c, dg.c, nd);
        f->gpu->head_expand_backward_prod(f->gpu, dout.g, x.g, ldx, mul.g, fv.g, gv.g, N, n, d, dx.g, acc, df.g,
                                          dg.g);
        expect_close(f, &dx, tol, "head_expand_backward_prod dx");
        expect_close(f, &df, tol, "head_expand_backward_prod df");
        expect_close(f, &dg, tol, "head_expand_backward_prod dg");
    }
    // One of the two outputs; no dx.
    f->cpu->zero(f->cpu, dm, nd * sizeof(float));
    f->cpu->head_expand_backward(f->cpu, dout.c, x.c, ldx, mul.c, N, n, d, NULL, 0, dm, NULL);
    f->cpu->mul_acc(f->cpu, dm, gv.c, df.c, nd);
    f->gpu->head_expand_backward_prod(f->gpu, dout.g, x.g, ldx, mul.g, fv.g, gv.g, N, n, d, NULL, 0, df.g, NULL);
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

int main(void) {
    const struct CMUnitTest fp32[] = {
        cmocka_unit_test(test_head_scales_equal_add_scalar_and_mul),
        cmocka_unit_test(test_head_expand_backward_prod_fp32),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_head_scales_equal_add_scalar_and_mul),
        cmocka_unit_test(test_head_expand_backward_prod_bf16),
    };
    int failed = cmocka_run_group_tests_name("mhe ops fp32", fp32, setup_fp32, teardown);
    failed += cmocka_run_group_tests_name("mhe ops bf16", bf16, setup_bf16, teardown);
    return failed;
}
