// The model (trainer/model*.c over the CPU backend) against the independent PyTorch oracle
// tests/reference/ref_model.py, for every arch x attention type, plus fast path = plain path
// and gradients against double-precision finite differences.
//
// Tolerances (fp32 vs fp32 oracle, relative error ‖ours − ref‖/‖ref‖ per tensor): loss and logits
// ≤ 1e-5, every parameter gradient ≤ 1e-4; a gradient whose reference is ~0 (norm below 1e-6,
// e.g. mhe_add's e^K, which the oracle computes as round-off) must be ≤ 1e-6 in absolute norm.
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
#include "trainer/model/model.h"
#include "trainer/io/safetensors.h"

#define B_ 2
#define T_ 7

typedef struct {
    const char *name;
    Arch arch;
    AttentionType type;
    int norm;        // -1: arch default, else NormPlacement
    int head_dim;    // 0: D/n
    int groups;
    int collab_dim;  // 0: n*d
    int pad;         // second sequence padded
    int fast;        // fast path on
} Case;

typedef struct {
    float loss;
    float *logits;   // [B, T, V]
    float *grads;    // ParamTable order
    ParamTable table;
    char dir[512];
} Result;

static void make_config(const Case *c, Config *cfg) {
    TinyShape shape = TINY_SHAPE;
    shape.head_dim = c->head_dim;
    tiny_config(cfg, c->arch, c->type, shape);  // the type's keys at their test values
    if (c->groups) cfg->attention.groups = c->groups;
    if (c->collab_dim) cfg->attention.collab_dim = c->collab_dim;
    cfg->attention.embed_std = 0.3f;
    cfg->attention.fast_path = c->fast;
    config_resolve(cfg, "test_model");
    if (c->norm >= 0) cfg->model.norm = (NormPlacement)c->norm;
}

static const char *out_dir(void) {
    const char *b = getenv("MHE_BINARY_DIR");
    return b ? b : ".";
}

static const char *python(void) {
    static char path[1024];
    const char *src = getenv("MHE_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/.venv/bin/python", src ? src : ".");
    struct stat st;
    if (stat(path, &st) == 0) return path;
    return "/usr/bin/python3";
}

// Inputs shared by all cases: random ids and types, the second sequence padded over its last
// two positions (when pad), labels on ~half the real positions (bert) or the next token (gpt).
typedef struct {
    int32_t ids[B_ * T_], types[B_ * T_], mask[B_ * T_], labels[B_ * T_];
} Inputs;

static void make_inputs(const Case *c, int V, Inputs *in) {
    Rng r = rng_stream(7, 1, 2);
    for (int i = 0; i < B_ * T_; i++) {
        in->ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
        in->types[i] = (int32_t)(rng_next(&r) % 2);
        int t = i % T_, b = i / T_;
        in->mask[i] = !(c->pad && b == 1 && t >= T_ - 2);
    }
    for (int i = 0; i < B_ * T_; i++) {
        int t = i % T_;
        if (c->arch == ARCH_GPT)
            in->labels[i] = (t + 1 < T_ && in->mask[i + 1]) ? in->ids[i + 1] : -100;
        else
            in->labels[i] = (in->mask[i] && (rng_next(&r) % 2 == 0 || t == 0)) ? (int32_t)(rng_next(&r) % (uint64_t)V) : -100;
    }
}

// Random non-trivial parameters: param_init plus noise everywhere (biases and LayerNorm too).
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

static void write_cfg_json(const Config *cfg, const char *path) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    const ModelConfig *m = &cfg->model;
    fprintf(f,
            "{\"arch\": \"%s\", \"layers\": %d, \"hidden\": %d, \"heads\": %d, \"head_dim\": %d, "
            "\"ffn\": %d, \"vocab_size\": %d, \"max_seq\": %d, \"type_vocab\": %d, \"norm\": \"%s\", "
            "\"activation\": \"%s\", \"ln_eps\": %.9g, ",
            m->arch == ARCH_BERT ? "bert" : "gpt", m->layers, m->hidden, m->heads, m->head_dim, m->ffn,
            m->vocab_size, m->max_seq, m->arch == ARCH_BERT ? m->type_vocab : 2,
            m->norm == NORM_PRE ? "pre" : "post", m->activation == ACT_GELU_TANH ? "gelu_tanh" : "gelu",
            (double)m->ln_eps);
    oracle_attention_json(f, cfg);  // "attention": type and the type's own keys
    fputs("}\n", f);
    fclose(f);
}

