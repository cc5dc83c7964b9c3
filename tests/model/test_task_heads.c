// The fine-tuning heads (trainer/model/task_head.c) against the PyTorch oracle
// tests/reference/ref_task.py (ref_model.py's encoder + the heads written from the contract):
// every registered attention type x {bert, gpt} x {classification, regression, span}.
//
// Tolerances as the model tests (tests/model/test_model.c): loss and outputs ≤ 1e-5 relative,
// every parameter gradient ≤ 1e-4 relative (‖ours − ref‖/‖ref‖ per tensor), a gradient whose
// reference is ~0 (norm < 1e-6) ≤ 1e-6 in absolute norm.
// Plus the gradient semantics of model.h: the divisor scales, calls accumulate.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/io/safetensors.h"
#include "trainer/model/model.h"

#define B_ 3
#define T_ 7
#define LABELS_ 3

static const char *TASK_NAMES[] = {"none", "classification", "regression", "span"};

typedef struct {
    char name[128];
    Arch arch;
    AttentionType type;
    int fast;
    TaskType task;
} Case;

typedef struct {
    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_];
    int32_t label[B_], start[B_], end[B_], last[B_];
    float target[B_];
} Inputs;

typedef struct {
    float loss;
    float *out;
    float *grads;
    size_t n_out;
    ParamTable table;
    char dir[2048];
} Result;

static const char *out_dir(void) {
    const char *b = getenv("MHE_BINARY_DIR");
    return b ? b : ".";
}

static void make_config(const Case *c, Config *cfg) {
    tiny_config(cfg, c->arch, c->type, TINY_SHAPE);
    cfg->attention.embed_std = 0.3f;
    cfg->attention.fast_path = c->fast;
    config_resolve(cfg, "test_task_heads");
    cfg->task.type = c->task;
    cfg->task.num_labels = c->task == TASK_CLASSIFICATION ? LABELS_ : c->task == TASK_REGRESSION ? 1 : 0;
    cfg->task.classifier_dropout = -1;
}

// Row 1 is padded over its last two positions, row 2 over its last one; span answers lie on
// real tokens, row 0 has "no answer" (0, 0).
static void make_inputs(int V, Inputs *in) {
    Rng r = rng_stream(11, 3, 4);
    const int real[B_] = {T_, T_ - 2, T_ - 1};
    for (int i = 0; i < B_ * T_; i++) {
        int b = i / T_, t = i % T_;
        in->ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        in->types[i] = t >= 3;
        in->mask[i] = t < real[b];
    }
    for (int b = 0; b < B_; b++) {
        in->label[b] = (b + 1) % LABELS_;
        in->target[b] = (float)rng_next_normal(&r);
        in->last[b] = real[b] - 1;
        int s = 1 + (int)(rng_next(&r) % (uint64_t)(real[b] - 2));
        in->start[b] = b == 0 ? 0 : s;
        in->end[b] = b == 0 ? 0 : s + (int)(rng_next(&r) % (uint64_t)(real[b] - s));
    }
}

static TaskBatch batch_of(const Case *c, const Inputs *in) {
    TaskBatch b = {.B = B_, .T = T_, .ids = in->ids, .attn_mask = in->mask};
    if (c->arch == ARCH_BERT) b.type_ids = in->types;
    else b.last = in->last;
    if (c->task == TASK_CLASSIFICATION) b.label = in->label;
    if (c->task == TASK_REGRESSION) b.target = in->target;
    if (c->task == TASK_SPAN) {
        b.start = in->start;
        b.end = in->end;
    }
    return b;
}

// param_init plus noise everywhere (biases and LayerNorm too), so no term hides behind a zero.
static void randomise(Model *m, uint64_t seed) {
    size_t n = model_param_count(m);
    float *w = mhe_malloc(n * sizeof *w);
    model_init_params(m, seed);
    model_get_params(m, w);
    Rng r = rng_stream(seed, 99, 0);
    for (size_t i = 0; i < n; i++) w[i] += (float)(0.1 * rng_next_normal(&r));
    model_set_params(m, w);
    free(w);
}

