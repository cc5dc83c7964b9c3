// The fixture of the CUDA parity tests (test_cuda_parity.c: every op but attention; test_cuda_mhe_ops.c: mhe_mul's glue ops;
// test_cuda_attention.c: the attention core): a CPU and a CUDA backend (the emulation), buffers
// mirrored on both, the norm-wise comparison and the macros running one op on both sides.
#ifndef MHE_TESTS_CUDA_PARITY_H
#define MHE_TESTS_CUDA_PARITY_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/backend_info.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"

typedef struct {
    Backend *cpu, *gpu;
    uint64_t rng;
    int gpu_bf16;  // the CUDA backend runs in bf16 mode
} Fix;

// A buffer mirrored on both backends, with a host copy of its initial contents.  An activation
// (act) is held on the CUDA side in its Backend.act type (bf16 with bf16 activations: g then
// points at bf16 storage, passed on only through DA).
typedef struct {
    size_t n;
    float *host, *c, *g;
    int act;
} Buf;

static inline float uniform(Fix *f) {
    f->rng = f->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((f->rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static inline Buf buf_new(Fix *f, size_t n, float lo, float hi) {
    Buf b = {n, malloc((n ? n : 1) * sizeof(float)), NULL, NULL, 0};
    for (size_t i = 0; i < n; i++) b.host[i] = lo + (hi - lo) * 0.5f * (uniform(f) + 1.0f);
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * sizeof(float));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload(f->gpu, b.g, b.host, n * sizeof(float));
    return b;
}
static inline Buf buf_rand(Fix *f, size_t n) { return buf_new(f, n, -1.0f, 1.0f); }

// x rounded to the nearest bf16, ties to even.
static inline float parity_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}
// An activation: with bf16 activations on the CUDA side its values are rounded to bf16 first, so
// both backends start from the same ones (the same draws as buf_new either way).
static inline Buf act_new(Fix *f, size_t n, float lo, float hi) {
    Buf b = {n, malloc((n ? n : 1) * sizeof(float)), NULL, NULL, 1};
    const int bf16 = f->gpu->act == DT_BF16;
    for (size_t i = 0; i < n; i++) {
        b.host[i] = lo + (hi - lo) * 0.5f * (uniform(f) + 1.0f);
        if (bf16) b.host[i] = parity_bf16_round(b.host[i]);
    }
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * dtype_size(f->gpu->act));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload_act(f->gpu, (Act *)b.g, b.host, n);
    return b;
}
static inline Buf act_rand(Fix *f, size_t n) { return act_new(f, n, -1.0f, 1.0f); }

static inline void buf_free(Fix *f, Buf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
    free(b->host);
}

typedef struct {
    int32_t *c, *g;
} IBuf;

static inline IBuf ibuf_new(Fix *f, const int32_t *host, size_t n) {
    IBuf b = {f->cpu->alloc(f->cpu, n * 4), f->gpu->alloc(f->gpu, n * 4)};
    f->cpu->upload(f->cpu, b.c, host, n * 4);
    f->gpu->upload(f->gpu, b.g, host, n * 4);
    return b;
}
static inline void ibuf_free(Fix *f, IBuf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
}

// -1: expect_close asserts.  >= 0: it counts the failures here instead (each still printed), so a
// test can report every case of a table before it fails.
static int g_parity_soft_failures = -1;

// Compares the two copies; returns the norm-wise relative error after asserting it.
static inline double expect_close(Fix *f, const Buf *b, double tol, const char *what) {
    float *x = malloc(b->n * sizeof(float)), *y = malloc(b->n * sizeof(float));
    f->cpu->download(f->cpu, x, b->c, b->n * sizeof(float));
    if (b->act)
        f->gpu->download_act(f->gpu, y, (const Act *)b->g, b->n);
    else
        f->gpu->download(f->gpu, y, b->g, b->n * sizeof(float));
    double mx = 1e-3, err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (fabs(x[i]) > mx) mx = fabs(x[i]);
        double e = fabs((double)x[i] - y[i]);
        if (!(e <= err)) {  // also catches NaN
            err = isnan(e) ? INFINITY : e;
            worst = i;
        }
    }
    double rel = err / mx;
    if (!(rel <= tol))
        print_error("%s: relative error %.3g > %.3g (element %zu: cpu %.8g cuda %.8g)\n", what, rel,
                    tol, worst, b->n ? x[worst] : 0.0, b->n ? y[worst] : 0.0);
    free(x);
    free(y);
    if (g_parity_soft_failures >= 0) g_parity_soft_failures += !(rel <= tol);
    else assert_true(rel <= tol);
    return rel;
}

