// The fixture of the CUDA parity tests (test_cuda_parity.c: every op but attention;
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
