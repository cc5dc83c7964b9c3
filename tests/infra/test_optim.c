// AdamW, LAMB and gradient clipping against PyTorch (tests/infra/optim_oracle.py), and the
// sharded update against the unsharded one.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "tests/infra/infra_util.h"
#include "trainer/train/optim.h"
#include "trainer/io/safetensors.h"

#define STEPS 6
// fp32 arithmetic in a slightly different order than torch's kernels: a few ulps.
#define TOL 1e-6
// The update (w - w0) is ~3e-2 while w ~ 2: fp32 rounding of w alone is ~1e-6 of the update
// (measured 1.8e-6).
#define TOL_UPDATE 1e-5
// The backend kernels share kernels/optim_math.h with optim_step (measured 0 on the CPU backend);
// the bound allows a backend whose compiler contracts multiply-adds.
#define TOL_BACKEND_UPDATE 5e-5

static OptimConfig config(OptimizerKind kind, bool decay_all) {
    OptimConfig o = {0};
    o.name = kind;
    o.lr = 1e-2f;
    o.beta1 = 0.9f;
    o.beta2 = 0.999f;
    o.eps = 1e-6f;
    o.weight_decay = 0.1f;
    o.decay_all = decay_all;
    return o;
}

static void fill_normal(float *x, size_t n, uint64_t key, float scale) {
    Rng r = rng_stream(1234, key, 0);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_next_normal(&r));
}

typedef struct {
    ParamTable t;
    float *params0, *grads, *clip_in;
    float lrs[STEPS];
} Problem;

static void problem_make(Problem *p) {
    infra_table(&p->t, 1);
    const size_t n = p->t.total;
    p->params0 = mhe_malloc(n * sizeof(float));
    p->grads = mhe_malloc(STEPS * n * sizeof(float));
    p->clip_in = mhe_malloc(n * sizeof(float));
    fill_normal(p->params0, n, 1, 0.5f);
    const ParamTensor *z = param_table_find(&p->t, "layers.0.ffn.zero.weight");
    memset(p->params0 + z->offset, 0, z->numel * sizeof(float));
    fill_normal(p->grads, STEPS * n, 2, 1.0f);
    fill_normal(p->clip_in, n, 3, 3.0f);
    for (int s = 0; s < STEPS; s++) p->lrs[s] = 1e-2f * (float)(s + 1) / STEPS;
}

static void problem_free(Problem *p) {
    free(p->params0);
    free(p->grads);
    free(p->clip_in);
    param_table_free(&p->t);
}

