// The whole model through the CUDA backend (emulated, kernels/cuda/emu) against the same model
// on the CPU backend: forward and backward of every arch x attention type with dropout on, and
// 20-step AdamW training runs in fp32 and bf16.
// Tolerances: loss relative 1e-4; logits and every parameter gradient norm-wise relative
// ‖cuda − cpu‖/‖cpu‖ <= 1e-4 (a gradient whose CPU norm is below 1e-6, e.g. mhe_add's e^K, must
// be below 1e-6 in absolute norm); training losses per step within 1e-4 (fp32) or 2% (bf16).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/model/model.h"

#define B_ 2
#define T_ 7
#define V_ 17

typedef struct {
    const char *name;
    Arch arch;
    AttentionType type;
    int groups;
    int fast;
    int head_dim;  // 0: D / n (TINY_SHAPE)
} Case;

// Every registered attention type, both arches, both paths where the fast path differs
// (tests/common: variant_cases).
static Case CASES[MAX_VARIANT_CASES];
static int N_CASES;

static void make_cases(void) {
    static VariantCase v[MAX_VARIANT_CASES];
    N_CASES = variant_cases(v);
    for (int i = 0; i < N_CASES; i++) CASES[i] = (Case){v[i].name, v[i].arch, v[i].type, 0, v[i].fast, 0};
}

static const Case *find_case(const char *name) {
    for (int i = 0; i < N_CASES; i++)
        if (strcmp(CASES[i].name, name) == 0) return &CASES[i];
    fail_msg("no case %s", name);
    return NULL;
}

// The CUDA side's runtime.attention_core (NULL: auto) and the attention dropout: only the own
// cores draw the CPU backend's dropout stream (cuDNN draws its Philox one, DESIGN.md §1).
static const char *g_core;
static float g_attn_dropout = 0.1f;

static void make_config(const Case *c, Config *cfg) {
    TinyShape shape = TINY_SHAPE;
    shape.head_dim = c->head_dim;
    tiny_config(cfg, c->arch, c->type, shape);
    cfg->model.dropout = 0.1f;
    cfg->model.attn_dropout = g_attn_dropout;
    if (c->groups) cfg->attention.groups = c->groups;
    cfg->attention.embed_std = 0.3f;
    cfg->attention.fast_path = c->fast;
    config_resolve(cfg, "test_cuda_model");
}

typedef struct {
    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_], labels[B_ * T_];
} Inputs;

// Random ids, the second sequence padded over its last two positions (bert), labels on about
// half the real positions (bert) or the next token (gpt).
static void make_inputs(Arch arch, uint64_t seed, Inputs *in) {
    Rng r = rng_stream(seed, 1, 2);
    for (int i = 0; i < B_ * T_; i++) {
        in->ids[i] = (int32_t)(rng_next(&r) % V_);
        in->types[i] = (int32_t)(rng_next(&r) % 2);
        in->mask[i] = !(arch == ARCH_BERT && i / T_ == 1 && i % T_ >= T_ - 2);
    }
    for (int i = 0; i < B_ * T_; i++) {
        int t = i % T_;
        if (arch == ARCH_GPT)
            in->labels[i] = t + 1 < T_ ? in->ids[i + 1] : -100;
        else
            in->labels[i] = in->mask[i] && (rng_next(&r) % 2 == 0 || t == 0) ? (int32_t)(rng_next(&r) % V_) : -100;
    }
}

typedef struct {
    Backend *be;
    Model *m;
} Side;

// The same randomised parameters on both sides (param_init plus noise everywhere).
static void make_pair(const Case *c, Side s[2], int bf16) {
    Config cfg;
    make_config(c, &cfg);
    s[0].be = backend_cpu_create(2);
    s[1].be = backend_cuda_create(0, bf16);
    char why[512];
    if (g_core && !backend_attention_core_select(s[1].be, g_core, 0, why, sizeof why)) fail_msg("%s", why);
    for (int i = 0; i < 2; i++) {
        s[i].m = model_create(&cfg, s[i].be, B_, T_);
        model_set_dropout_seed(s[i].m, 77);
    }
    size_t n = model_param_count(s[0].m);
    float *w = mhe_malloc(n * sizeof *w);
    model_init_params(s[0].m, 5);
    model_get_params(s[0].m, w);
    Rng r = rng_stream(5, 99, 0);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * rng_next_normal(&r));
    model_set_params(s[0].m, w);
    model_set_params(s[1].m, w);
    free(w);
    config_free(&cfg);
}

