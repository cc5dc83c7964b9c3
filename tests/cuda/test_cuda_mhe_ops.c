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
// rounded to bf16 on both).  The fixture is parity.h's, as test_cuda_parity.c's.
#include "parity.h"

static void test_head_scales_equal_add_scalar_and_mul(void **state) {
    Fix *f = *state;
    assert_non_null(f->gpu->head_scales);
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
    assert_non_null(f->gpu->head_expand_backward_prod);
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
    enum { B = 2, T = 40, n = 4, d = 16, ldq = 3 * d };
    const AttnShape s = {.B = B, .T = T, .n_heads = n, .q_heads = 1, .k_heads = 1, .v_heads = 1, .qk_dim = d,
                         .v_dim = d, .ldq = ldq, .ldk = d, .ldv = d, .scale = 0.25f, .dropout = 0.1f, .seed = 3,
                         .offset = 9};
    assert_null(f->cpu->attention_q_scale);
    assert_non_null(f->gpu->attention_q_scale);
    assert_int_equal(!!f->gpu->attention_q_scale(f->gpu, &s), f->gpu_bf16);
    if (f->gpu_bf16) parity_attention_q_scale(f, &s, "q_scale attention");
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
