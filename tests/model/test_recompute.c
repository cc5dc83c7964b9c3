// train.recompute (trainer/model/README.md): `attention` and `layer` give the losses, logits and
// parameter gradients of `none` bit for bit, with dropout on (hidden and attention 0.1), over
// two accumulated micro-batches (the second through the compact head), an evaluation forward in
// between, and the fine-tuning heads; and the activation arena shrinks by exactly the buffers
// the mode shares (worked out below from the layout, not read from the model).
// The oracle is the `none` model (itself tested against PyTorch in test_model.c); three layers,
// so that recomputed layers (all but the last) sit between kept ones.
// One source, two builds: tests/model runs `cpu` and `cpu_bf16`; tests/cuda builds it with
// MHE_TEST_CUDA against the emulated CUDA backend and runs `cuda` and `cuda_bf16` (in bf16 the
// emulation checks every bf16 weight copy a matmul reads against its fp32 data).
// One exception on CUDA: the word and token-type embedding gradients are scattered with
// atomicAdd (kernels/cuda/README.md: the one non-deterministic reduction), so their summation
// order varies between any two runs, `none` against `none` included; they are compared at
// 1e-5 relative (max-wise), every other gradient bit for bit.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/model/model.h"
#ifdef MHE_TEST_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#define B_ 2
#define T_ 7
#define L_ 3

static const char *BACKEND = "cpu";  // argv[1]

static Backend *make_backend(void) {
#ifdef MHE_TEST_CUDA
    return backend_cuda_create(0, strcmp(BACKEND, "cuda_bf16") == 0);
#else
    // fp32 on one thread (fast under load: OpenMP barriers stall when the cores are shared), bf16
    // on two, so that the threaded kernels' determinism is covered too.
    const int bf16 = strcmp(BACKEND, "cpu_bf16") == 0;
    return backend_cpu_create_for(bf16 ? 2 : 1, bf16);
#endif
}

static const char *MODES[3] = {"none", "attention", "layer"};

// The shape of the models: TINY_SHAPE with L_ layers, or heads of d = 16 (wide), where the CUDA
// backend's bf16 flash attention runs on tensor cores on the bf16 Q, K and V.
static int WIDE;

static void make_config(Config *cfg, const VariantCase *c, RecomputeMode mode, TaskType task) {
    TinyShape shape = TINY_SHAPE;
    shape.layers = L_;
    if (WIDE) shape.hidden = 32, shape.heads = 2, shape.ffn = 40;
    tiny_config(cfg, c->arch, c->type, shape);
    cfg->model.dropout = 0.1f;
    cfg->model.attn_dropout = 0.1f;
    cfg->attention.embed_std = 0.3f;
    cfg->attention.fast_path = c->fast;
    cfg->train.recompute = mode;
    config_resolve(cfg, "test_recompute");
    if (task != TASK_NONE) {
        cfg->task.type = task;
        cfg->task.num_labels = task == TASK_CLASSIFICATION ? 3 : task == TASK_REGRESSION ? 1 : 0;
        cfg->task.classifier_dropout = 0.1f;
    }
}

// What one mode's model produced: everything the trainer reads from a step.
typedef struct {
    float loss[3];     // train micro-batch 1, eval, train micro-batch 2 (compact head)
    float *logits;     // [B*T, V] of micro-batch 1
    float *grads;      // after both backwards
    size_t n, arena;
    size_t atomic_lo[2], atomic_hi[2];  // CUDA: gradient ranges summed by atomicAdd (see top)
} Result;

// The embedding tensors the CUDA backend's scatter sums with atomics.
static void note_atomic_ranges(Model *m, Result *res) {
#ifdef MHE_TEST_CUDA
    static const char *names[2] = {"embed.word", "embed.type"};
    for (int i = 0; i < 2; i++) {
        const ParamTensor *t = param_table_find(model_param_table(m), names[i]);
        res->atomic_lo[i] = t ? t->offset : 0;
        res->atomic_hi[i] = t ? t->offset + t->numel : 0;
    }
#else
    (void)m;
    (void)res;
#endif
}

static int in_atomic_range(const Result *r, size_t i) {
    return (i >= r->atomic_lo[0] && i < r->atomic_hi[0]) || (i >= r->atomic_lo[1] && i < r->atomic_hi[1]);
}