// Weights as F32 (or widened to F64 plus an optional perturbation h*u of one tensor).
static void write_weights(const ParamTable *t, const float *w, const char *path, int f64,
                          int pert_tensor, double h, const double *u) {
    StFile st;
    st_init(&st);
    double *wide = f64 ? mhe_malloc(t->total * sizeof *wide) : NULL;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        if (f64) {
            for (size_t j = 0; j < p->numel; j++)
                wide[p->offset + j] = (double)w[p->offset + j] + (i == pert_tensor ? h * u[j] : 0.0);
            st_add(&st, p->name, ST_F64, p->ndim, shape, wide + p->offset);
        } else {
            st_add(&st, p->name, ST_F32, p->ndim, shape, w + p->offset);
        }
    }
    assert_int_equal(st_write(&st, path), 0);
    st_free(&st);
    free(wide);
}

static void write_inputs(const Case *c, const Inputs *in, const char *path) {
    StFile st;
    st_init(&st);
    int64_t shape[2] = {B_, T_};
    st_add(&st, "input_ids", ST_I32, 2, shape, in->ids);
    st_add(&st, "labels", ST_I32, 2, shape, in->labels);
    st_add(&st, "attention_mask", ST_I32, 2, shape, in->mask);
    if (c->arch == ARCH_BERT) st_add(&st, "token_type_ids", ST_I32, 2, shape, in->types);
    assert_int_equal(st_write(&st, path), 0);
    st_free(&st);
}

// Set by test_fused_projections_equal_separate: run with one GEMM per Q/K/V projection.
static int g_separate_qkv;
static int g_was_fused;  // whether the last run_case's model fused its projections by default

// Runs our model on a case and, when dir is non-NULL, writes the oracle's files there.
static void run_case(Backend *be, const Case *c, Result *res, const char *dir) {
    Config cfg;
    make_config(c, &cfg);
    Model *m = model_create(&cfg, be, B_, T_);
    g_was_fused = model_fused_qkv(m);
    if (g_separate_qkv) model_set_fused_qkv(m, 0);
    randomise(m, 1234);
    Inputs in;
    make_inputs(c, cfg.model.vocab_size, &in);
    const int V = cfg.model.vocab_size;
    res->loss = model_forward(m, in.ids, c->arch == ARCH_BERT ? in.types : NULL, in.mask, in.labels,
                              B_, T_, 0);
    res->logits = mhe_malloc((size_t)B_ * T_ * V * sizeof(float));
    model_download_logits(m, res->logits);
    model_zero_grad(m);
    model_backward(m, 0);
    res->grads = mhe_malloc(model_param_count(m) * sizeof(float));
    model_get_grads(m, res->grads);
    param_table_build(&res->table, &cfg);
    if (dir) {
        snprintf(res->dir, sizeof res->dir, "%s", dir);
        mkdir(dir, 0755);
        char path[1024];
        snprintf(path, sizeof path, "%s/cfg.json", dir);
        write_cfg_json(&cfg, path);
        float *w = mhe_malloc(model_param_count(m) * sizeof(float));
        model_get_params(m, w);
        snprintf(path, sizeof path, "%s/w.safetensors", dir);
        write_weights(&res->table, w, path, 0, -1, 0, NULL);
        free(w);
        snprintf(path, sizeof path, "%s/in.safetensors", dir);
        write_inputs(c, &in, path);
    }
    model_free(m);
    config_free(&cfg);
}

static void result_free(Result *r) {
    free(r->logits);
    free(r->grads);
    param_table_free(&r->table);
}

static void run_oracle(const char *jobs) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "OMP_NUM_THREADS=1 %s %s/tests/model/run_oracle.py %s", python(),
             getenv("MHE_SOURCE_DIR") ? getenv("MHE_SOURCE_DIR") : ".", jobs);
    int rc = system(cmd);
    if (rc != 0) fail_msg("oracle failed: %s", cmd);
}

static double as_double(const StTensor *t, size_t i) {
    return t->dtype == ST_F64 ? ((const double *)t->data)[i] : ((const float *)t->data)[i];
}