static size_t outputs_of(const Case *c) {
    return c->task == TASK_SPAN ? (size_t)B_ * T_ * 2 : c->task == TASK_REGRESSION ? B_ : (size_t)B_ * LABELS_;
}

static void write_files(const Case *c, const Config *cfg, const Model *m, const Inputs *in, const char *dir) {
    char path[2200];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const ModelConfig *mc = &cfg->model;
    fprintf(f,
            "{\"arch\": \"%s\", \"layers\": %d, \"hidden\": %d, \"heads\": %d, \"head_dim\": %d, \"ffn\": %d, "
            "\"vocab_size\": %d, \"max_seq\": %d, \"type_vocab\": %d, \"ln_eps\": %.9g, \"task\": \"%s\", "
            "\"num_labels\": %d, ",
            arch_name(mc->arch), mc->layers, mc->hidden, mc->heads, mc->head_dim, mc->ffn, mc->vocab_size, mc->max_seq,
            mc->arch == ARCH_BERT ? mc->type_vocab : 2, (double)mc->ln_eps, TASK_NAMES[c->task], cfg->task.num_labels);
    oracle_attention_json(f, cfg);
    fputs("}\n", f);
    fclose(f);

    const ParamTable *t = model_param_table(m);
    float *w = mhe_malloc(t->total * sizeof(float));
    model_get_params(m, w);
    StFile st;
    st_init(&st);
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        st_add(&st, p->name, ST_F32, p->ndim, shape, w + p->offset);
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    assert_int_equal(st_write(&st, path), 0);
    st_free(&st);
    free(w);

    st_init(&st);
    int64_t bt[2] = {B_, T_}, b1[1] = {B_};
    st_add(&st, "input_ids", ST_I32, 2, bt, in->ids);
    st_add(&st, "attention_mask", ST_I32, 2, bt, in->mask);
    if (c->arch == ARCH_BERT) st_add(&st, "token_type_ids", ST_I32, 2, bt, in->types);
    else st_add(&st, "last", ST_I32, 1, b1, in->last);
    st_add(&st, "label", ST_I32, 1, b1, in->label);
    st_add(&st, "target", ST_F32, 1, b1, in->target);
    st_add(&st, "start", ST_I32, 1, b1, in->start);
    st_add(&st, "end", ST_I32, 1, b1, in->end);
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    assert_int_equal(st_write(&st, path), 0);
    st_free(&st);
}

// Our forward/backward (training off) on a case; writes the oracle's files when dir is set.
static void run_case(Backend *be, const Case *c, Result *res, const char *dir, double divisor) {
    Config cfg;
    make_config(c, &cfg);
    Model *m = model_create(&cfg, be, B_, T_);
    randomise(m, 4321);
    Inputs in;
    make_inputs(cfg.model.vocab_size, &in);
    TaskBatch b = batch_of(c, &in);
    res->loss = model_forward_task(m, &b, 0);
    res->n_out = outputs_of(c);
    res->out = mhe_malloc(res->n_out * sizeof(float));
    model_download_task_outputs(m, res->out);
    model_zero_grad(m);
    model_backward_task(m, divisor);
    res->grads = mhe_malloc(model_param_count(m) * sizeof(float));
    model_get_grads(m, res->grads);
    param_table_build(&res->table, &cfg);
    if (dir) {
        snprintf(res->dir, sizeof res->dir, "%s", dir);
        write_files(c, &cfg, m, &in, dir);
    }
    model_free(m);
    config_free(&cfg);
}

static void result_free(Result *r) {
    free(r->out);
    free(r->grads);
    param_table_free(&r->table);
}

static double rel_err(const float *a, const StTensor *ref, size_t n, int *is_abs) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double r = ((const float *)ref->data)[i], d = a[i] - r;
        num += d * d;
        den += r * r;
    }
    *is_abs = sqrt(den) < 1e-6;
    return *is_abs ? sqrt(num) : sqrt(num / den);
}