static void check_against_torch(OptimizerKind kind, bool decay_all) {
    Problem p;
    problem_make(&p);
    const ParamTable *t = &p.t;
    const size_t n = t->total;
    OptimConfig o = config(kind, decay_all);

    char *dir = infra_scratch_dir(kind == OPT_ADAMW ? (decay_all ? "optim_adamw_all" : "optim_adamw") : "optim_lamb");
    char in_path[4200], out_path[4200], cmd[13000];
    snprintf(in_path, sizeof in_path, "%s/inputs.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/expected.safetensors", dir);
    int64_t *offsets = mhe_malloc((size_t)t->count * sizeof(int64_t)), *numel = mhe_malloc((size_t)t->count * sizeof(int64_t));
    int32_t *kinds = mhe_malloc((size_t)t->count * sizeof(int32_t));
    for (int j = 0; j < t->count; j++) {
        offsets[j] = (int64_t)t->tensors[j].offset;
        numel[j] = (int64_t)t->tensors[j].numel;
        kinds[j] = (int32_t)t->tensors[j].kind;
    }
    float hyper[4] = {o.beta1, o.beta2, o.eps, o.weight_decay}, clip_max = 1.5f;
    int32_t flags[2] = {kind == OPT_ADAMW ? 0 : 1, decay_all};
    StFile f;
    st_init(&f);
    int64_t sc = t->count, sn = (int64_t)n, sg[2] = {STEPS, (int64_t)n}, s4 = 4, s2 = 2, s1 = 1, ss = STEPS;
    st_add(&f, "offsets", ST_I64, 1, &sc, offsets);
    st_add(&f, "numel", ST_I64, 1, &sc, numel);
    st_add(&f, "kinds", ST_I32, 1, &sc, kinds);
    st_add(&f, "hyper", ST_F32, 1, &s4, hyper);
    st_add(&f, "flags", ST_I32, 1, &s2, flags);
    st_add(&f, "params0", ST_F32, 1, &sn, p.params0);
    st_add(&f, "grads", ST_F32, 2, sg, p.grads);
    st_add(&f, "lrs", ST_F32, 1, &ss, p.lrs);
    st_add(&f, "clip_in", ST_F32, 1, &sn, p.clip_in);
    st_add(&f, "clip_max", ST_F32, 1, &s1, &clip_max);
    assert_int_equal(st_write(&f, in_path), 0);
    st_free(&f);

    char *py = infra_python();
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/infra/optim_oracle.py' '%s' '%s'", py, getenv("MHE_SOURCE_DIR"), in_path, out_path);
    assert_int_equal(system(cmd), 0);

    // Ours.
    float *w = mhe_malloc(n * sizeof(float)), *clip = mhe_malloc(n * sizeof(float));
    memcpy(w, p.params0, n * sizeof(float));
    OptimState s;
    optim_state_init(&s, t, 0, n);
    for (int k = 0; k < STEPS; k++) optim_step(&s, &o, t, w, p.grads + (size_t)k * n, p.lrs[k], NULL, NULL);
    assert_int_equal(s.step, STEPS);
    memcpy(clip, p.clip_in, n * sizeof(float));
    double norm = optim_clip_grad_norm(clip, n, clip_max);

    StFile e;
    st_read(&e, out_path);
    const float *ew = st_find(&e, "params")->data, *em = st_find(&e, "m")->data, *ev = st_find(&e, "v")->data;
    const float *eclip = st_find(&e, "clip_out")->data;
    const double enorm = *(const double *)st_find(&e, "clip_norm")->data;
    double err_w = rel_max(w, ew, n), err_m = rel_max(s.m, em, n), err_v = rel_max(s.v, ev, n);
    double err_c = rel_max(clip, eclip, n), err_n = fabs(norm - enorm) / enorm;
    // The change of the weights, compared on its own scale: much more sensitive than the
    // weights themselves, whose fp32 rounding (1 ulp of |w| ~ 2) dominates above.
    float *dw = mhe_malloc(n * sizeof(float)), *edw = mhe_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        dw[i] = w[i] - p.params0[i];
        edw[i] = ew[i] - p.params0[i];
    }
    const double err_d = rel_max(dw, edw, n);
    free(dw);
    free(edw);
    printf("%s%s: rel err params %.3g update %.3g m %.3g v %.3g | clip %.3g norm %.3g (%.6f)\n",
           kind == OPT_ADAMW ? "adamw" : "lamb", decay_all ? " decay_all" : "", err_w, err_d, err_m, err_v, err_c, err_n, norm);
    assert_true(err_w <= TOL);
    assert_true(err_d <= TOL_UPDATE);
    assert_true(err_m <= TOL);
    assert_true(err_v <= TOL);
    assert_true(err_c <= TOL);
    assert_true(err_n <= TOL);
    // The parameters really moved, so the comparison is not vacuous.
    assert_true(rel_max(w, p.params0, n) > 1e-3);
    assert_true(norm > clip_max);

    st_free(&e);
    optim_state_free(&s);
    free(w); free(clip); free(py); free(dir); free(offsets); free(numel); free(kinds);
    problem_free(&p);
}

static void test_adamw_matches_torch(void **state) {
    (void)state;
    check_against_torch(OPT_ADAMW, false);
}
static void test_adamw_decay_all_matches_torch(void **state) {
    (void)state;
    check_against_torch(OPT_ADAMW, true);
}
static void test_lamb_matches_torch_reference(void **state) {
    (void)state;
    check_against_torch(OPT_LAMB, false);
}