static void inputs(const Config *cfg, uint64_t seed, int32_t *ids, int32_t *types, int32_t *mask, int32_t *labels) {
    Rng r = rng_stream(seed, 1, 2);
    const int V = cfg->model.vocab_size, bert = cfg->model.arch == ARCH_BERT;
    for (int i = 0; i < B_ * T_; i++) {
        ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        types[i] = (int32_t)(rng_next(&r) % 2);
        mask[i] = !(bert && i / T_ == 1 && i % T_ >= T_ - 2);
    }
    for (int i = 0; i < B_ * T_; i++) {
        const int t = i % T_;
        if (!bert) labels[i] = t + 1 < T_ ? ids[i + 1] : -100;
        else labels[i] = mask[i] && (rng_next(&r) % 2 == 0 || t == 0) ? (int32_t)(rng_next(&r) % (uint64_t)V) : -100;
    }
}

// The same randomised parameters for every mode (param_init plus noise everywhere).
static void set_params(Model *m) {
    const size_t n = model_param_count(m);
    float *w = mhe_malloc(n * sizeof *w);
    model_init_params(m, 5);
    model_get_params(m, w);
    Rng r = rng_stream(5, 99, 0);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * rng_next_normal(&r));
    model_set_params(m, w);
    free(w);
}

// A model of the case in `mode` with the shared parameters and dropout seed; res gets its sizes.
static Model *start_run(Backend *be, const VariantCase *c, RecomputeMode mode, TaskType task, Config *cfg,
                        Result *res) {
    make_config(cfg, c, mode, task);
    Model *m = model_create(cfg, be, B_, T_);
    set_params(m);
    model_set_dropout_seed(m, 77);
    memset(res, 0, sizeof *res);
    res->n = model_param_count(m);
    res->arena = model_arena_bytes(m);
    note_atomic_ranges(m, res);
    return m;
}

// Gradients into res, then the model and its config are freed.
static void finish_run(Model *m, Config *cfg, Result *res) {
    res->grads = mhe_malloc(res->n * sizeof(float));
    model_get_grads(m, res->grads);
    model_free(m);
    config_free(cfg);
}

static Result run_pretrain(Backend *be, const VariantCase *c, RecomputeMode mode) {
    Config cfg;
    Result res;
    Model *m = start_run(be, c, mode, TASK_NONE, &cfg, &res);
    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_], labels[B_ * T_];
    const int bert = c->arch == ARCH_BERT;
    inputs(&cfg, 3, ids, types, mask, labels);
    model_zero_grad(m);
    res.loss[0] = model_forward(m, ids, bert ? types : NULL, bert ? mask : NULL, labels, B_, T_, 1);
    res.logits = mhe_malloc((size_t)B_ * T_ * cfg.model.vocab_size * sizeof(float));
    model_download_logits(m, res.logits);
    model_backward(m, 2.0 * model_label_count(m));
    // An evaluation forward between two accumulated micro-batches must not disturb them.
    res.loss[1] = model_forward(m, ids, bert ? types : NULL, bert ? mask : NULL, labels, B_, T_, 0);
    inputs(&cfg, 4, ids, types, mask, labels);
    model_set_full_logits(m, 0);
    res.loss[2] = model_forward(m, ids, bert ? types : NULL, bert ? mask : NULL, labels, B_, T_, 1);
    model_backward(m, 2.0 * model_label_count(m));
    finish_run(m, &cfg, &res);
    return res;
}

static Result run_task(Backend *be, const VariantCase *c, RecomputeMode mode, TaskType task) {
    Config cfg;
    Result res;
    Model *m = start_run(be, c, mode, task, &cfg, &res);
    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_], labels[B_ * T_];
    inputs(&cfg, 5, ids, types, mask, labels);
    int32_t label[B_] = {2, 0}, start[B_] = {1, 2}, end[B_] = {3, 2}, last[B_] = {T_ - 1, T_ - 3};
    float target[B_] = {0.5f, -1.25f};
    TaskBatch tb = {.B = B_, .T = T_, .ids = ids, .attn_mask = mask, .label = label, .target = target,
                    .start = start, .end = end};
    if (c->arch == ARCH_BERT) tb.type_ids = types;
    else tb.last = last;
    model_zero_grad(m);
    res.loss[0] = model_forward_task(m, &tb, 1);
    const size_t no = task == TASK_SPAN ? (size_t)B_ * T_ * 2 : task == TASK_REGRESSION ? B_ : (size_t)B_ * 3;
    res.logits = mhe_malloc(no * sizeof(float));
    model_download_task_outputs(m, res.logits);
    model_backward_task(m, 0);
    finish_run(m, &cfg, &res);
    return res;
}

static void free_result(Result *r) {
    free(r->logits);
    free(r->grads);
}