static int compare(const Case *c, const Result *r, double *worst_out) {
    char path[2100];
    snprintf(path, sizeof path, "%s/out.safetensors", r->dir);
    StFile out;
    st_read(&out, path);
    int bad = 0, is_abs;
    const StTensor *loss = st_find(&out, "loss"), *logits = st_find(&out, "logits");
    assert_non_null(loss);
    assert_non_null(logits);
    assert_int_equal(logits->nbytes / sizeof(float), r->n_out);
    const double ref_loss = ((const float *)loss->data)[0];
    double e = fabs(r->loss - ref_loss) / fabs(ref_loss);
    if (e > 1e-5) {
        print_message("%s: loss %.8g vs oracle %.8g (rel %.3g)\n", c->name, r->loss, ref_loss, e);
        bad++;
    }
    double eo = rel_err(r->out, logits, r->n_out, &is_abs);
    if (eo > 1e-5) {
        print_message("%s: outputs rel err %.3g\n", c->name, eo);
        bad++;
    }
    double worst = 0;
    for (int i = 0; i < r->table.count; i++) {
        const ParamTensor *p = &r->table.tensors[i];
        char gname[PARAM_NAME_MAX + 8];
        snprintf(gname, sizeof gname, "grad.%s", p->name);
        const StTensor *g = st_find(&out, gname);
        if (!g || g->nbytes != p->numel * sizeof(float)) {
            print_message("%s: oracle has no %s of %zu values\n", c->name, gname, p->numel);
            bad++;
            continue;
        }
        e = rel_err(r->grads + p->offset, g, p->numel, &is_abs);
        if (e > (is_abs ? 1e-6 : 1e-4)) {
            print_message("%s: %s %s err %.3g\n", c->name, gname, is_abs ? "abs" : "rel", e);
            bad++;
        }
        if (!is_abs && e > worst) worst = e;
    }
    // Every oracle gradient must be one of ours: no parameter missing from the C table.
    int ours = r->table.count, theirs = 0;
    for (int i = 0; i < out.count; i++) theirs += strncmp(out.tensors[i].name, "grad.", 5) == 0;
    if (theirs != ours) {
        print_message("%s: oracle has %d parameters, the C table %d\n", c->name, theirs, ours);
        bad++;
    }
    print_message("%-40s loss %.6f  outputs err %.1e  worst grad rel err %.2e%s\n", c->name, r->loss, eo, worst,
                  bad ? "  FAIL" : "");
    if (worst > *worst_out) *worst_out = worst;
    st_free(&out);
    return bad;
}

static int all_cases(Case *cases) {
    static VariantCase v[MAX_VARIANT_CASES];
    const int nv = variant_cases(v);
    int k = 0;
    for (int i = 0; i < nv; i++)
        for (int task = TASK_CLASSIFICATION; task <= TASK_SPAN; task++) {
            Case *c = &cases[k++];
            snprintf(c->name, sizeof c->name, "%.64s_%s", v[i].name, TASK_NAMES[task]);
            c->arch = v[i].arch;
            c->type = v[i].type;
            c->fast = v[i].fast;
            c->task = (TaskType)task;
        }
    return k;
}

static void test_every_head_and_variant_matches_pytorch(void **state) {
    Backend *be = *state;
    static Case cases[3 * MAX_VARIANT_CASES];
    const int n = all_cases(cases);
    char jobs[1024], dir[2048];
    snprintf(jobs, sizeof jobs, "%s/tests/model/task_jobs.txt", out_dir());
    FILE *jf = fopen(jobs, "w");
    assert_non_null(jf);
    Result *res = mhe_calloc((size_t)n, sizeof *res);
    for (int i = 0; i < n; i++) {
        snprintf(dir, sizeof dir, "%.900s/tests/model/task_%.128s", out_dir(), cases[i].name);
        run_case(be, &cases[i], &res[i], dir, 0);
        fprintf(jf, "%s/cfg.json %s/w.safetensors %s/in.safetensors %s/out.safetensors\n", dir, dir, dir, dir);
    }
    fclose(jf);
    char cmd[8192];
    const char *src = getenv("MHE_SOURCE_DIR") ? getenv("MHE_SOURCE_DIR") : ".";
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 /usr/bin/python3 %s/tests/reference/ref_task.py --jobs %s", src, jobs);
    if (system(cmd) != 0) fail_msg("oracle failed: %s", cmd);
    int bad = 0;
    double worst = 0;
    for (int i = 0; i < n; i++) {
        bad += compare(&cases[i], &res[i], &worst);
        result_free(&res[i]);
    }
    free(res);
    print_message("%d cases, worst gradient rel err %.2e\n", n, worst);
    assert_int_equal(bad, 0);
}

