// The CPU attention core alone, forward + backward, fused (the default) against the reference
// core (MHE_CPU_ATTENTION=ref), alternating in one process, medians; and the backend's matmul
// ceiling at the same precision (peak_matmul_gflops, 2048^3) measured in the same process.
//   build/bench_attention [--rounds R] [--quick] [--prec fp32|bf16] [--shape NAME] [--core fused|ref]
//                         [--dropout P]
// (--core: time only that core, for a profiler; --dropout: the attention dropout, 0.1 unless
// given, 0 to see what the mask's hash costs).
// Shapes: the bench's tiny512 (B=8, T=512, n=8, d=32) and small (B=32, T=128, n=8, d=64), BERT
// (key mask, attention dropout 0.1), and tiny512 causal (GPT).  GFLOP/s count the products as
// the backend's profile does (T x T even when causal), so a causal core that skips the blocks
// above the diagonal shows up to twice the rate of its work.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "trainer/train/peak.h"

typedef struct {
    const char *name;
    int B, T, n, d, causal;
} Shape;

typedef struct {
    AttnShape s;
    Act *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *saved, *scratch;
    int32_t *km;
} Run;

static Act *act_random(Backend *be, size_t n, unsigned seed) {
    float *h = mhe_malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f;
    }
    Act *a = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, a, h, n);
    free(h);
    return a;
}

static float attn_dropout = 0.1f;  // --dropout

static Run run_make(Backend *be, const Shape *sh) {
    Run r = {0};
    AttnShape *s = &r.s;
    s->B = sh->B, s->T = sh->T, s->n_heads = sh->n;
    s->q_heads = s->k_heads = s->v_heads = sh->n;
    s->qk_dim = s->v_dim = sh->d;
    s->ldq = s->ldk = s->ldv = sh->n * sh->d;
    s->scale = 1.0f / sqrtf((float)sh->d);
    s->causal = sh->causal;
    s->dropout = attn_dropout;
    s->seed = 5, s->offset = 1;
    const size_t rows = (size_t)sh->B * sh->T, cols = (size_t)sh->n * sh->d;
    r.km = mhe_malloc(rows * sizeof *r.km);
    for (size_t i = 0; i < rows; i++) r.km[i] = (i % (size_t)sh->T) < (size_t)sh->T - 7;  // some padding
    s->key_mask = sh->causal ? NULL : r.km;
    r.q = act_random(be, rows * cols, 1), r.k = act_random(be, rows * cols, 2), r.v = act_random(be, rows * cols, 3);
    r.dout = act_random(be, rows * cols, 4), r.out = act_random(be, rows * cols, 5);
    r.dq = act_random(be, rows * cols, 6), r.dk = act_random(be, rows * cols, 7), r.dv = act_random(be, rows * cols, 8);
    size_t saved_n, scratch_n;
    be->attention_sizes(be, s, &saved_n, &scratch_n);
    r.saved = be->alloc(be, saved_n * sizeof(float));
    r.scratch = be->alloc(be, scratch_n * sizeof(float) + 64);
    return r;
}
static void run_free(Backend *be, Run *r) {
    Act *a[] = {r->q, r->k, r->v, r->out, r->dout, r->dq, r->dk, r->dv};
    for (size_t i = 0; i < sizeof a / sizeof *a; i++) be->free(be, a[i]);
    be->free(be, r->saved);
    be->free(be, r->scratch);
    free(r->km);
}
// Process CPU seconds (every thread's): on a shared machine less swayed by other jobs than the
// wall clock, though it also counts OpenMP threads spinning while they wait.
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
// Wall seconds of forward + backward; *fwd: the forward's share.
static double run_once(Backend *be, Run *r, double *cpu, double *fwd) {
    const double t0 = omp_get_wtime(), c0 = cpu_now();
    be->attention_forward(be, &r->s, r->q, r->k, r->v, r->out, r->saved, r->scratch);
    *fwd = omp_get_wtime() - t0;
    be->attention_backward(be, &r->s, r->q, r->k, r->v, r->saved, r->dout, r->dq, r->dk, r->dv, NULL, NULL,
                           NULL, r->scratch);
    *cpu = cpu_now() - c0;
    return omp_get_wtime() - t0;
}
static double flops(const Shape *sh) {
    const double tt = (double)sh->B * sh->n * sh->T * sh->T, f = 2.0 * tt * 2 * sh->d;
    return 3.0 * f + 2.0 * tt * sh->d;  // forward, backward (as the profile counts them)
}
static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static Backend *make(const char *core, int bf16) {
    setenv("MHE_CPU_ATTENTION", core, 1);
    Backend *be = backend_cpu_create_for(0, bf16);
    unsetenv("MHE_CPU_ATTENTION");
    return be;
}

