// The CPU backend's bf16 weight copies (kernels/cpu/cpu_weights.c, ops.h weights_steady) against
// rounding per call (MHE_CPU_WEIGHT_CACHE=0): training in bf16 gives the same losses and weights
// bit for bit, through gradient accumulation, a new set of weights uploaded mid-run and a resume
// into a fresh model; and products outside a window, or after a backend write into one, never
// reuse a copy.  The reference is the same backend rounding every fp32 operand at every call,
// which is what the cache must reproduce exactly (a stale copy changes the weights' bf16 values:
// the learning rate is large enough that they move every step).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"

#define STEPS 6
#define B 2
#define T 8

static Backend *bf16_backend(int cache) {
    setenv("MHE_CPU_WEIGHT_CACHE", cache ? "1" : "0", 1);
    // Every reused copy is also compared with a fresh rounding (aborts when stale).
    setenv("MHE_CPU_WEIGHT_CHECK", cache ? "1" : "0", 1);
    Backend *be = backend_cpu_create_for(0, 1);
    unsetenv("MHE_CPU_WEIGHT_CACHE");
    unsetenv("MHE_CPU_WEIGHT_CHECK");
    return be;
}
static long reused(Backend *be) { return cpu_weights_reused(cpu_gemm_weights(cpu_ctx(be)->gemm)); }

static void make_config(Config *cfg, AttentionType type) {
    TinyShape shape = TINY_SHAPE;
    shape.max_seq = T;
    tiny_config(cfg, ARCH_BERT, type, shape);
    cfg->model.dropout = 0.1f;
    cfg->model.attn_dropout = 0.1f;
    cfg->optim.lr = 1e-2f;
    config_resolve(cfg, "test_cpu_weight_cache");
}

static void batch(int step, int mb, int V, int32_t *ids, int32_t *labels) {
    Rng r = rng_stream(100 + (uint64_t)step, (uint64_t)mb, 7);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        labels[i] = rng_next(&r) % 3 ? (int32_t)(rng_next(&r) % (uint64_t)V) : -100;
    }
    labels[0] = 1;
}

// STEPS optimizer steps of two micro-batches each, as the trainer runs them on the CPU (host
// AdamW on the backend's memory).  After step 1 new weights are uploaded (model_set_params);
// after step 3 the run resumes into a fresh model (weights and moments carried over).
static float *train(Backend *be, AttentionType type, float *losses, size_t *n_out) {
    Config cfg;
    make_config(&cfg, type);
    Model *m = model_create(&cfg, be, B, T);
    model_init_params(m, 3);
    const size_t n = model_param_count(m);
    OptimState s;
    optim_state_init(&s, model_param_table(m), 0, n);
    float *host = mhe_malloc(n * sizeof *host);
    const int V = cfg.model.vocab_size;
    int32_t ids[B * T], labels[B * T];
    for (int step = 0; step < STEPS; step++) {
        model_zero_grad(m);
        long total = 0;
        for (int mb = 0; mb < 2; mb++) {
            batch(step, mb, V, ids, labels);
            for (int i = 0; i < B * T; i++) total += labels[i] >= 0;
        }
        float loss = 0;
        for (int mb = 0; mb < 2; mb++) {
            batch(step, mb, V, ids, labels);
            loss += model_forward(m, ids, NULL, NULL, labels, B, T, 1);
            model_backward(m, (double)total);
        }
        losses[step] = loss;
        optim_step(&s, &cfg.optim, model_param_table(m), model_params(m), model_grads(m), cfg.optim.lr, NULL, NULL);
        if (step == 1) {
            model_get_params(m, host);
            for (size_t i = 0; i < n; i++) host[i] *= 0.75f;
            model_set_params(m, host);
        }
        if (step == 3) {
            const uint64_t counter = model_dropout_counter(m);
            model_get_params(m, host);
            model_free(m);
            m = model_create(&cfg, be, B, T);
            model_set_params(m, host);
            model_set_dropout_counter(m, counter);
        }
    }
    float *final = mhe_malloc(n * sizeof *final);
    model_get_params(m, final);
    *n_out = n;
    free(host);
    optim_state_free(&s);
    model_free(m);
    config_free(&cfg);
    return final;
}