// The core's per-head query scale (AttnShape.q_scale: s has q_heads 1, its shared q ldq wide)
// on the CUDA side against the CPU backend's attention on the materialised heads
// Q_h = head_expand(q, q_scale[h]) (the CPU has no q_scale): out, the per-head dQ, dK, dV and the
// output scale/shift gradients, each within 1e-2.  Each backend draws its own dropout stream
// (DESIGN.md §1), so s.dropout > 0 compares only where both draw the CPU's (the own cores).
static inline void parity_attention_q_scale(Fix *f, const AttnShape *s, const char *label) {
    const int N = s->B * s->T, n = s->n_heads, d = s->qk_dim, nd = n * d, ldq = s->ldq;
    Buf q = act_rand(f, (size_t)N * ldq), k = act_rand(f, (size_t)N * s->ldk), v = act_rand(f, (size_t)N * s->ldv),
        qs = buf_rand(f, nd), osc = buf_rand(f, nd), osh = buf_rand(f, nd), dout = act_rand(f, (size_t)N * nd),
        out = act_rand(f, (size_t)N * nd), dq = act_rand(f, (size_t)N * nd), dk = act_rand(f, (size_t)N * s->ldk),
        dv = act_rand(f, (size_t)N * s->ldv), dosc = buf_rand(f, nd), dosh = buf_rand(f, nd);
    for (int i = 0; i < nd; i++) qs.host[i] = 1.0f + 0.5f * qs.host[i];
    f->cpu->upload(f->cpu, qs.c, qs.host, nd * sizeof(float));
    f->gpu->upload(f->gpu, qs.g, qs.host, nd * sizeof(float));
    AttnShape c = *s, g = *s;
    c.q_heads = n;
    c.ldq = nd;
    c.out_scale = osc.c;
    c.out_shift = osh.c;
    g.q_scale = qs.g;
    g.out_scale = osc.g;
    g.out_shift = osh.g;
    float *qh = f->cpu->alloc(f->cpu, (size_t)N * nd * sizeof(float));
    f->cpu->head_expand(f->cpu, (const Act *)(q.c), ldq, qs.c, NULL, N, n, d, (Act *)(qh));
    size_t sv[2], sc[2];
    f->cpu->attention_sizes(f->cpu, &c, &sv[0], &sc[0]);
    f->gpu->attention_sizes(f->gpu, &g, &sv[1], &sc[1]);
    float *saved[2] = {f->cpu->alloc(f->cpu, sv[0] * 4), f->gpu->alloc(f->gpu, sv[1] * 4)};
    float *scratch[2] = {f->cpu->alloc(f->cpu, sc[0] * 4), f->gpu->alloc(f->gpu, sc[1] * 4)};
#define PQ_C(b) ((Act *)(b).c)
#define PQ_G(b) ((Act *)(b).g)
    f->cpu->attention_forward(f->cpu, &c, (const Act *)qh, PQ_C(k), PQ_C(v), PQ_C(out), saved[0], scratch[0]);
    f->cpu->attention_backward(f->cpu, &c, (const Act *)qh, PQ_C(k), PQ_C(v), saved[0], PQ_C(dout), PQ_C(dq),
                               PQ_C(dk), PQ_C(dv), NULL, dosc.c, dosh.c, scratch[0]);
    f->gpu->attention_forward(f->gpu, &g, PQ_G(q), PQ_G(k), PQ_G(v), PQ_G(out), saved[1], scratch[1]);
    f->gpu->attention_backward(f->gpu, &g, PQ_G(q), PQ_G(k), PQ_G(v), saved[1], PQ_G(dout), PQ_G(dq), PQ_G(dk),
                               PQ_G(dv), NULL, dosc.g, dosh.g, scratch[1]);
#undef PQ_C
#undef PQ_G
    char what[160];
    const char *names[] = {"out", "per-head dq", "dk", "dv", "dout_scale", "dout_shift"};
    const Buf *bufs[] = {&out, &dq, &dk, &dv, &dosc, &dosh};
    for (int i = 0; i < 6; i++) {
        snprintf(what, sizeof what, "%s: %s", label, names[i]);
        expect_close(f, bufs[i], 1e-2, what);
    }
    f->cpu->free(f->cpu, qh);
    f->cpu->free(f->cpu, saved[0]);
    f->cpu->free(f->cpu, scratch[0]);
    f->gpu->free(f->gpu, saved[1]);
    f->gpu->free(f->gpu, scratch[1]);
    Buf *all[] = {&q, &k, &v, &qs, &osc, &osh, &dout, &out, &dq, &dk, &dv, &dosc, &dosh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

// Threads of the CPU reference.  Under ThreadSanitizer (the `tsan` tests) one: its OpenMP
// threads synchronise inside libgomp, which TSan cannot see, and are not what the tests audit.
#if defined(__SANITIZE_THREAD__)
#define CPU_REF_THREADS 1
#else
#define CPU_REF_THREADS 2
#endif

static inline int setup_fp32(void **state) {
    Fix *f = calloc(1, sizeof *f);
    f->cpu = backend_cpu_create(CPU_REF_THREADS);
    f->gpu = backend_cuda_create(0, 0);
    f->rng = 12345;
    *state = f;
    return 0;
}
// bf16 mode: bf16 activations (Backend.act DT_BF16; buffers made by act_new hold bf16 on the CUDA
// side), fp32 weights read by the matmuls from their bf16 copies.
static inline int setup_bf16(void **state) {
    setup_fp32(state);
    Fix *f = *state;
    f->gpu->destroy(f->gpu);
    f->gpu = backend_cuda_create(0, 1);
    f->gpu_bf16 = 1;
    return 0;
}
static inline int teardown(void **state) {
    Fix *f = *state;
    f->cpu->destroy(f->cpu);
    f->gpu->destroy(f->gpu);
    free(f);
    return 0;
}

#define BOTH(f, op, ...)                                   \
    do {                                                   \
        (f)->cpu->op((f)->cpu, __VA_ARGS__);               \
        (f)->gpu->op((f)->gpu, __VA_ARGS__);               \
    } while (0)
// Arguments that differ per backend are written C(x) and picked by the macro below.
#define PAIR(f, op, ...)                                   \
    do {                                                   \
        {                                                  \
            int side_ = 0;                                 \
            Backend *be_ = (f)->cpu;                       \
            be_->op(be_, __VA_ARGS__);                     \
        }                                                  \
        {                                                  \
            int side_ = 1;                                 \
            Backend *be_ = (f)->gpu;                       \
            be_->op(be_, __VA_ARGS__);                     \
        }                                                  \
    } while (0)
#define D(b) (side_ ? (b).g : (b).c)
// The same buffer as an activation (the CPU backends here store activations as fp32; the CUDA
// side as act_new made it, or fp32 memory in fp32 mode).
#define DA(b) ((Act *)D(b))

#endif