static void test_weight_decay_only_on_weights(void **state) {
    (void)state;
    OptimConfig o = config(OPT_ADAMW, false);
    ParamTensor p = {0};
    const struct { ParamKind k; int want; } cases[] = {{PARAM_WEIGHT, 1}, {PARAM_BIAS, 0}, {PARAM_NORM, 0},
                                                       {PARAM_EMBEDDING, 0}, {PARAM_HEAD_EMBED, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p.kind = cases[i].k;
        assert_int_equal(optim_decays(&o, &p), cases[i].want);
    }
    o.decay_all = true;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p.kind = cases[i].k;
        assert_int_equal(optim_decays(&o, &p), 1);
    }
}

static void test_clip_leaves_small_and_nonfinite_gradients(void **state) {
    (void)state;
    float g[3] = {0.3f, -0.4f, 0.0f};
    double norm = optim_clip_grad_norm(g, 3, 1.0f);
    assert_true(fabs(norm - 0.5) < 1e-7);
    assert_true(g[0] == 0.3f && g[1] == -0.4f);
    g[2] = INFINITY;
    norm = optim_clip_grad_norm(g, 3, 1.0f);
    assert_true(isinf(norm));
    assert_true(g[0] == 0.3f);
    g[2] = 0.0f;
    assert_true(optim_clip_coef(10.0, 0.0f) == 1.0f);  // clipping off
}

// Two "ranks" as threads, each owning half of the flat buffer (the cut falls inside a tensor),
// all-reducing LAMB's norms through a barrier.
typedef struct {
    pthread_barrier_t bar;
    double *slot[2];
    int n;
} Reducer;

typedef struct {
    Reducer *red;
    int rank;
} RankCtx;

static void reduce_two(double *norms, int n, void *ctx) {
    RankCtx *rc = ctx;
    Reducer *r = rc->red;
    r->slot[rc->rank] = norms;
    r->n = n;
    pthread_barrier_wait(&r->bar);
    double mine[256];
    assert_true(n <= 256);
    for (int i = 0; i < n; i++) mine[i] = r->slot[0][i] + r->slot[1][i];
    pthread_barrier_wait(&r->bar);
    memcpy(norms, mine, (size_t)n * sizeof(double));
}

typedef struct {
    RankCtx rc;
    OptimState s;
    const OptimConfig *o;
    const Problem *p;
    float *w;
} Worker;

static void *run_rank(void *arg) {
    Worker *wk = arg;
    for (int k = 0; k < STEPS; k++)
        optim_step(&wk->s, wk->o, &wk->p->t, wk->w, wk->p->grads + (size_t)k * wk->p->t.total, wk->p->lrs[k], reduce_two, &wk->rc);
    return NULL;
}