// Bit-for-bit equality of a mode's result with `none`'s; returns the failures.
static int same(const char *what, const Result *a, const Result *none, size_t n_logits) {
    int bad = 0;
    if (memcmp(a->loss, none->loss, sizeof a->loss) != 0) {
        printf("  %s: losses %.9g %.9g %.9g vs none %.9g %.9g %.9g\n", what, (double)a->loss[0], (double)a->loss[1],
               (double)a->loss[2], (double)none->loss[0], (double)none->loss[1], (double)none->loss[2]);
        bad++;
    }
    if (memcmp(a->logits, none->logits, n_logits * sizeof(float)) != 0) {
        printf("  %s: logits differ\n", what);
        bad++;
    }
    for (int t = 0; t < 2; t++) {
        const size_t lo = none->atomic_lo[t], n = none->atomic_hi[t] - lo;
        const double err = n ? rel_max(a->grads + lo, none->grads + lo, n) : 0;
        if (err > 1e-5) {
            printf("  %s: atomically summed embedding gradient %d: %.3g relative\n", what, t, err);
            bad++;
        }
    }
    for (size_t i = 0; i < a->n; i++)
        if (!in_atomic_range(none, i) && memcmp(&a->grads[i], &none->grads[i], sizeof(float)) != 0) {
            printf("  %s: gradient %zu: %.9g vs none %.9g\n", what, i, (double)a->grads[i], (double)none->grads[i]);
            bad++;
            break;
        }
    return bad;
}

// The cases: every registered type (both paths) on the CPU in fp32.  Elsewhere, where each case
// costs more, every registered type once too: mha on both arches, mhe_mul's fast path on bert
// and its plain path on gpt, each other type on one arch (bert and gpt alternating in registry
// order) and on its fast path, so a new type is checked without a line here.
static int want_case(const VariantCase *c) {
    if (strcmp(BACKEND, "cpu") == 0) return 1;
    if (c->type == ATTN_MHA) return 1;
    if (c->type == ATTN_MHE_MUL) return c->fast == (c->arch == ARCH_BERT);
    int other = 0;  // index of c->type among the types that get one arch
    for (int t = 0; t < (int)c->type; t++) other += t != ATTN_MHA && t != ATTN_MHE_MUL;
    return c->fast && c->arch == (other % 2 ? ARCH_GPT : ARCH_BERT);
}

static void test_pretraining_bit_identical(void **state) {
    (void)state;
    Backend *be = make_backend();
    VariantCase cases[MAX_VARIANT_CASES];
    const int count = variant_cases(cases);
    int bad = 0, ran = 0;
    for (int k = 0; k < 2 * count; k++) {
        const int i = k % count;
        WIDE = k >= count;
        if (!want_case(&cases[i]) || (WIDE && cases[i].type != ATTN_MHA)) continue;
        Result r[3];
        for (int mode = 0; mode < 3; mode++) r[mode] = run_pretrain(be, &cases[i], (RecomputeMode)mode);
        const size_t n_logits = (size_t)B_ * T_ * TINY_SHAPE.vocab_size;  // every shape keeps V
        for (int mode = 1; mode < 3; mode++) {
            char what[256];
            snprintf(what, sizeof what, "%.32s %.64s%s %s", BACKEND, cases[i].name, WIDE ? " d16" : "", MODES[mode]);
            bad += same(what, &r[mode], &r[0], n_logits);
        }
        // Each mode shares more: the arena shrinks strictly.
        if (!(r[0].arena > r[1].arena && r[1].arena > r[2].arena)) {
            printf("  %s %s: arena bytes none %zu attention %zu layer %zu\n", BACKEND, cases[i].name, r[0].arena,
                   r[1].arena, r[2].arena);
            bad++;
        }
        for (int mode = 0; mode < 3; mode++) free_result(&r[mode]);
        ran++;
    }
    WIDE = 0;
    printf("%s: %d cases x {attention, layer} equal none bit for bit%s\n", BACKEND, ran,
           strncmp(BACKEND, "cuda", 4) == 0 ? " (atomic embedding sums within 1e-5)" : "");
    be->destroy(be);
    assert_int_equal(bad, 0);
}