static void free_pair(Side s[2]) {
    for (int i = 0; i < 2; i++) {
        model_free(s[i].m);
        s[i].be->destroy(s[i].be);
    }
}

// Returns the number of failed comparisons of one case.
static int run_case(const Case *c) {
    Side s[2];
    make_pair(c, s, 0);
    Inputs in;
    make_inputs(c->arch, 11, &in);
    float loss[2], *logits[2], *grads[2], *acc[2];
    size_t n = model_param_count(s[0].m), nl = (size_t)B_ * T_ * V_;
    for (int i = 0; i < 2; i++) {
        loss[i] = model_forward(s[i].m, in.ids, c->arch == ARCH_BERT ? in.types : NULL, in.mask,
                                in.labels, B_, T_, 1);
        logits[i] = mhe_malloc(nl * sizeof(float));
        model_download_logits(s[i].m, logits[i]);
        model_zero_grad(s[i].m);
        model_backward(s[i].m, 0);
        grads[i] = mhe_malloc(n * sizeof(float));
        model_get_grads(s[i].m, grads[i]);
        // A second micro-batch adds to the first: its linear layers must not store (the model's
        // dW_zero promise ends with the first backward; the emulation checks it).
        model_forward(s[i].m, in.ids, c->arch == ARCH_BERT ? in.types : NULL, in.mask, in.labels, B_, T_, 1);
        model_backward(s[i].m, 0);
        acc[i] = mhe_malloc(n * sizeof(float));
        model_get_grads(s[i].m, acc[i]);
    }
    int bad = 0;
    double e = fabs(loss[1] - loss[0]) / fabs(loss[0]), worst = 0;
    if (!(e <= 1e-4)) {
        print_error("%s: loss cpu %.7f cuda %.7f\n", c->name, loss[0], loss[1]);
        bad++;
    }
    double le = rel_l2(logits[1], logits[0], nl);
    if (!(le <= 1e-4)) {
        print_error("%s: logits rel err %.3g\n", c->name, le);
        bad++;
    }
    const ParamTable *t = model_param_table(s[0].m);
    for (int k = 0; k < 2; k++) {
        float **g = k ? acc : grads;
        for (int i = 0; i < t->count; i++) {
            const ParamTensor *p = &t->tensors[i];
            int is_abs;
            double err = rel_l2_or_abs(g[1] + p->offset, g[0] + p->offset, p->numel, &is_abs);
            if (!(err <= (is_abs ? 1e-6 : 1e-4))) {
                print_error("%s: grad %s%s %s err %.3g\n", c->name, p->name, k ? " (two micro-batches)" : "",
                            is_abs ? "abs" : "rel", err);
                bad++;
            }
            if (!is_abs && err > worst) worst = err;
        }
    }
    print_message("%-20s loss %.6f  loss err %.1e  logits err %.1e  worst grad err %.1e%s\n", c->name,
                  loss[0], e, le, worst, bad ? "  FAIL" : "");
    for (int i = 0; i < 2; i++) {
        free(logits[i]);
        free(grads[i]);
        free(acc[i]);
    }
    free_pair(s);
    return bad;
}

static void test_forward_backward_match_cpu_for_every_variant(void **state) {
    (void)state;
    int bad = 0;
    for (int i = 0; i < N_CASES; i++) bad += run_case(&CASES[i]);
    assert_int_equal(bad, 0);
}