static void check_sharded(OptimizerKind kind) {
    Problem p;
    problem_make(&p);
    const size_t n = p.t.total, cut = p.t.tensors[3].offset + 5;  // inside layers.0.attn.q.weight
    OptimConfig o = config(kind, false);
    float *ref = mhe_malloc(n * sizeof(float)), *w = mhe_malloc(n * sizeof(float));
    memcpy(ref, p.params0, n * sizeof(float));
    memcpy(w, p.params0, n * sizeof(float));
    OptimState whole;
    optim_state_init(&whole, &p.t, 0, n);
    for (int k = 0; k < STEPS; k++) optim_step(&whole, &o, &p.t, ref, p.grads + (size_t)k * n, p.lrs[k], NULL, NULL);

    Reducer red;
    pthread_barrier_init(&red.bar, NULL, 2);
    Worker wk[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        wk[r].rc.red = &red;
        wk[r].rc.rank = r;
        wk[r].o = &o;
        wk[r].p = &p;
        wk[r].w = w;  // disjoint ranges of one buffer
        optim_state_init(&wk[r].s, &p.t, r ? cut : 0, r ? n : cut);
        pthread_create(&th[r], NULL, run_rank, &wk[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    // Moments of each shard equal the matching slice of the whole state.
    assert_memory_equal(wk[0].s.m, whole.m, cut * sizeof(float));
    assert_memory_equal(wk[1].s.v, whole.v + cut, (n - cut) * sizeof(float));
    double err = rel_max(w, ref, n);
    printf("%s sharded vs whole: rel err %.3g\n", kind == OPT_ADAMW ? "adamw" : "lamb", err);
    if (kind == OPT_ADAMW) assert_memory_equal(w, ref, n * sizeof(float));  // elementwise: exact
    else assert_true(err <= 1e-7);  // norms summed in another order (double): ~1 ulp of fp32
    for (int r = 0; r < 2; r++) optim_state_free(&wk[r].s);
    optim_state_free(&whole);
    pthread_barrier_destroy(&red.bar);
    free(ref); free(w);
    problem_free(&p);
}

static void test_sharded_adamw_equals_whole(void **state) {
    (void)state;
    check_sharded(OPT_ADAMW);
}
static void test_sharded_lamb_equals_whole(void **state) {
    (void)state;
    check_sharded(OPT_LAMB);
}

// The double reductions use fixed chunks, so the thread count cannot change a single bit.
// optim_step_scaled (the clip coefficient applied as the gradients are read) against scaling the
// gradients in place first and calling optim_step: the same bits, and the gradients untouched.
static void scaled_equals_scaling_first(OptimizerKind kind) {
    Problem p;
    problem_make(&p);
    const size_t n = p.t.total;
    const OptimConfig o = config(kind, false);
    const float coef[STEPS] = {0.37f, 1.0f, 0.0625f, 0.9999f, 0.5f, 0.123456f};
    float *a = mhe_malloc(n * sizeof *a), *b = mhe_malloc(n * sizeof *b), *g = mhe_malloc(n * sizeof *g);
    memcpy(a, p.params0, n * sizeof *a);
    memcpy(b, p.params0, n * sizeof *b);
    OptimState sa, sb;
    optim_state_init(&sa, &p.t, 0, n);
    optim_state_init(&sb, &p.t, 0, n);
    for (int k = 0; k < STEPS; k++) {
        const float *gk = p.grads + (size_t)k * n;
        optim_step_scaled(&sa, &o, &p.t, a, gk, p.lrs[k], coef[k], NULL, NULL);
        for (size_t i = 0; i < n; i++) g[i] = gk[i] * coef[k];
        optim_step(&sb, &o, &p.t, b, g, p.lrs[k], NULL, NULL);
        assert_memory_equal(a, b, n * sizeof *a);
        assert_memory_equal(sa.m, sb.m, n * sizeof *sa.m);
        assert_memory_equal(sa.v, sb.v, n * sizeof *sa.v);
    }
    assert_memory_not_equal(a, p.params0, n * sizeof *a);
    optim_state_free(&sa);
    optim_state_free(&sb);
    free(a);
    free(b);
    free(g);
    problem_free(&p);
}
static void test_scaled_step_equals_scaling_first(void **state) {
    (void)state;
    scaled_equals_scaling_first(OPT_ADAMW);
    scaled_equals_scaling_first(OPT_LAMB);
}

static void test_lamb_is_thread_count_independent(void **state) {
    (void)state;
    Problem p;
    problem_make(&p);
    const size_t n = p.t.total;
    OptimConfig o = config(OPT_LAMB, false);
    float *w[2];
    double sq[2];
    for (int r = 0; r < 2; r++) {
        omp_set_num_threads(r ? 2 : 1);
        w[r] = mhe_malloc(n * sizeof(float));
        memcpy(w[r], p.params0, n * sizeof(float));
        OptimState s;
        optim_state_init(&s, &p.t, 0, n);
        for (int k = 0; k < STEPS; k++) optim_step(&s, &o, &p.t, w[r], p.grads + (size_t)k * n, p.lrs[k], NULL, NULL);
        sq[r] = optim_sq_sum(p.grads, STEPS * n);
        optim_state_free(&s);
    }
    assert_memory_equal(w[0], w[1], n * sizeof(float));
    assert_true(sq[0] == sq[1]);
    free(w[0]);
    free(w[1]);
    problem_free(&p);
}

// The backend path (kernels/ops.h, here the CPU backend) against the host optimizer.
static void check_backend(OptimizerKind kind) {
    Problem p;
    problem_make(&p);
    const size_t n = p.t.total;
    OptimConfig o = config(kind, false);
    Backend *be = backend_cpu_create(2);
    float *w = mhe_malloc(n * sizeof(float)), *ref = mhe_malloc(n * sizeof(float));
    float *m = be->alloc(be, n * sizeof(float)), *v = be->alloc(be, n * sizeof(float)), *u = be->alloc(be, n * sizeof(float));
    float *g = be->alloc(be, n * sizeof(float)), *dw = be->alloc(be, n * sizeof(float));
    memcpy(ref, p.params0, n * sizeof(float));
    be->upload(be, dw, p.params0, n * sizeof(float));
    OptimState host, dev;
    optim_state_init(&host, &p.t, 0, n);
    optim_state_init(&dev, &p.t, 0, n);
    for (int k = 0; k < STEPS; k++) {
        // Gradients stored doubled and scaled back by grad_scale = 0.5: exact in binary.
        float *g2 = mhe_malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) g2[i] = 2.0f * p.grads[(size_t)k * n + i];
        be->upload(be, g, g2, n * sizeof(float));
        free(g2);
        optim_step(&host, &o, &p.t, ref, p.grads + (size_t)k * n, p.lrs[k], NULL, NULL);
        optim_step_backend(be, &dev, &o, &p.t, dw, g, m, v, u, p.lrs[k], 0.5f, NULL, NULL);
    }
    be->download(be, w, dw, n * sizeof(float));
    float *hm = mhe_malloc(n * sizeof(float));
    be->download(be, hm, m, n * sizeof(float));
    double ew = rel_max(w, ref, n), em = rel_max(hm, host.m, n);
    float *d1 = mhe_malloc(n * sizeof(float)), *d2 = mhe_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        d1[i] = w[i] - p.params0[i];
        d2[i] = ref[i] - p.params0[i];
    }
    double ed = rel_max(d1, d2, n);
    printf("%s backend vs host: rel err params %.3g update %.3g m %.3g\n", kind == OPT_ADAMW ? "adamw" : "lamb", ew, ed, em);
    assert_true(ew <= TOL);
    assert_true(ed <= TOL_BACKEND_UPDATE);
    assert_true(em <= TOL);
    assert_int_equal(dev.step, STEPS);
    be->free(be, m); be->free(be, v); be->free(be, u); be->free(be, g); be->free(be, dw);
    be->destroy(be);
    optim_state_free(&host);
    optim_state_free(&dev);
    free(w); free(ref); free(hm); free(d1); free(d2);
    problem_free(&p);
}

static void test_backend_adamw_matches_host(void **state) {
    (void)state;
    check_backend(OPT_ADAMW);
}
static void test_backend_lamb_matches_host(void **state) {
    (void)state;
    check_backend(OPT_LAMB);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_matches_torch),
        cmocka_unit_test(test_adamw_decay_all_matches_torch),
        cmocka_unit_test(test_lamb_matches_torch_reference),
        cmocka_unit_test(test_weight_decay_only_on_weights),
        cmocka_unit_test(test_clip_leaves_small_and_nonfinite_gradients),
        cmocka_unit_test(test_sharded_adamw_equals_whole),
        cmocka_unit_test(test_sharded_lamb_equals_whole),
        cmocka_unit_test(test_lamb_is_thread_count_independent),
        cmocka_unit_test(test_scaled_step_equals_scaling_first),
        cmocka_unit_test(test_backend_adamw_matches_host),
        cmocka_unit_test(test_backend_lamb_matches_host),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