// ‖a − ref‖ / ‖ref‖ (absolute norm when ‖ref‖ < 1e-6); returns the error, sets *is_abs.
static double rel_err(const float *a, const StTensor *ref, size_t n, int *is_abs) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double r = as_double(ref, i), d = a[i] - r;
        num += d * d;
        den += r * r;
    }
    *is_abs = sqrt(den) < 1e-6;
    return *is_abs ? sqrt(num) : sqrt(num / den);
}

static int compare_with_oracle(const char *name, const Result *r, int V) {
    char path[1024];
    snprintf(path, sizeof path, "%s/out.safetensors", r->dir);
    StFile out;
    st_read(&out, path);
    int bad = 0, is_abs;
    const StTensor *loss = st_find(&out, "loss");
    const StTensor *logits = st_find(&out, "logits");
    assert_non_null(loss);
    assert_non_null(logits);
    double e = fabs(r->loss - as_double(loss, 0)) / fabs(as_double(loss, 0));
    if (e > 1e-5) {
        print_message("%s: loss %.8g vs oracle %.8g (rel %.3g)\n", name, r->loss, as_double(loss, 0), e);
        bad++;
    }
    e = rel_err(r->logits, logits, (size_t)B_ * T_ * V, &is_abs);
    if (e > 1e-5) {
        print_message("%s: logits rel err %.3g\n", name, e);
        bad++;
    }
    double worst = 0;
    for (int i = 0; i < r->table.count; i++) {
        const ParamTensor *p = &r->table.tensors[i];
        char gname[PARAM_NAME_MAX + 8];
        snprintf(gname, sizeof gname, "grad.%s", p->name);
        const StTensor *g = st_find(&out, gname);
        if (!g) {
            print_message("%s: oracle has no %s\n", name, gname);
            bad++;
            continue;
        }
        e = rel_err(r->grads + p->offset, g, p->numel, &is_abs);
        if (e > (is_abs ? 1e-6 : 1e-4)) {
            print_message("%s: %s %s err %.3g\n", name, gname, is_abs ? "abs" : "rel", e);
            bad++;
        }
        if (!is_abs && e > worst) worst = e;
    }
    print_message("%-24s loss %.6f  worst grad rel err %.2e%s\n", name, r->loss, worst, bad ? "  FAIL" : "");
    st_free(&out);
    return bad;
}

// Every registered attention type (trainer/config/attention_types.h), for both arches, with its
// keys at the registry's test values; a type whose fast path changes the plan runs both paths.
// Then cases that stress one feature: head_dim != D/n, collab D~ != n*d, the other norm
// placement, padded causal sequences.
static const Case EXTRA_CASES[] = {
    {"bert_mha_d5", ARCH_BERT, ATTN_MHA, -1, 5, 0, 0, 1, 1},
    {"bert_mhe_add_d5", ARCH_BERT, ATTN_MHE_ADD, -1, 5, 0, 0, 1, 1},
    {"gpt_mhe_mul_d5", ARCH_GPT, ATTN_MHE_MUL, -1, 5, 0, 0, 0, 1},
    {"gpt_gqa2_d5", ARCH_GPT, ATTN_GQA, -1, 5, 2, 0, 0, 1},
    {"bert_collab_dt7", ARCH_BERT, ATTN_COLLAB, -1, 0, 0, 7, 1, 1},
    {"gpt_collab_dt7_d5", ARCH_GPT, ATTN_COLLAB, -1, 5, 0, 7, 1, 1},
    {"bert_prenorm_mhe_mul", ARCH_BERT, ATTN_MHE_MUL, NORM_PRE, 0, 0, 0, 1, 1},
    {"gpt_postnorm_mhe_add", ARCH_GPT, ATTN_MHE_ADD, NORM_POST, 0, 0, 0, 1, 1},
    {"gpt_padded_skv", ARCH_GPT, ATTN_SKV, -1, 0, 0, 0, 1, 1},
};
#define N_EXTRA ((int)(sizeof EXTRA_CASES / sizeof EXTRA_CASES[0]))
#define MAX_CASES (MAX_VARIANT_CASES + N_EXTRA)

// Fills cases[]; returns how many.
static int all_cases(Case *cases) {
    static VariantCase v[MAX_VARIANT_CASES];
    const int nv = variant_cases(v);
    int k = 0;
    for (int i = 0; i < nv; i++)
        cases[k++] = (Case){v[i].name, v[i].arch, v[i].type, -1, 0, 0, 0, v[i].arch == ARCH_BERT, v[i].fast};
    for (int i = 0; i < N_EXTRA; i++) cases[k++] = EXTRA_CASES[i];
    return k;
}