static void test_task_heads_bit_identical(void **state) {
    (void)state;
    Backend *be = make_backend();
    const VariantCase cases[2] = {{"bert_mha", ARCH_BERT, ATTN_MHA, 1}, {"gpt_mhe_mul", ARCH_GPT, ATTN_MHE_MUL, 1}};
    const TaskType tasks[3] = {TASK_CLASSIFICATION, TASK_REGRESSION, TASK_SPAN};
    int bad = 0;
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 3; t++) {
            Result r[3];
            for (int mode = 0; mode < 3; mode++) r[mode] = run_task(be, &cases[i], (RecomputeMode)mode, tasks[t]);
            const size_t no = tasks[t] == TASK_SPAN ? (size_t)B_ * T_ * 2 : tasks[t] == TASK_REGRESSION ? B_ : (size_t)B_ * 3;
            for (int mode = 1; mode < 3; mode++) {
                char what[256];
                snprintf(what, sizeof what, "%.32s %.64s task %d %s", BACKEND, cases[i].name, (int)tasks[t], MODES[mode]);
                r[mode].loss[1] = r[0].loss[1], r[mode].loss[2] = r[0].loss[2];  // one forward only
                bad += same(what, &r[mode], &r[0], no);
            }
            for (int mode = 0; mode < 3; mode++) free_result(&r[mode]);
        }
    be->destroy(be);
    assert_int_equal(bad, 0);
}

// Bytes the arena's bump allocator takes for n bytes (64-byte slices, model.c arena_take).
static size_t slice(size_t bytes) { return (bytes + 63) / 64 * 64; }

// mha, worked out from the layer layout (model_internal.h LayerActs): the attention block is
// q, k, v and ctx [N, n·d] each, the core's saved tensors and, pre-LN, LN1's output a_in [N, D];
// the rest of a layer is r1 [N, D], post-LN h and r2 / pre-LN f_in [N, D], u and g [N, F] and
// the two LayerNorms' mean and rstd [N].  `attention` saves (L−1) attention blocks, `layer`
// (L−1) whole layers.
static void test_arena_shrinks_by_the_shared_buffers(void **state) {
    (void)state;
    Backend *be = make_backend();
    for (int a = 0; a < 2; a++) {
        const VariantCase c = {"mha", a ? ARCH_GPT : ARCH_BERT, ATTN_MHA, 1};
        size_t arena[3];
        for (int mode = 0; mode < 3; mode++) {
            Config cfg;
            make_config(&cfg, &c, (RecomputeMode)mode, TASK_NONE);
            Model *m = model_create(&cfg, be, B_, T_);
            arena[mode] = model_arena_bytes(m);
            model_free(m);
            config_free(&cfg);
        }
        Config cfg;
        make_config(&cfg, &c, RECOMPUTE_NONE, TASK_NONE);
        const size_t N = (size_t)B_ * T_, D = (size_t)cfg.model.hidden, F = (size_t)cfg.model.ffn;
        const size_t nd = (size_t)cfg.model.heads * cfg.model.head_dim;
        const int pre = cfg.model.norm == NORM_PRE;
        AttnShape s;
        memset(&s, 0, sizeof s);
        s.B = B_;
        s.T = T_;
        s.n_heads = s.q_heads = s.k_heads = s.v_heads = cfg.model.heads;
        s.qk_dim = s.v_dim = cfg.model.head_dim;
        s.ldq = s.ldk = s.ldv = (int)nd;
        size_t saved = 0, scratch = 0;
        be->attention_sizes(be, &s, &saved, &scratch);
        // Activations take the backend's element size (Backend.act), statistics and the core's
        // saved tensors fp32.
        const size_t A = dtype_size(be->act), F4 = sizeof(float);
        const size_t attn = (pre ? slice(N * D * A) : 0) + 4 * slice(N * nd * A) + slice(saved * F4);
        const size_t rest = 4 * slice(N * F4) + 2 * slice(N * D * A) + (pre ? 0 : slice(N * D * A)) + 2 * slice(N * F * A);
        const size_t want_attn = (L_ - 1) * attn, want_layer = (L_ - 1) * (attn + rest);
        printf("%s %s: arena none %zu, attention %zu (-%zu, want -%zu), layer %zu (-%zu, want -%zu) bytes\n", BACKEND,
               a ? "gpt" : "bert", arena[0], arena[1], arena[0] - arena[1], want_attn, arena[2], arena[0] - arena[2],
               want_layer);
        assert_true(arena[0] - arena[1] == want_attn);
        assert_true(arena[0] - arena[2] == want_layer);
        config_free(&cfg);
    }
    be->destroy(be);
}

int main(int argc, char **argv) {
    if (argc > 1) BACKEND = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_shrinks_by_the_shared_buffers),
        cmocka_unit_test(test_pretraining_bit_identical),
        cmocka_unit_test(test_task_heads_bit_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