int main(int argc, char **argv) {
    int rounds = 7, quick = 0;
    const char *only_prec = NULL, *only_shape = NULL, *only_core = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prec") && i + 1 < argc) only_prec = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
        else if (!strcmp(argv[i], "--core") && i + 1 < argc) only_core = argv[++i];
        else if (!strcmp(argv[i], "--dropout") && i + 1 < argc) attn_dropout = (float)atof(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else {
            fprintf(stderr, "usage: bench_attention [--rounds R] [--quick] [--prec fp32|bf16] [--shape NAME] [--core fused|ref] [--dropout P]\n");
            return 2;
        }
    }
    if (rounds < 1 || rounds > 1000) rounds = 7;
    if (!(attn_dropout >= 0.0f && attn_dropout < 1.0f)) {
        fprintf(stderr, "bench_attention: --dropout must be in [0, 1)\n");
        return 2;
    }
    const Shape shapes[] = {{"tiny512", 8, 512, 8, 32, 0}, {"small", 32, 128, 8, 64, 0}, {"tiny512-causal", 8, 512, 8, 32, 1}};
    const Shape quick_shapes[] = {{"quick", 2, 96, 2, 16, 0}, {"quick-causal", 2, 96, 2, 16, 1}};
    const Shape *list = quick ? quick_shapes : shapes;
    const int nshapes = quick ? 2 : 3;
    FILE *la = fopen("/proc/loadavg", "r");
    char load[64] = "?";
    if (la) {
        if (!fgets(load, sizeof load, la)) strcpy(load, "?");
        fclose(la);
        load[strcspn(load, "\n")] = 0;
    }
    printf("bench_attention: threads=%d rounds=%d dropout=%g load=%s\n", omp_get_max_threads(), rounds, attn_dropout,
           load);
    for (int bf = 0; bf < 2; bf++) {
        if (only_prec && strcmp(only_prec, bf ? "bf16" : "fp32")) continue;
        Backend *be[2] = {make("fused", bf), make("ref", bf)};
        const double ceiling = quick ? peak_matmul_gflops(be[0], 256, 2) : peak_matmul_gflops(be[0], 2048, 3);
        for (int si = 0; si < nshapes; si++) {
            const Shape *sh = &list[si];
            if (only_shape && strcmp(only_shape, sh->name)) continue;
            Run r[2] = {run_make(be[0], sh), run_make(be[1], sh)};
            double *t[2] = {mhe_malloc((size_t)rounds * sizeof(double)), mhe_malloc((size_t)rounds * sizeof(double))};
            double *u[2] = {mhe_malloc((size_t)rounds * sizeof(double)), mhe_malloc((size_t)rounds * sizeof(double))};
            double *fw[2] = {mhe_malloc((size_t)rounds * sizeof(double)), mhe_malloc((size_t)rounds * sizeof(double))};
            double cpu, f;
            int on[2] = {1, 1};
            if (only_core) on[0] = !strcmp(only_core, "fused"), on[1] = !strcmp(only_core, "ref");
            for (int c = 0; c < 2; c++)
                if (on[c]) run_once(be[c], &r[c], &cpu, &f);  // primitives, caches
            for (int i = 0; i < rounds; i++)
                for (int c = 0; c < 2; c++) {
                    t[c][i] = on[c] ? run_once(be[c], &r[c], &cpu, &f) : 1.0;
                    u[c][i] = on[c] ? cpu : 1.0;
                    fw[c][i] = on[c] ? f : 1.0;
                }
            double g[2], cpu_ms[2];
            for (int c = 0; c < 2; c++) g[c] = flops(sh) / median(t[c], rounds) / 1e9, cpu_ms[c] = 1e3 * median(u[c], rounds);
            // A core not run (--core) prints no line, and the ratios to the reference need both.
            for (int c = 0; c < 2; c++) {
                if (!on[c]) continue;
                char sp[32] = "-", csp[32] = "-";
                if (on[0] && on[1]) {
                    snprintf(sp, sizeof sp, "%.2fx", g[c] / g[1]);
                    snprintf(csp, sizeof csp, "%.2fx", cpu_ms[1] / cpu_ms[c]);
                }
                printf("bench-attention: shape=%s B=%d T=%d n=%d d=%d prec=%s core=%s ms=%.2f gflops=%.1f "
                       "ceiling_gflops=%.1f of_ceiling=%.1f%% speedup=%s cpu_ms=%.2f cpu_speedup=%s fwd_ms=%.2f\n",
                       sh->name, sh->B, sh->T, sh->n, sh->d, bf ? "bf16" : "fp32", c ? "ref" : "fused",
                       1e3 * flops(sh) / g[c] / 1e9, g[c], ceiling, 100.0 * g[c] / ceiling, sp, cpu_ms[c], csp,
                       1e3 * median(fw[c], rounds));
            }
            for (int c = 0; c < 2; c++) run_free(be[c], &r[c]), free(t[c]), free(u[c]), free(fw[c]);
        }
        be[0]->destroy(be[0]);
        be[1]->destroy(be[1]);
    }
    return 0;
}