static void test_training_matches_per_call_rounding(void **state) {
    (void)state;
    const AttentionType types[] = {ATTN_MHA, ATTN_MHE_MUL, ATTN_MHE_ADD};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        float lc[STEPS], lr[STEPS];
        size_t n, n2;
        Backend *cached = bf16_backend(1), *per_call = bf16_backend(0);
        float *wc = train(cached, types[k], lc, &n), *wr = train(per_call, types[k], lr, &n2);
        assert_int_equal(n, n2);
        print_message("%s: losses %.6f .. %.6f, %ld products reused a weight copy\n",
                      attention_type_name(types[k]), lc[0], lc[STEPS - 1], reused(cached));
        assert_true(reused(cached) > 0);
        assert_int_equal(reused(per_call), 0);
        assert_memory_equal(lc, lr, sizeof lc);
        assert_memory_equal(wc, wr, n * sizeof *wc);
        assert_true(lc[STEPS - 1] != lc[0]);
        cached->destroy(cached);
        per_call->destroy(per_call);
        free(wc);
        free(wr);
    }
}

// y = x Wᵀ through linear_forward, then W changes and the product runs again: outside a window
// (no declaration) and inside one ended by a backend write (upload) the second product uses the
// new W, as the per-call backend's does.
static void linear_twice(Backend *be, int declare, float *y1, float *y2) {
    enum { N = 5, IN = 24, OUT = 7 };
    float *W = be->alloc(be, IN * OUT * sizeof *W);
    Act *x = be->alloc(be, N * IN * 2), *y = be->alloc(be, N * OUT * 2);
    float hx[N * IN], hw[IN * OUT];
    Rng r = rng_stream(9, 1, 2);
    for (int i = 0; i < N * IN; i++) hx[i] = (float)rng_next_normal(&r);
    for (int i = 0; i < IN * OUT; i++) hw[i] = (float)rng_next_normal(&r);
    be->upload_act(be, x, hx, N * IN);
    be->upload(be, W, hw, sizeof hw);
    if (declare) be->weights_steady(be, W, IN * OUT);
    be->linear_forward(be, x, W, NULL, N, IN, OUT, y);
    be->linear_forward(be, x, W, NULL, N, IN, OUT, y);  // a second use in the window
    be->download_act(be, y1, y, N * OUT);
    for (int i = 0; i < IN * OUT; i++) hw[i] += 0.5f;
    be->upload(be, W, hw, sizeof hw);
    be->linear_forward(be, x, W, NULL, N, IN, OUT, y);
    be->download_act(be, y2, y, N * OUT);
    if (declare) be->weights_steady(be, NULL, 0);
    be->free(be, W);
    be->free(be, x);
    be->free(be, y);
}

static void test_no_reuse_outside_a_window_or_after_a_write(void **state) {
    (void)state;
    float c1[35], c2[35], r1[35], r2[35];
    Backend *per_call = bf16_backend(0);
    linear_twice(per_call, 0, r1, r2);
    for (int declare = 0; declare < 2; declare++) {
        Backend *be = bf16_backend(1);
        linear_twice(be, declare, c1, c2);
        assert_memory_equal(c1, r1, sizeof c1);
        assert_memory_equal(c2, r2, sizeof c2);
        assert_memory_not_equal(c1, c2, sizeof c1);
        // Reused only by the second product inside the declared window.
        assert_int_equal(reused(be), declare ? 1 : 0);
        be->destroy(be);
    }
    per_call->destroy(per_call);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_training_matches_per_call_rounding),
        cmocka_unit_test(test_no_reuse_outside_a_window_or_after_a_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