static void test_every_variant_matches_pytorch(void **state) {
    Backend *be = *state;
    char jobs[1024], dir[1024];
    snprintf(jobs, sizeof jobs, "%s/tests/model/oracle_jobs.txt", out_dir());
    snprintf(dir, sizeof dir, "%s/tests", out_dir());
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/tests/model", out_dir());
    mkdir(dir, 0755);
    FILE *jf = fopen(jobs, "w");
    assert_non_null(jf);
    Case CASES[MAX_CASES];
    const int N_CASES = all_cases(CASES);
    Result res[MAX_CASES];
    for (int i = 0; i < N_CASES; i++) {
        snprintf(dir, sizeof dir, "%s/tests/model/%s", out_dir(), CASES[i].name);
        run_case(be, &CASES[i], &res[i], dir);
        fprintf(jf, "%s/cfg.json %s/w.safetensors %s/in.safetensors %s/out.safetensors float32\n",
                dir, dir, dir, dir);
    }
    fclose(jf);
    run_oracle(jobs);
    int bad = 0;
    for (int i = 0; i < N_CASES; i++) {
        bad += compare_with_oracle(CASES[i].name, &res[i], 17);
        result_free(&res[i]);
    }
    assert_int_equal(bad, 0);
}

static double sumsq(const float *a, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
    return s;
}

// Fast and plain paths compute the same function, for every registered type whose fast path
// changes its plan (attention_has_fast_path), and a fast path whose key bias can run as per-head
// queries (mhe_add) in that form too: loss and logits ≤ 1e-5 relative, every gradient
// ≤ 1e-5 relative.  Analytically zero gradients (every K bias, a per-row constant score shift;
// mhe_add's e^K, which the fast path folds into a key bias) are round-off or exactly zero on
// either side: both must be ≤ 1e-6 in absolute norm.
// A backend whose faster core takes no key bias (ops.h attention_key_bias 0, as the cuDNN core):
// mhe_add's fast path then runs its key bias as per-head queries q + e^Q.
static int no_key_bias(Backend *be, const AttnShape *s) {
    (void)be;
    (void)s;
    return 0;
}

static void test_fast_paths_equal_plain_paths(void **state) {
    Backend *be = *state;
    const Arch arches[2] = {ARCH_BERT, ARCH_GPT};
    int types_with_fast_path = 0, key_bias_as_q = 0;
    for (int t = 0; t < ATTN_TYPE_COUNT; t++) {
        if (!attention_has_fast_path((AttentionType)t)) continue;
        types_with_fast_path++;
        const int as_q = t == ATTN_MHE_ADD;  // its AttnPlan.key_bias_as_q
        key_bias_as_q += as_q;
        for (int a = 0; a < 2 * (1 + as_q); a++) {
            Case c = {"fast_vs_plain", arches[a % 2], (AttentionType)t, -1, 0, 0, 0, 1, 1};
            Result fast, plain;
            if (a >= 2) be->attention_key_bias = no_key_bias;  // the per-head-query form
            run_case(be, &c, &fast, NULL);
            be->attention_key_bias = NULL;
            c.fast = 0;
            run_case(be, &c, &plain, NULL);
            double e = fabs(fast.loss - plain.loss) / fabs(plain.loss);
            assert_true(e <= 1e-5);
            assert_true(rel_l2(fast.logits, plain.logits, (size_t)B_ * T_ * 17) <= 1e-5);
            for (int i = 0; i < fast.table.count; i++) {
                const ParamTensor *p = &fast.table.tensors[i];
                const float *gf = fast.grads + p->offset;
                double ge = rel_l2(gf, plain.grads + p->offset, p->numel);
                if (sqrt(sumsq(plain.grads + p->offset, p->numel)) < 1e-6)
                    ge = sqrt(sumsq(gf, p->numel)) <= 1e-6 ? 0.0 : 1.0;
                if (ge > 1e-5) print_message("%s %s%s: %s rel err %.3g (norm %.3g)\n", arch_name(arches[a % 2]),
                                             a >= 2 ? " (key bias as per-head queries)" : "",
                                             attention_type_name((AttentionType)t), p->name, ge,
                                             sqrt(sumsq(plain.grads + p->offset, p->numel)));
                assert_true(ge <= 1e-5);
            }
            result_free(&fast);
            result_free(&plain);
        }
    }
    print_message("fast vs plain: %d registered types have a fast path, %d can run its key bias as per-head queries\n",
                  types_with_fast_path, key_bias_as_q);
    assert_true(types_with_fast_path >= 2);  // mhe_add, mhe_mul at least
    assert_true(key_bias_as_q >= 1);         // mhe_add
}

