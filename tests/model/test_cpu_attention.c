// The CPU backend's fused attention core (kernels/cpu/cpu_attention.c, the default) against the
// reference core (cpu_attention_ref.c, MHE_CPU_ATTENTION=ref; itself checked against PyTorch in
// test_model.c and against double oracles in test_cpu_bf16.c), forward output and every gradient
// (dq, dk, dv, dkey_bias, d out_scale, d out_shift) on every AttnShape feature the CPU takes:
// per-head, shared (sha / mhe_add) and grouped K/V heads, causal, key mask (including rows with
// no visible key), key bias, output scale and shift, dropout, padded row strides, T = 1, T not a
// multiple of the query block, B = 1 (blocks of one sequence on several threads), B >= 2 x threads
// (whole sequences per thread).
// Tolerances (relative Frobenius error):
//   fp32  1e-5: the same arithmetic in another order (products of other shapes, key-side sums
//         added per block); dropout compared on: a different kept set would be off by O(1).
//   bf16  1e-2: both cores round P, dS and the stored outputs to bf16 (8 significant bits); a
//         different fp32 accumulation order flips single roundings (2^-9 relative each).
// ctest runs it with the default query block and again with MHE_CPU_ATTN_BLOCK=16 on 3 threads
// (many blocks per sequence, three threads handing over key-side sums).
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
    Backend *ref[2], *fused[2];  // [fp32, bf16]
} Fixture;

typedef struct {
    int B, T, n, qh, kh, vh, dk, dv, pad;
    int causal, mask, bias, affine;
    float dropout;
} Case;

static float *random_floats(size_t n, uint64_t seed, double scale) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 7, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_next_normal(&r));
    return x;
}

