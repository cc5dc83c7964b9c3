// Training-mode properties of the model that the (dropout-free) PyTorch oracle cannot see:
// gradient accumulation over micro-batches, dropout masks shared by forward and backward, and
// the dropout op's statistics.
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
#include "tests/common/test_util.h"
#include "trainer/model/model.h"

// The oracle tests' model with 8 positions, the given dropout and (gqa) 2 K/V groups.
static void train_config(Config *cfg, Arch arch, AttentionType type, float dropout) {
    TinyShape shape = TINY_SHAPE;
    shape.max_seq = 8;
    tiny_config(cfg, arch, type, shape);
    cfg->model.dropout = dropout;
    cfg->model.attn_dropout = dropout;
    cfg->attention.embed_std = 0.3f;
    cfg->attention.groups = type == ATTN_GQA ? 2 : 0;
    config_resolve(cfg, "test_model_train");
}

static void random_batch(int B, int T, int V, int32_t *ids, int32_t *labels, uint64_t seed) {
    Rng r = rng_stream(seed, 3, 4);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        labels[i] = rng_next(&r) % 3 ? (int32_t)(rng_next(&r) % (uint64_t)V) : -100;
    }
    labels[0] = 1;
    labels[T] = 2;
}

// Two micro-batches of one sequence, each backward divided by the total label count, give the
// gradient of the mean loss over the two-sequence batch (≤ 1e-5 relative: only the summation
// order differs).
static void test_accumulation_over_micro_batches_gives_global_mean(void **state) {
    Backend *be = *state;
    const Arch arches[2] = {ARCH_BERT, ARCH_GPT};
    for (int a = 0; a < 2; a++) {
        Config cfg;
        train_config(&cfg, arches[a], ATTN_MHE_MUL, 0.0f);
        const int T = 6, V = 17;
        int32_t ids[12], labels[12];
        random_batch(2, T, V, ids, labels, 11);
        Model *m = model_create(&cfg, be, 2, T);
        model_init_params(m, 5);
        const size_t n = model_param_count(m);
        float *full = mhe_malloc(n * sizeof *full), *acc = mhe_malloc(n * sizeof *acc);
        model_zero_grad(m);
        float loss_full = model_forward(m, ids, NULL, NULL, labels, 2, T, 0);
        long total = model_label_count(m);
        model_backward(m, 0);
        model_get_grads(m, full);

        model_zero_grad(m);
        double loss_sum = 0;
        for (int b = 0; b < 2; b++) {
            model_forward(m, ids + b * T, NULL, NULL, labels + b * T, 1, T, 0);
            loss_sum += model_loss_sum(m);
            model_backward(m, (double)total);
        }
        model_get_grads(m, acc);
        assert_true(fabs(loss_sum / total - loss_full) <= 1e-5 * fabs(loss_full));
        double e = rel_l2(acc, full, n);
        print_message("%s: accumulated vs full-batch gradient rel err %.2e\n", arch_name(arches[a]), e);
        assert_true(e <= 1e-5);
        free(full);
        free(acc);
        model_free(m);
        config_free(&cfg);
    }
}

// An arena sized for (3, 8) run at (2, 6) gives exactly the model sized for (2, 6): buffers are
// laid out by the runtime shape, not the capacity.
static void test_smaller_batch_than_arena_is_exact(void **state) {
    Backend *be = *state;
    Config cfg;
    train_config(&cfg, ARCH_GPT, ATTN_MHE_ADD, 0.0f);
    const int B = 2, T = 6, V = 17;
    int32_t ids[12], labels[12];
    random_batch(B, T, V, ids, labels, 14);
    Model *small = model_create(&cfg, be, B, T), *big = model_create(&cfg, be, 3, 8);
    model_init_params(small, 9);
    model_init_params(big, 9);
    const size_t n = model_param_count(small);
    float *g1 = mhe_malloc(n * sizeof *g1), *g2 = mhe_malloc(n * sizeof *g2);
    model_zero_grad(small);
    model_zero_grad(big);
    float l1 = model_forward(small, ids, NULL, NULL, labels, B, T, 0);
    float l2 = model_forward(big, ids, NULL, NULL, labels, B, T, 0);
    model_backward(small, 0);
    model_backward(big, 0);
    model_get_grads(small, g1);
    model_get_grads(big, g2);
    assert_true(l1 == l2);
    assert_memory_equal(g1, g2, n * sizeof *g1);
    free(g1);
    free(g2);
    model_free(small);
    model_free(big);
    config_free(&cfg);
}