// Our fp32 analytic gradient against centred differences of the oracle's loss computed in
// float64: for each tensor a random unit direction u, FD = (L(w+hu) - L(w-hu)) / 2h with
// h = 1e-4 in double (truncation ~h² ≈ 1e-8, round-off ~1e-16/h ≈ 1e-12, far below fp32's
// ~1e-6 relative gradient error).  The check is |g·u − FD| ≤ 1e-4 ‖g‖ (Cauchy–Schwarz scale,
// robust when g·u happens to be small); a wrong term in a gradient gives O(‖g‖) errors.
// Tensors whose gradient is analytically zero (‖g‖ < 1e-6, the K biases) need |FD| ≤ 1e-6.
// Cases: mha and mhe_mul on both arches, then every other registered type on one arch (bert and
// gpt alternating in registry order), so a new type is checked without a line here.
static void test_gradients_match_double_finite_differences(void **state) {
    Backend *be = *state;
    Case cases[2 * ATTN_TYPE_COUNT];
    char names[2 * ATTN_TYPE_COUNT][48];
    int nc = 0;
    for (int t = 0, other = 0; t < ATTN_TYPE_COUNT; t++) {
        const int both = t == ATTN_MHA || t == ATTN_MHE_MUL;
        for (int a = 0; a < 2; a++) {
            if (!both && a != other % 2) continue;
            const Arch arch = a ? ARCH_GPT : ARCH_BERT;
            snprintf(names[nc], sizeof names[nc], "fd_%s_%s", arch_name(arch), attention_type_name((AttentionType)t));
            cases[nc] = (Case){names[nc], arch, (AttentionType)t, -1, 0, 0, 0, arch == ARCH_BERT, 1};
            nc++;
        }
        if (!both) other++;
    }
    const double h = 1e-4;
    char jobs[1024];
    snprintf(jobs, sizeof jobs, "%s/tests/model/fd_jobs.txt", out_dir());
    FILE *jf = fopen(jobs, "w");
    assert_non_null(jf);
    Result res[2 * ATTN_TYPE_COUNT];
    double *dirs[2 * ATTN_TYPE_COUNT];
    float *weights[2 * ATTN_TYPE_COUNT];
    for (int ci = 0; ci < nc; ci++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/tests/model/%s", out_dir(), cases[ci].name);
        run_case(be, &cases[ci], &res[ci], dir);
        const ParamTable *t = &res[ci].table;
        // Recreate the weights (run_case is deterministic) to write the perturbed copies.
        Config cfg;
        make_config(&cases[ci], &cfg);
        Model *m = model_create(&cfg, be, B_, T_);
        randomise(m, 1234);
        weights[ci] = mhe_malloc(t->total * sizeof(float));
        model_get_params(m, weights[ci]);
        model_free(m);
        config_free(&cfg);
        dirs[ci] = mhe_malloc(t->total * sizeof(double));
        Rng r = rng_stream(5, 6, (uint64_t)ci);
        for (int i = 0; i < t->count; i++) {
            const ParamTensor *p = &t->tensors[i];
            double *u = dirs[ci] + p->offset, nrm = 0;
            for (size_t j = 0; j < p->numel; j++) {
                u[j] = rng_next_normal(&r);
                nrm += u[j] * u[j];
            }
            for (size_t j = 0; j < p->numel; j++) u[j] /= sqrt(nrm);
            for (int s = 0; s < 2; s++) {
                char path[1200];
                snprintf(path, sizeof path, "%s/w_%d_%c.safetensors", dir, i, s ? 'm' : 'p');
                write_weights(t, weights[ci], path, 1, i, s ? -h : h, u);
                fprintf(jf, "%s/cfg.json %s %s/in.safetensors %s/o_%d_%c.safetensors float64\n", dir,
                        path, dir, dir, i, s ? 'm' : 'p');
            }
        }
    }
    fclose(jf);
    run_oracle(jobs);
    int bad = 0;
    for (int ci = 0; ci < nc; ci++) {
        const ParamTable *t = &res[ci].table;
        double worst = 0;
        for (int i = 0; i < t->count; i++) {
            const ParamTensor *p = &t->tensors[i];
            double L[2];
            for (int s = 0; s < 2; s++) {
                char path[1024];
                snprintf(path, sizeof path, "%s/o_%d_%c.safetensors", res[ci].dir, i, s ? 'm' : 'p');
                StFile o;
                st_read(&o, path);
                const StTensor *lt = st_find(&o, "loss");
                assert_non_null(lt);
                assert_int_equal(lt->dtype, ST_F64);
                L[s] = as_double(lt, 0);
                st_free(&o);
            }
            double fd = (L[0] - L[1]) / (2 * h), gu = 0, gn = 0;
            const float *g = res[ci].grads + p->offset;
            const double *u = dirs[ci] + p->offset;
            for (size_t j = 0; j < p->numel; j++) {
                gu += g[j] * u[j];
                gn += (double)g[j] * g[j];
            }
            // ‖g‖ < 1e-6: an analytically zero gradient (K biases); then FD must vanish too.
            double e = sqrt(gn) < 1e-6 ? fabs(fd) / 1e-2 : fabs(gu - fd) / sqrt(gn);
            if (e > worst) worst = e;
            if (e > 1e-4) {
                print_message("%s: %s g.u %.9g vs FD %.9g (err %.3g)\n", cases[ci].name, p->name, gu, fd, e);
                bad++;
            }
        }
        print_message("%-20s worst |g.u - FD|/|g| = %.2e over %d tensors\n", cases[ci].name, worst, t->count);
        free(dirs[ci]);
        free(weights[ci]);
        result_free(&res[ci]);
    }
    assert_int_equal(bad, 0);
}