// model.h: backward adds d(sum of row losses)/dθ / divisor.  Divisor 2B gives half the gradient
// of the default (B labelled rows), and two backward calls without zeroing add up.
static void test_divisor_scales_and_calls_accumulate(void **state) {
    Backend *be = *state;
    const TaskType tasks[3] = {TASK_CLASSIFICATION, TASK_REGRESSION, TASK_SPAN};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 3; k++) {
            Case c = {"divisor", a ? ARCH_GPT : ARCH_BERT, ATTN_MHE_MUL, 1, tasks[k]};
            Result one, half;
            run_case(be, &c, &one, NULL, 0);
            run_case(be, &c, &half, NULL, 2.0 * B_);
            const size_t n = one.table.total;
            for (size_t i = 0; i < n; i++) half.grads[i] *= 2.0f;
            assert_true(rel_l2(half.grads, one.grads, n) <= 1e-6);

            Config cfg;
            make_config(&c, &cfg);
            Model *m = model_create(&cfg, be, B_, T_);
            randomise(m, 4321);
            Inputs in;
            make_inputs(cfg.model.vocab_size, &in);
            TaskBatch b = batch_of(&c, &in);
            model_zero_grad(m);
            for (int rep = 0; rep < 2; rep++) {
                model_forward_task(m, &b, 0);
                assert_int_equal(model_label_count(m), B_);
                model_backward_task(m, 2.0 * B_);
            }
            float *g = mhe_malloc(n * sizeof(float));
            model_get_grads(m, g);
            assert_true(rel_l2(g, one.grads, n) <= 1e-6);
            free(g);
            model_free(m);
            config_free(&cfg);
            result_free(&one);
            result_free(&half);
        }
}

// The task model's table: the pretraining head is gone, the task head is there, the encoder
// tensors keep their names and shapes (what init_from copies).
static void test_task_table_replaces_pretraining_head(void **state) {
    (void)state;
    for (int a = 0; a < 2; a++) {
        Config cfg;
        Case c = {"table", a ? ARCH_GPT : ARCH_BERT, ATTN_MHA, 1, TASK_NONE};
        make_config(&c, &cfg);
        ParamTable pre, cls, span;
        param_table_build(&pre, &cfg);
        cfg.task.type = TASK_CLASSIFICATION;
        cfg.task.num_labels = 5;
        param_table_build(&cls, &cfg);
        cfg.task.type = TASK_SPAN;
        param_table_build(&span, &cfg);
        int encoder = 0;
        for (int i = 0; i < pre.count; i++) {
            const ParamTensor *p = &pre.tensors[i];
            const ParamTensor *q = param_table_find(&cls, p->name);
            if (strncmp(p->name, "head.", 5) == 0) {
                assert_null(q);
                continue;
            }
            assert_non_null(q);
            assert_int_equal(q->numel, p->numel);
            encoder++;
        }
        assert_int_equal(cls.count, encoder + (a ? 1 : 4));
        assert_int_equal(span.count, encoder + 2);
        const ParamTensor *w = param_table_find(&cls, "task.classifier.weight");
        assert_non_null(w);
        assert_int_equal(w->shape[0], 5);
        assert_int_equal(w->shape[1], cfg.model.hidden);
        assert_true((param_table_find(&cls, "task.classifier.bias") != NULL) == (a == 0));
        assert_non_null(param_table_find(&span, "task.qa.weight"));
        param_table_free(&pre);
        param_table_free(&cls);
        param_table_free(&span);
        config_free(&cfg);
    }
}

static int setup(void **state) {
    cpu_backend_setup(state);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests", out_dir());
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/tests/model", out_dir());
    mkdir(dir, 0755);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task_table_replaces_pretraining_head),
        cmocka_unit_test(test_divisor_scales_and_calls_accumulate),
        cmocka_unit_test(test_every_head_and_variant_matches_pytorch),
    };
    return cmocka_run_group_tests(tests, setup, cpu_backend_teardown);
}