// The head on labelled rows only (model_set_full_logits(m, 0)) gives the same loss, the same
// logits on those rows and the same gradients as the full head (≤ 1e-6 relative).
static void test_compact_head_equals_full_head(void **state) {
    Backend *be = *state;
    const Arch arches[2] = {ARCH_BERT, ARCH_GPT};
    for (int a = 0; a < 2; a++) {
        Config cfg;
        train_config(&cfg, arches[a], ATTN_GQA, 0.0f);
        const int B = 2, T = 6, V = 17, N = B * T;
        int32_t ids[12], labels[12];
        random_batch(B, T, V, ids, labels, 13);
        Model *m = model_create(&cfg, be, B, T);
        model_init_params(m, 8);
        const size_t n = model_param_count(m);
        float *gf = mhe_malloc(n * sizeof *gf), *gc = mhe_malloc(n * sizeof *gc);
        float *lf = mhe_malloc((size_t)N * V * sizeof *lf), *lc = mhe_malloc((size_t)N * V * sizeof *lc);
        model_zero_grad(m);
        float loss_full = model_forward(m, ids, NULL, NULL, labels, B, T, 0);
        model_download_logits(m, lf);
        model_backward(m, 0);
        model_get_grads(m, gf);
        model_set_full_logits(m, 0);
        model_zero_grad(m);
        float loss_c = model_forward(m, ids, NULL, NULL, labels, B, T, 0);
        model_download_logits(m, lc);
        model_backward(m, 0);
        model_get_grads(m, gc);
        assert_true(fabsf(loss_c - loss_full) <= 1e-6f * fabsf(loss_full));
        long M = model_label_count(m), r = 0;
        assert_true(M > 0 && M < N);
        for (int i = 0; i < N; i++)
            if (labels[i] >= 0) {
                for (int v = 0; v < V; v++) assert_true(fabsf(lc[r * V + v] - lf[(size_t)i * V + v]) <= 1e-5f);
                r++;
            }
        double e = rel_l2(gc, gf, n);
        print_message("%s: compact vs full head gradient rel err %.2e\n", arch_name(arches[a]), e);
        assert_true(e <= 1e-6);
        free(gf);
        free(gc);
        free(lf);
        free(lc);
        model_free(m);
        config_free(&cfg);
    }
}

// With dropout on, the backward must use the forward's masks: our gradient against centred
// differences of our own fp32 loss with the masks held fixed (model_set_dropout_seed before
// each forward).  fp32 loss round-off (~3e-7) over 2h = 2e-2 and the O(h²) truncation bound the
// error near 1e-3 ‖g‖; a mask mismatch gives O(‖g‖).  Tolerance 2e-2 ‖g‖ per tensor, for
// tensors with ‖g‖ ≥ 1e-3.
static void test_dropout_backward_uses_forward_masks(void **state) {
    Backend *be = *state;
    const Arch arches[2] = {ARCH_BERT, ARCH_GPT};
    for (int a = 0; a < 2; a++) {
        Config cfg;
        train_config(&cfg, arches[a], ATTN_MHA, 0.3f);
        const int B = 2, T = 6, V = 17;
        int32_t ids[12], labels[12];
        random_batch(B, T, V, ids, labels, 12);
        Model *m = model_create(&cfg, be, B, T);
        model_init_params(m, 6);
        const size_t n = model_param_count(m);
        float *w = mhe_malloc(n * sizeof *w), *g = mhe_malloc(n * sizeof *g), *wp = mhe_malloc(n * sizeof *wp);
        model_get_params(m, w);
        model_zero_grad(m);
        model_set_dropout_seed(m, 77);
        float l0 = model_forward(m, ids, NULL, NULL, labels, B, T, 1);
        model_set_dropout_seed(m, 77);
        float l0b = model_forward(m, ids, NULL, NULL, labels, B, T, 1);
        assert_true(l0 == l0b);  // same seed, same masks
        model_backward(m, 0);
        model_get_grads(m, g);
        float l_eval = model_forward(m, ids, NULL, NULL, labels, B, T, 0);
        assert_true(fabs(l_eval - l0) > 1e-4);  // dropout changes the function when on

        const ParamTable *t = model_param_table(m);
        const double h = 1e-2;
        int checked = 0;
        double worst = 0;
        for (int i = 0; i < t->count; i++) {
            const ParamTensor *p = &t->tensors[i];
            double gn = 0;
            for (size_t j = 0; j < p->numel; j++) gn += (double)g[p->offset + j] * g[p->offset + j];
            gn = sqrt(gn);
            if (gn < 1e-3) continue;
            // Direction: the gradient itself, so g·u = ‖g‖ is large against the round-off.
            double L[2];
            for (int s = 0; s < 2; s++) {
                memcpy(wp, w, n * sizeof *wp);
                for (size_t j = 0; j < p->numel; j++)
                    wp[p->offset + j] += (float)((s ? -h : h) * g[p->offset + j] / gn);
                model_set_params(m, wp);
                model_set_dropout_seed(m, 77);
                model_forward(m, ids, NULL, NULL, labels, B, T, 1);
                L[s] = model_loss_sum(m) / model_label_count(m);
            }
            double fd = (L[0] - L[1]) / (2 * h);
            double e = fabs(fd - gn) / gn;
            if (e > worst) worst = e;
            if (e > 2e-2) print_message("%s: %s FD %.6g vs |g| %.6g\n", arch_name(arches[a]), p->name, fd, gn);
            assert_true(e <= 2e-2);
            checked++;
        }
        print_message("%s: dropout FD checked %d tensors, worst rel err %.2e\n", arch_name(arches[a]), checked, worst);
        assert_true(checked > 10);
        free(w);
        free(g);
        free(wp);
        model_free(m);
        config_free(&cfg);
    }
}

