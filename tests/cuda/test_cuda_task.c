// The fine-tuning heads (trainer/model/task_head.c) through the CUDA backend (emulated) against
// the same model on the CPU backend, training on (hidden, attention and classifier dropout at
// 0.1): every registered attention type x classification / regression / span, the arch
// alternating (bert / gpt) over the type's three tasks, so each type runs on both arches.
// Tolerances as test_cuda_model: loss relative 1e-4; outputs and every parameter gradient
// norm-wise relative ‖cuda − cpu‖/‖cpu‖ <= 1e-4 (absolute 1e-6 when the CPU norm is below 1e-6).
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
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/model/model.h"

#define B_ 3
#define T_ 7
#define C_ 3

static int run_case(Arch arch, AttentionType type, TaskType task) {
    Config cfg;
    tiny_config(&cfg, arch, type, TINY_SHAPE);
    cfg.model.dropout = 0.1f;
    cfg.model.attn_dropout = 0.1f;
    cfg.attention.embed_std = 0.3f;
    config_resolve(&cfg, "test_cuda_task");
    cfg.task.type = task;
    cfg.task.num_labels = task == TASK_CLASSIFICATION ? C_ : task == TASK_REGRESSION ? 1 : 0;
    cfg.task.classifier_dropout = 0.1f;
    Backend *be[2] = {backend_cpu_create(2), backend_cuda_create(0, 0)};
    Model *m[2];
    for (int i = 0; i < 2; i++) {
        m[i] = model_create(&cfg, be[i], B_, T_);
        model_set_dropout_seed(m[i], 77);
    }
    const size_t n = model_param_count(m[0]);
    float *w = mhe_malloc(n * sizeof *w);
    model_init_params(m[0], 5);
    model_get_params(m[0], w);
    Rng r = rng_stream(5, 99, 0);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * rng_next_normal(&r));
    for (int i = 0; i < 2; i++) model_set_params(m[i], w);

    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_], label[B_], start[B_], end[B_], last[B_];
    float target[B_];
    for (int i = 0; i < B_ * T_; i++) {
        ids[i] = (int32_t)(rng_next(&r) % (uint64_t)cfg.model.vocab_size);
        types[i] = i % T_ >= 3;
        mask[i] = !(i / T_ == 1 && i % T_ >= T_ - 2);
    }
    for (int b = 0; b < B_; b++) {
        label[b] = b % C_;
        target[b] = (float)rng_next_normal(&r);
        last[b] = b == 1 ? T_ - 3 : T_ - 1;
        start[b] = b;
        end[b] = b + 1;
    }
    TaskBatch tb = {.B = B_, .T = T_, .ids = ids, .attn_mask = mask, .label = label, .target = target,
                    .start = start, .end = end};
    if (arch == ARCH_BERT) tb.type_ids = types;
    else tb.last = last;
    const size_t no = task == TASK_SPAN ? (size_t)B_ * T_ * 2 : task == TASK_REGRESSION ? B_ : (size_t)B_ * C_;
    float loss[2], *out[2], *g[2];
    for (int i = 0; i < 2; i++) {
        loss[i] = model_forward_task(m[i], &tb, 1);
        out[i] = mhe_malloc(no * sizeof(float));
        model_download_task_outputs(m[i], out[i]);
        model_zero_grad(m[i]);
        model_backward_task(m[i], 0);
        g[i] = mhe_malloc(n * sizeof(float));
        model_get_grads(m[i], g[i]);
    }
    static const char *names[] = {"none", "classification", "regression", "span"};
    char name[96];
    snprintf(name, sizeof name, "%s_%s_%s", arch_name(arch), attention_type_name(type), names[task]);
    int bad = 0;
    double le = fabs(loss[1] - loss[0]) / fabs(loss[0]), oe = rel_l2(out[1], out[0], no), worst = 0;
    if (!(le <= 1e-4) || !(oe <= 1e-4)) {
        print_error("%s: loss cpu %.7f cuda %.7f, outputs rel err %.3g\n", name, loss[0], loss[1], oe);
        bad++;
    }
    const ParamTable *t = model_param_table(m[0]);
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        int is_abs;
        double e = rel_l2_or_abs(g[1] + p->offset, g[0] + p->offset, p->numel, &is_abs);
        if (!(e <= (is_abs ? 1e-6 : 1e-4))) {
            print_error("%s: grad %s %s err %.3g\n", name, p->name, is_abs ? "abs" : "rel", e);
            bad++;
        }
        if (!is_abs && e > worst) worst = e;
    }
    print_message("%-32s loss %.6f  loss err %.1e  outputs err %.1e  worst grad err %.1e%s\n", name, loss[0], le,
                  oe, worst, bad ? "  FAIL" : "");
    for (int i = 0; i < 2; i++) {
        free(out[i]);
        free(g[i]);
        model_free(m[i]);
        be[i]->destroy(be[i]);
    }
    free(w);
    config_free(&cfg);
    return bad;
}

static void test_task_heads_match_cpu(void **state) {
    (void)state;
    int bad = 0;
    for (int t = 0; t < ATTN_TYPE_COUNT; t++)
        for (int task = TASK_CLASSIFICATION; task <= TASK_SPAN; task++)
            bad += run_case((t + task) % 2 ? ARCH_GPT : ARCH_BERT, (AttentionType)t, (TaskType)task);
    assert_int_equal(bad, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_task_heads_match_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