// 20 AdamW steps on one fixed batch (so the loss must fall), the update done by each backend's
// adamw_update.
static void train(const Case *c, int bf16, float losses[2][20]) {
    Side s[2];
    make_pair(c, s, bf16);
    size_t n = model_param_count(s[0].m);
    float *mom[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) mom[i][j] = s[i].be->alloc(s[i].be, n * sizeof(float));
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.999f;
    Inputs in;
    make_inputs(c->arch, 100, &in);
    for (int step = 1; step <= 20; step++) {
        float bc1 = 1.0f - powf(b1, (float)step), bc2 = 1.0f - powf(b2, (float)step);
        for (int i = 0; i < 2; i++) {
            model_zero_grad(s[i].m);
            losses[i][step - 1] = model_forward(s[i].m, in.ids, c->arch == ARCH_BERT ? in.types : NULL,
                                                in.mask, in.labels, B_, T_, 1);
            model_backward(s[i].m, 0);
            s[i].be->adamw_update(s[i].be, model_params(s[i].m), model_grads(s[i].m), mom[i][0],
                                  mom[i][1], n, b1, b2, 1e-8f, lr / bc1, 1.0f - lr * 0.01f, sqrtf(bc2), 1.0f);
        }
    }
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) s[i].be->free(s[i].be, mom[i][j]);
    free_pair(s);
}