// The fused Q/K/V projections (one GEMM over the weight block, q/k/v column slices of one
// buffer, one backward GEMM writing d_ain) against one GEMM per projection into separate buffers,
// for every variant case: the same dot products, summed in other blockings, so loss and logits
// agree to 1e-6 and every gradient to 1e-5 relative (analytically zero ones, the K biases, in
// absolute norm ≤ 1e-6).  Fusion must be on exactly where attn_qkv_fusable allows it.
static void test_fused_projections_equal_separate(void **state) {
    Backend *be = *state;
    Case cases[MAX_CASES];
    const int n = all_cases(cases);
    int fused_cases = 0;
    for (int i = 0; i < n; i++) {
        const Case *c = &cases[i];
        Result fused, sep;
        g_separate_qkv = 0;
        run_case(be, c, &fused, NULL);
        const int was_fused = g_was_fused;
        // skv reads V from K's buffer, el_att has one projection, mla makes K/V from a latent.
        const int expect = c->type != ATTN_SKV && c->type != ATTN_EL_ATT && c->type != ATTN_MLA;
        if (was_fused != expect) fail_msg("%s: fused %d, expected %d", c->name, was_fused, expect);
        if (!was_fused) {
            result_free(&fused);
            continue;
        }
        fused_cases++;
        g_separate_qkv = 1;
        run_case(be, c, &sep, NULL);
        g_separate_qkv = 0;
        assert_true(fabs(fused.loss - sep.loss) <= 1e-6 * fabs(sep.loss));
        assert_true(rel_l2(fused.logits, sep.logits, (size_t)B_ * T_ * 17) <= 1e-6);
        for (int t = 0; t < fused.table.count; t++) {
            const ParamTensor *p = &fused.table.tensors[t];
            const float *gf = fused.grads + p->offset, *gs = sep.grads + p->offset;
            double e = rel_l2(gf, gs, p->numel);
            if (sqrt(sumsq(gs, p->numel)) < 1e-6) e = sqrt(sumsq(gf, p->numel)) <= 1e-6 ? 0.0 : 1.0;
            if (e > 1e-5) print_message("%s %s: rel err %.3g\n", c->name, p->name, e);
            assert_true(e <= 1e-5);
        }
        result_free(&fused);
        result_free(&sep);
    }
    assert_true(fused_cases >= 7);  // mha, mhe_add, mhe_mul, gqa, mqa, sha, collab at least
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
        cmocka_unit_test(test_every_variant_matches_pytorch),
        cmocka_unit_test(test_fast_paths_equal_plain_paths),
        cmocka_unit_test(test_gradients_match_double_finite_differences),
        cmocka_unit_test(test_fused_projections_equal_separate),
    };
    return cmocka_run_group_tests(tests, setup, cpu_backend_teardown);
}