// The dropout op keeps a fraction 1-p (binomial: within 5 sigma) and scales kept values by
// 1/(1-p); the same (seed, offset) gives the same mask, another offset a different one.
static void test_dropout_keeps_expected_fraction(void **state) {
    Backend *be = *state;
    const size_t n = 100000;
    const float p = 0.3f;
    const size_t bytes = n * dtype_size(be->act);
    Act *x = be->alloc(be, bytes), *y = be->alloc(be, bytes), *z = be->alloc(be, bytes);
    float *hx = mhe_malloc(n * sizeof *hx), *hy = mhe_malloc(n * sizeof *hy), *hz = mhe_malloc(n * sizeof *hz);
    for (size_t i = 0; i < n; i++) hx[i] = 1.0f + (float)(i % 3);
    be->upload_act(be, x, hx, n);
    be->dropout(be, x, y, n, p, 9, 100);
    be->download_act(be, hy, y, n);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (hy[i] != 0.0f) {
            kept++;
            assert_true(fabsf(hy[i] - hx[i] / (1.0f - p)) <= 1e-6f * hy[i]);
        }
    }
    double mean = n * (1.0 - p), sd = sqrt(n * p * (1.0 - p));
    assert_true(fabs((double)kept - mean) <= 5 * sd);
    be->dropout(be, x, z, n, p, 9, 100);
    be->download_act(be, hz, z, n);
    assert_memory_equal(hy, hz, n * sizeof *hy);
    be->dropout(be, x, z, n, p, 9, 101);
    be->download_act(be, hz, z, n);
    assert_memory_not_equal(hy, hz, n * sizeof *hy);
    be->free(be, x);
    be->free(be, y);
    be->free(be, z);
    free(hx);
    free(hy);
    free(hz);
}

// The loop form of the dropout decision equals the reference form bit for bit (other backends
// may use either), including p at and around multiples of 2^-24.
static void test_dropout_fast_decision_equals_reference(void **state) {
    (void)state;
    const float ps[] = {0.0f, 0.1f, 0.3f, 0.5f, 0.9f, 1.0f / 16777216.0f, 3.0f / 16777216.0f,
                        0x1.000002p-1f, 0.99999994f};
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        uint64_t key = ops_dropout_key(42, 7);
        uint32_t thr = ops_dropout_threshold(ps[k]);
        for (uint64_t i = 0; i < 200000; i++)
            assert_int_equal(ops_dropout_keep_fast(key, i, thr), ops_dropout_keep(42, 7, i, ps[k]));
    }
}

// The position hash (ops.h ops_dropout_keep_fast) draws as independent bits should: at p = 1/2
// the kept fraction, and the joint fractions of neighbours (i, i+1), of keys a row apart (i,
// i+512), of the same i under two sites' keys, and of i and i + 2^32 (the index's high word)
// are 1/2 and 1/4 within 6 standard deviations over 2^20 draws.
static void test_dropout_bits_look_independent(void **state) {
    (void)state;
    const uint64_t n = 1u << 20, key = ops_dropout_key(42, 7), key2 = ops_dropout_key(42, 8);
    const uint32_t thr = ops_dropout_threshold(0.5f);
    uint64_t kept = 0, both[4] = {0, 0, 0, 0};
    for (uint64_t i = 0; i < n; i++) {
        const int k = ops_dropout_keep_fast(key, i, thr);
        kept += (uint64_t)k;
        both[0] += (uint64_t)(k & ops_dropout_keep_fast(key, i + 1, thr));
        both[1] += (uint64_t)(k & ops_dropout_keep_fast(key, i + 512, thr));
        both[2] += (uint64_t)(k & ops_dropout_keep_fast(key2, i, thr));
        both[3] += (uint64_t)(k & ops_dropout_keep_fast(key, i + (1ULL << 32), thr));
    }
    const double f = (double)kept / (double)n, sd1 = sqrt(0.25 / (double)n), sd2 = sqrt(0.1875 / (double)n);
    print_message("kept %.5f; joint: neighbour %.5f, row %.5f, other site %.5f, high word %.5f\n", f,
                  (double)both[0] / (double)n, (double)both[1] / (double)n, (double)both[2] / (double)n,
                  (double)both[3] / (double)n);
    assert_true(fabs(f - 0.5) <= 6 * sd1);
    for (int j = 0; j < 4; j++) assert_true(fabs((double)both[j] / (double)n - 0.25) <= 6 * sd2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropout_bits_look_independent),
        cmocka_unit_test(test_accumulation_over_micro_batches_gives_global_mean),
        cmocka_unit_test(test_compact_head_equals_full_head),
        cmocka_unit_test(test_smaller_batch_than_arena_is_exact),
        cmocka_unit_test(test_dropout_backward_uses_forward_masks),
        cmocka_unit_test(test_dropout_keeps_expected_fraction),
        cmocka_unit_test(test_dropout_fast_decision_equals_reference),
    };
    return cmocka_run_group_tests(tests, cpu_backend_setup, cpu_backend_teardown);
}