static void check_training(const Case *c, int bf16, double tol) {
    float losses[2][20];
    train(c, bf16, losses);
    double worst = 0;
    for (int k = 0; k < 20; k++) {
        double e = fabs(losses[1][k] - losses[0][k]) / fabs(losses[0][k]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    print_message("%s %s: loss %.4f -> %.4f (cpu), %.4f -> %.4f (cuda), worst step rel diff %.2e\n",
                  c->name, bf16 ? "bf16" : "fp32", losses[0][0], losses[0][19], losses[1][0],
                  losses[1][19], worst);
    // The run must learn, or tracking would prove little.
    assert_true(losses[0][19] < losses[0][0]);
    assert_true(worst <= tol);
}

static void test_training_tracks_cpu_fp32(void **state) {
    (void)state;
    check_training(find_case("gpt_mha"), 0, 1e-4);
}

static void test_training_tracks_cpu_bf16(void **state) {
    (void)state;
    g_core = "flash";  // the own core, with the CPU's dropout stream (auto takes cuDNN on a GPU)
    check_training(find_case("bert_mhe_add_fast"), 1, 0.02);
    g_core = NULL;
}

// The launches of one bf16 training step (the fourth, as bench measures it) of case c on CUDA,
// with the backend's attention_q_scale or without it.
static CostReport recorded_step(const Case *c, int q_scale) {
    Side s[2];
    make_pair(c, s, 1);
    Backend *be = s[1].be;
    if (!q_scale) be->attention_q_scale = NULL;
    const size_t n = model_param_count(s[1].m);
    float *m1 = be->alloc(be, n * sizeof(float)), *m2 = be->alloc(be, n * sizeof(float));
    Inputs in;
    make_inputs(c->arch, 100, &in);
    CostReport r;
    for (int step = 1; step <= 4; step++) {
        if (step == 4) backend_cuda_cost_start();
        model_zero_grad(s[1].m);
        model_forward(s[1].m, in.ids, NULL, in.mask, in.labels, B_, T_, 1);
        model_backward(s[1].m, 0);
        be->adamw_update(be, model_params(s[1].m), model_grads(s[1].m), m1, m2, n, 0.9f, 0.999f, 1e-8f, 1e-3f,
                         1.0f, 1.0f, 1.0f);
        if (step == 4) backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    }
    be->free(be, m1);
    be->free(be, m2);
    free_pair(s);
    return r;
}

// mhe_mul's fast path at d = 16 in bf16: the tensor-core core scales the shared Q per head itself
// (AttnShape.q_scale), so a step has one launch fewer per layer (head_expand) than with the
// backend's attention_q_scale taken away, and 20 steps stay within 2% of the CPU, which
// materialises the per-head queries.
static void test_training_q_scale_tracks_cpu_bf16(void **state) {
    (void)state;
    Case c = *find_case("gpt_mhe_mul_fast");
    c.head_dim = 16;
    g_core = "flash";  // the tensor-core core, on a GPU too (auto would take cuDNN there)
    check_training(&c, 1, 0.02);
    const CostReport with = recorded_step(&c, 1), without = recorded_step(&c, 0);
    g_core = NULL;
    print_message("q_scale: %ld launches, without: %ld\n", with.launches, without.launches);
    const long layers = TINY_SHAPE.layers;
    assert_int_equal(without.launches - with.launches, layers);
    assert_int_equal(without.class_calls[OPC_NORM_ACT] - with.class_calls[OPC_NORM_ACT], layers);
}

// The cuDNN core in training, attention dropout off: 20 bf16 steps of mhe_mul's fast path (the
// shared Q scaled per head, causal), BERT mha (key padding) and mhe_add's fast path (its key bias
// as per-head queries) stay within 2% of the CPU.  Runs
// where cuDNN can (tests/gpu/check.sh's gpu_model, which sets MHE_REQUIRE_CUDNN where it found
// libcudnn); the emulation has none.
static void test_training_cudnn_tracks_cpu_bf16(void **state) {
    (void)state;
    Backend *probe = backend_cuda_create(0, 1);
    char why[512];
    const int can = backend_attention_core_select(probe, "cudnn", 0, why, sizeof why);
    probe->destroy(probe);
    if (!can) {
        const char *req = getenv("MHE_REQUIRE_CUDNN");
        if (req && strcmp(req, "1") == 0) fail_msg("cuDNN core required (MHE_REQUIRE_CUDNN=1): %s", why);
        print_message("cuDNN core not run here: %s\n", why);
        return;
    }
    g_core = "cudnn";
    g_attn_dropout = 0.0f;
    // mhe_add's fast path runs its key bias as per-head queries there (AttnPlan.key_bias_as_q)
    const char *names[] = {"gpt_mhe_mul_fast", "bert_mha", "bert_mhe_add_fast"};
    for (int i = 0; i < 3; i++) {
        Case c = *find_case(names[i]);
        c.head_dim = 16;
        check_training(&c, 1, 0.02);
    }
    g_core = NULL;
    g_attn_dropout = 0.1f;
}

// The gemm_bf16 core in training, attention dropout on (its dropout is the CPU's hash): 20 bf16
// steps of collab (its content bias: the core's key bias and its gradient), causal GPT mha and
// mhe_add's fast path (the key bias kept: the named core serves it) stay within 2% of the CPU.
static void test_training_gemm_bf16_tracks_cpu_bf16(void **state) {
    (void)state;
    g_core = "gemm_bf16";
    const char *names[] = {"bert_collab", "gpt_mha", "bert_mhe_add_fast"};
    for (int i = 0; i < 3; i++) check_training(find_case(names[i]), 1, 0.02);
    g_core = NULL;
}

// `test_cuda_model variants` or `test_cuda_model training`: two ctest entries that can run in
// parallel (each emulated step is slow).
int main(int argc, char **argv) {
    const struct CMUnitTest variants[] = {
        cmocka_unit_test(test_forward_backward_match_cpu_for_every_variant),
    };
    const struct CMUnitTest training[] = {
        cmocka_unit_test(test_training_tracks_cpu_fp32),
        cmocka_unit_test(test_training_tracks_cpu_bf16),
        cmocka_unit_test(test_training_q_scale_tracks_cpu_bf16),
        cmocka_unit_test(test_training_cudnn_tracks_cpu_bf16),
        cmocka_unit_test(test_training_gemm_bf16_tracks_cpu_bf16),
    };
    const char *which = argc > 1 ? argv[1] : "all";
    int failed = 0;
    make_cases();
    if (strcmp(which, "training") != 0)
        failed += cmocka_run_group_tests_name("cuda model parity", variants, NULL, NULL);
    if (strcmp(which, "variants") != 0)
        failed += cmocka_run_group_tests_name("cuda training parity", training, NULL, NULL);
    return failed ? 1 : 0;
}
