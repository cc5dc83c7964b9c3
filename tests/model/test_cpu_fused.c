// The CPU backend's fused residual ops against the unfused sequences the model runs without
// them (trainer/model/model_forward.c, model_backward.c), on the same backend, bit for bit, in
// fp32 and in bf16 storage:
//   residual_layernorm_forward = dropout (r in place), add (into r), layernorm_forward;
//   layernorm_backward_dropout = layernorm_backward, then dropout of dx into dr.
// The fused loops compute each element as the ops they replace would and store what they would
// store (bf16: every intermediate rounded where the unfused op stores it), so nothing may differ
// — not even in bf16, where skipping an intermediate rounding would be the tempting shortcut.
// Every aliasing the ops allow is covered (s = r, y = s; dx = dy), with p > 0 and p = 0 (a copy),
// accumulating and not, a row count over the parallel split and a width that is no multiple of
// a vector.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"

enum { N = 301, C = 328 };
#define NC ((size_t)N * C)

static float *rand_floats(size_t n, uint64_t seed, double scale) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 9, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_next_normal(&r));
    return x;
}
static Act *up(Backend *be, const float *host, size_t n) {
    Act *a = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, a, host, n);
    return a;
}
static Act *alloc_act(Backend *be, size_t n) { return be->alloc(be, n * dtype_size(be->act)); }
// Two activations (or fp32 arrays) hold the same bits.
static void same_act(Backend *be, const char *what, const Act *a, const Act *b, size_t n) {
    if (memcmp(a, b, n * dtype_size(be->act)) != 0) fail_msg("%s %s: fused and unfused differ", dtype_name(be->act), what);
}
static void same_f(Backend *be, const char *what, const float *a, const float *b, size_t n) {
    if (memcmp(a, b, n * sizeof *a) != 0) fail_msg("%s %s: fused and unfused differ", dtype_name(be->act), what);
}

static void check_residual_layernorm(Backend *be, float p, int y_is_s) {
    float *x = rand_floats(NC, 1, 1.0), *r = rand_floats(NC, 2, 2.0);
    float *gamma = rand_floats(C, 3, 1.0), *beta = rand_floats(C, 4, 1.0);
    float *m[2], *rs[2];
    Act *s[2], *y[2];
    Act *ax = up(be, x, NC);
    for (int fused = 0; fused < 2; fused++) {
        m[fused] = mhe_malloc(N * sizeof(float)), rs[fused] = mhe_malloc(N * sizeof(float));
        s[fused] = up(be, r, NC);  // r, overwritten by s (as the model calls it)
        y[fused] = y_is_s ? s[fused] : alloc_act(be, NC);
        if (fused) {
            be->residual_layernorm_forward(be, ax, s[1], p, 77, 5, gamma, beta, N, C, 1e-5f, s[1], y[1], m[1], rs[1]);
        } else {
            be->dropout(be, s[0], s[0], NC, p, 77, 5);
            be->add(be, ax, s[0], s[0], NC);
            be->layernorm_forward(be, s[0], gamma, beta, N, C, 1e-5f, y[0], m[0], rs[0]);
        }
    }
    if (!y_is_s) same_act(be, "residual_layernorm s", s[1], s[0], NC);  // else y replaced it
    same_act(be, y_is_s ? "residual_layernorm y (= s)" : "residual_layernorm y", y[1], y[0], NC);
    same_f(be, "residual_layernorm mean", m[1], m[0], N);
    same_f(be, "residual_layernorm rstd", rs[1], rs[0], N);
    for (int f = 0; f < 2; f++) {
        if (!y_is_s) be->free(be, y[f]);
        be->free(be, s[f]), free(m[f]), free(rs[f]);
    }
    be->free(be, ax);
    free(x), free(r), free(gamma), free(beta);
}

static void check_layernorm_backward_dropout(Backend *be, float p, int accumulate) {
    float *x = rand_floats(NC, 11, 2.0), *dy = rand_floats(NC, 12, 1.0), *dx0 = rand_floats(NC, 13, 1.0);
    float *gamma = rand_floats(C, 14, 1.0), *beta = rand_floats(C, 15, 1.0);
    float *mean = mhe_malloc(N * sizeof *mean), *rstd = mhe_malloc(N * sizeof *rstd);
    Act *ax = up(be, x, NC), *ay = alloc_act(be, NC);
    be->layernorm_forward(be, ax, gamma, beta, N, C, 1e-5f, ay, mean, rstd);
    Act *dx[2], *dr[2];
    float *dg[2], *db[2];
    for (int fused = 0; fused < 2; fused++) {
        Act *ady = up(be, dy, NC);
        // Not accumulating, dx takes dy's place (as the model calls it); accumulating, its own.
        dx[fused] = accumulate ? up(be, dx0, NC) : ady;
        dr[fused] = alloc_act(be, NC);
        dg[fused] = mhe_calloc(C, sizeof(float)), db[fused] = mhe_calloc(C, sizeof(float));
        if (fused) {
            be->layernorm_backward_dropout(be, ady, ax, gamma, mean, rstd, N, C, dx[1], accumulate, dg[1], db[1], p,
                                           31, 7, dr[1]);
        } else {
            be->layernorm_backward(be, ady, ax, gamma, mean, rstd, N, C, dx[0], accumulate, dg[0], db[0]);
            be->dropout(be, dx[0], dr[0], NC, p, 31, 7);
        }
        if (accumulate) be->free(be, ady);
    }
    same_act(be, accumulate ? "layernorm_backward_dropout dx (accumulate)" : "layernorm_backward_dropout dx (= dy)",
             dx[1], dx[0], NC);
    same_act(be, "layernorm_backward_dropout dr", dr[1], dr[0], NC);
    same_f(be, "layernorm_backward_dropout dgamma", dg[1], dg[0], C);
    same_f(be, "layernorm_backward_dropout dbeta", db[1], db[0], C);
    for (int f = 0; f < 2; f++) be->free(be, dx[f]), be->free(be, dr[f]), free(dg[f]), free(db[f]);
    be->free(be, ax), be->free(be, ay);
    free(x), free(dy), free(dx0), free(gamma), free(beta), free(mean), free(rstd);
}

static void test_residual_layernorm_forward(void **state) {
    (void)state;
    for (int bf = 0; bf < 2; bf++) {
        Backend *be = backend_cpu_create_for(0, bf);
        assert_non_null(be->residual_layernorm_forward);
        for (int y_is_s = 0; y_is_s < 2; y_is_s++) {
            check_residual_layernorm(be, 0.1f, y_is_s);
            check_residual_layernorm(be, 0.0f, y_is_s);
        }
        be->destroy(be);
    }
}

static void test_layernorm_backward_dropout(void **state) {
    (void)state;
    for (int bf = 0; bf < 2; bf++) {
        Backend *be = backend_cpu_create_for(0, bf);
        assert_non_null(be->layernorm_backward_dropout);
        for (int acc = 0; acc < 2; acc++) {
            check_layernorm_backward_dropout(be, 0.1f, acc);
            check_layernorm_backward_dropout(be, 0.0f, acc);
        }
        be->destroy(be);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_residual_layernorm_forward),
        cmocka_unit_test(test_layernorm_backward_dropout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