static double rel_err(const float *x, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)x[i] - ref[i]) * ((double)x[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static Act *to_act(Backend *be, const float *host, size_t n) {
    Act *a = be->alloc(be, (n ? n : 1) * dtype_size(be->act));
    be->upload_act(be, a, host, n);
    return a;
}
static void from_act(Backend *be, float *host, Act *a, size_t n) {
    be->download_act(be, host, a, n);
    be->free(be, a);
}

enum { OUT, DQ, DK, DV, DKB, DSC, DSH, NRES };

// Runs forward and backward of the case on be; res[i] are host fp32 copies (caller frees).
static void run_case(Backend *be, const Case *c, float *res[NRES], size_t len[NRES]) {
    AttnShape s = {0};
    s.B = c->B, s.T = c->T, s.n_heads = c->n;
    s.q_heads = c->qh, s.k_heads = c->kh, s.v_heads = c->vh;
    s.qk_dim = c->dk, s.v_dim = c->dv;
    s.ldq = c->qh * c->dk + c->pad, s.ldk = c->kh * c->dk + c->pad, s.ldv = c->vh * c->dv + c->pad;
    s.scale = 1.0f / sqrtf((float)c->dk);
    s.causal = c->causal;
    s.dropout = c->dropout;
    s.seed = 1234, s.offset = 77;
    const int BT = c->B * c->T, n = c->n;
    len[OUT] = (size_t)BT * n * c->dv;
    len[DQ] = (size_t)BT * s.ldq, len[DK] = (size_t)BT * s.ldk, len[DV] = (size_t)BT * s.ldv;
    len[DKB] = (size_t)BT * n, len[DSC] = len[DSH] = (size_t)n * c->dv;
    float *q = random_floats(len[DQ], 21, 1.5), *k = random_floats(len[DK], 22, 1.5);
    float *v = random_floats(len[DV], 23, 1.0), *dout = random_floats(len[OUT], 24, 1.0);
    float *kb = random_floats(len[DKB], 25, 0.7);
    float *osc = random_floats(len[DSC], 26, 1.0), *osh = random_floats(len[DSH], 27, 1.0);
    int32_t *km = mhe_malloc((size_t)BT * sizeof *km);
    // Key 5 of every 11 hidden; the first 3 keys of sequence 1 too, so its first causal rows
    // (and every row at T = 1) see no key at all.
    for (int b = 0; b < c->B; b++)
        for (int j = 0; j < c->T; j++) km[b * c->T + j] = j % 11 != 5 && !(b == 1 && j < 3);
    s.key_mask = c->mask ? km : NULL;
    s.out_scale = c->affine ? osc : NULL;
    s.out_shift = c->affine ? osh : NULL;
    size_t saved_n, scratch_n;
    be->attention_sizes(be, &s, &saved_n, &scratch_n);
    float *saved = mhe_calloc(saved_n, sizeof(float)), *scratch = mhe_calloc(scratch_n + 1, sizeof(float));
    for (int i = 0; i < NRES; i++) res[i] = mhe_calloc(len[i] ? len[i] : 1, sizeof(float));
    Act *aq = to_act(be, q, len[DQ]), *ak = to_act(be, k, len[DK]), *av = to_act(be, v, len[DV]);
    Act *ado = to_act(be, dout, len[OUT]), *akb = to_act(be, kb, len[DKB]);
    Act *aout = to_act(be, res[OUT], len[OUT]), *adq = to_act(be, res[DQ], len[DQ]);
    Act *adk = to_act(be, res[DK], len[DK]), *adv = to_act(be, res[DV], len[DV]);
    Act *adkb = to_act(be, res[DKB], len[DKB]);
    s.key_bias = c->bias ? akb : NULL;
    be->attention_forward(be, &s, aq, ak, av, aout, saved, scratch);
    be->attention_backward(be, &s, aq, ak, av, saved, ado, adq, adk, adv, c->bias ? adkb : NULL,
                           c->affine ? res[DSC] : NULL, c->affine ? res[DSH] : NULL, scratch);
    from_act(be, res[OUT], aout, len[OUT]);
    from_act(be, res[DQ], adq, len[DQ]);
    from_act(be, res[DK], adk, len[DK]);
    from_act(be, res[DV], adv, len[DV]);
    from_act(be, res[DKB], adkb, len[DKB]);
    be->free(be, aq), be->free(be, ak), be->free(be, av), be->free(be, ado), be->free(be, akb);
    free(saved), free(scratch), free(q), free(k), free(v), free(dout), free(kb), free(osc), free(osh), free(km);
}

static void check_case(const Fixture *f, const Case *c) {
    static const char *names[NRES] = {"out", "dq", "dk", "dv", "dkbias", "dscale", "dshift"};
    for (int bf = 0; bf < 2; bf++) {
        float *r[NRES], *x[NRES];
        size_t len[NRES];
        run_case(f->ref[bf], c, r, len);
        run_case(f->fused[bf], c, x, len);
        const double tol = bf ? 1e-2 : 1e-5;
        print_message("%s B=%d T=%d n=%d heads q/k/v=%d/%d/%d d=%d/%d pad=%d causal=%d mask=%d bias=%d "
                      "affine=%d dropout=%g:", bf ? "bf16" : "fp32", c->B, c->T, c->n, c->qh, c->kh, c->vh,
                      c->dk, c->dv, c->pad, c->causal, c->mask, c->bias, c->affine, c->dropout);
        double worst = 0;
        for (int i = 0; i < NRES; i++) {
            if ((i == DKB && !c->bias) || ((i == DSC || i == DSH) && !c->affine)) continue;
            const double e = rel_err(x[i], r[i], len[i]);
            print_message(" %s %.1e", names[i], e);
            worst = e > worst ? e : worst;
        }
        print_message("\n");
        assert_true(worst <= tol);
        for (int i = 0; i < NRES; i++) free(r[i]), free(x[i]);
    }
}

static void test_per_head(void **state) {
    const Fixture *f = *state;
    const Case cases[] = {
        {2, 300, 4, 4, 4, 4, 16, 16, 0, 0, 0, 0, 0, 0.0f},
        {2, 300, 4, 4, 4, 4, 16, 16, 0, 1, 0, 0, 0, 0.0f},
        {2, 200, 4, 4, 4, 4, 16, 16, 5, 0, 1, 1, 1, 0.1f},
        {2, 257, 4, 4, 4, 4, 16, 16, 0, 1, 1, 1, 1, 0.1f},
        {1, 64, 1, 1, 1, 1, 32, 32, 3, 1, 0, 0, 0, 0.2f},
        {1, 512, 2, 2, 2, 2, 32, 32, 0, 0, 1, 0, 0, 0.1f},
        {3, 160, 2, 2, 2, 2, 24, 40, 0, 1, 1, 1, 0, 0.0f},
        // Two or more sequences per thread: whole sequences per thread (no hand-over).
        {5, 100, 2, 2, 2, 2, 16, 16, 0, 0, 1, 1, 1, 0.1f},
        {7, 70, 2, 2, 2, 2, 16, 16, 2, 1, 1, 0, 0, 0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(f, &cases[i]);
}

// Q and K shared by all heads (sha, mhe_add: one score product per block, Σ_h dS), and K/V
// heads shared by groups of query heads.
static void test_shared_heads(void **state) {
    const Fixture *f = *state;
    const Case cases[] = {
        {2, 300, 4, 1, 1, 4, 16, 16, 0, 0, 1, 1, 1, 0.1f},
        {2, 150, 4, 1, 1, 4, 16, 16, 2, 1, 0, 0, 0, 0.0f},
        {1, 130, 4, 1, 1, 1, 8, 8, 0, 0, 0, 1, 1, 0.0f},
        {2, 200, 4, 4, 2, 2, 16, 8, 0, 1, 1, 0, 0, 0.1f},
        {2, 99, 6, 3, 1, 2, 16, 16, 4, 1, 1, 1, 1, 0.1f},
        {7, 70, 4, 1, 1, 4, 16, 16, 0, 1, 1, 1, 0, 0.1f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(f, &cases[i]);
}

// Shapes the AMX products take (T, rows and head widths in 32s; tests/model/tests.cmake runs
// them again with MHE_CPU_AMX=0): every feature, shared and grouped heads, widths of 64, blocks of
// one sequence on several threads and whole sequences per thread.
static void test_amx_shapes(void **state) {
    const Fixture *f = *state;
    const Case cases[] = {
        {2, 256, 4, 4, 4, 4, 32, 32, 0, 1, 1, 1, 1, 0.1f},
        {2, 192, 4, 1, 1, 4, 32, 32, 2, 0, 1, 1, 1, 0.1f},
        {2, 128, 4, 4, 2, 2, 64, 32, 0, 1, 1, 0, 0, 0.1f},
        {5, 96, 2, 2, 2, 2, 32, 64, 3, 0, 1, 1, 1, 0.1f},
        {1, 384, 2, 2, 2, 2, 32, 32, 0, 1, 0, 0, 1, 0.0f},
        {2, 160, 4, 1, 1, 1, 32, 32, 0, 1, 1, 1, 0, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(f, &cases[i]);
}

// One token per sequence (sequence 1's only key is masked: an empty row, out = out_shift).
static void test_single_token(void **state) {
    const Fixture *f = *state;
    const Case cases[] = {
        {3, 1, 2, 2, 2, 2, 8, 8, 0, 0, 1, 1, 1, 0.0f},
        {3, 1, 2, 2, 2, 2, 8, 8, 0, 1, 1, 1, 1, 0.3f},
        {2, 1, 4, 1, 1, 4, 8, 8, 0, 1, 0, 1, 0, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(f, &cases[i]);
}

static Backend *make(const char *core, int bf16) {
    setenv("MHE_CPU_ATTENTION", core, 1);
    Backend *be = backend_cpu_create_for(0, bf16);
    unsetenv("MHE_CPU_ATTENTION");
    return be;
}
static int setup(void **state) {
    Fixture *f = mhe_calloc(1, sizeof *f);
    for (int bf = 0; bf < 2; bf++) {
        f->ref[bf] = make("ref", bf);
        f->fused[bf] = make("fused", bf);
    }
    *state = f;
    return 0;
}
static int teardown(void **state) {
    Fixture *f = *state;
    for (int bf = 0; bf < 2; bf++) {
        f->ref[bf]->destroy(f->ref[bf]);
        f->fused[bf]->destroy(f->fused[bf]);
    }
    free(f);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_head),
        cmocka_unit_test(test_shared_heads),
        cmocka_unit_test(test_single_token),
        cmocka_unit_test(test_amx_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
