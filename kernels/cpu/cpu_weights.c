// bf16 copies of the weights for bf16 products (ops.h weights_steady).
//
// A bf16 product rounds each fp32 operand (a weight) to bf16 first.  Rounded per call, every
// weight is read twice per step (the forward's x Wᵀ and the backward's dy W; the MLM head's tied
// word embedding, 15.6M floats in the bench's `small`, included) and copied into a per-thread
// buffer each time.  Here the copy is made at the first use after the model declares its
// parameters steady and reused until the declaration ends.
//
// Why a declared window rather than tracking writes: on the CPU backend parameter memory is host
// memory, and the trainer writes it from host code — its optimizer (optim_step), checkpoint
// loads, MPI broadcasts and ZeRO's all-gather — none of which passes through a backend op.  A
// version counter bumped by the backend's write ops would miss them all.  The model knows the one
// stretch in which the parameters cannot change (a training forward up to the end of its
// backward: the optimizer runs after it), so it says so, and each new window drops every copy
// (a new generation).  Outside a window nothing is cached, so a caller that does not declare one
// (a test calling ops directly, a new model entry point) gets per-call rounding: slower, never
// stale.  As a second line, the backend's own writes into the declared memory (upload, copy,
// zero, AdamW, axpy) end the window.
//
// Same bits as rounding per call: the copy is the same rounding into the same contiguous layout,
// so the product sees the same operand.  MHE_CPU_WEIGHT_CACHE=0 turns the cache off (the tests'
// per-call reference); MHE_CPU_WEIGHT_CHECK=1 compares every reused copy with a fresh rounding
// and aborts on a difference (a write inside a window that no one declared).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/env.h"
#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

typedef struct WeightCopy {
    const float *src;
    int rows, cols, ld;
    int prows;                      // rows of h: the copy's, then zero rows (a padded head's weight)
    uint16_t *h;                    // prows x cols, contiguous (ld = cols), as cpu_pack_bf16 writes
    unsigned long gen;              // the window it was made in
    struct WeightCopy *next;
} WeightCopy;

#define WEIGHT_BUCKETS 256
// A model has a few hundred weight operands at most; past this many something is keying copies
// on changing shapes, and rounding per call is the safe answer.
#define WEIGHT_COPIES_MAX 4096

struct CpuWeights {
    int enabled, check;
    pthread_mutex_t lock;           // copies are looked up from the attention core's threads too
    const char *lo, *hi;            // the steady memory; lo == hi: no window
    unsigned long gen;              // bumped by every window's start and end
    WeightCopy *buckets[WEIGHT_BUCKETS];
    int copies;
    long reused;                    // products that took a copy made earlier in its window
};

CpuWeights *cpu_weights_create(void) {
    CpuWeights *w = mhe_calloc(1, sizeof *w);
    w->enabled = mhe_env_flag("MHE_CPU_WEIGHT_CACHE", 1);
    w->check = mhe_env_flag("MHE_CPU_WEIGHT_CHECK", 0);
    pthread_mutex_init(&w->lock, NULL);
    return w;
}

void cpu_weights_destroy(CpuWeights *w) {
    if (!w) return;
    for (int b = 0; b < WEIGHT_BUCKETS; b++)
        for (WeightCopy *c = w->buckets[b], *next; c; c = next) {
            next = c->next;
            free(c->h);
            free(c);
        }
    pthread_mutex_destroy(&w->lock);
    free(w);
}

void cpu_weights_steady(CpuWeights *w, const float *p, size_t n) {
    pthread_mutex_lock(&w->lock);
    w->gen++;
    w->lo = (const char *)p;
    w->hi = p ? (const char *)(p + n) : w->lo;
    // A window over other memory (another model on the same backend, a freed one's address
    // reused): copies outside it are freed, so they never outnumber one model's weights.
    if (p)
        for (int b = 0; b < WEIGHT_BUCKETS; b++)
            for (WeightCopy **c = &w->buckets[b]; *c;) {
                const char *a = (const char *)(*c)->src;
                if (a >= w->lo && (const char *)((*c)->src + (size_t)((*c)->rows - 1) * (*c)->ld + (*c)->cols) <= w->hi) {
                    c = &(*c)->next;
                    continue;
                }
                WeightCopy *dead = *c;
                *c = dead->next;
                free(dead->h);
                free(dead);
                w->copies--;
            }
    pthread_mutex_unlock(&w->lock);
}

long cpu_weights_reused(const CpuWeights *w) { return w->reused; }

void cpu_weights_wrote(CpuWeights *w, const void *p, size_t bytes) {
    const char *a = p, *b = a + bytes;
    if (!bytes || b <= w->lo || a >= w->hi) return;
    cpu_weights_steady(w, NULL, 0);
}

static unsigned copy_hash(const float *src, int rows, int cols, int ld) {
    uint64_t h = (uint64_t)(uintptr_t)src * 0x9e3779b97f4a7c15ULL;
    h ^= ((uint64_t)rows << 40) ^ ((uint64_t)cols << 20) ^ (uint64_t)ld;
    h *= 0xbf58476d1ce4e5b9ULL;
    return (unsigned)(h >> 56) % WEIGHT_BUCKETS;
}

static void check_copy(const WeightCopy *c) {
    for (int r = 0; r < c->rows; r++)
        for (int k = 0; k < c->cols; k++)
            if (c->h[(size_t)r * c->cols + k] != to_bf16(c->src[(size_t)r * c->ld + k]))
                mhe_fatal("cpu weight cache: the bf16 copy of %dx%d floats at %p is stale at (%d, %d): "
                          "parameter memory changed inside a weights_steady window",
                          c->rows, c->cols, (const void *)c->src, r, k);
}

const uint16_t *cpu_weights_bf16_padded(CpuWeights *w, const float *x, int rows, int cols, int ld, int prows) {
    // Unlocked first look: most fp32 operands outside a window or outside the steady memory
    // (the attention core's per-thread sums) are turned away without the lock.
    const char *a = (const char *)x, *b = (const char *)(x + (size_t)(rows - 1) * ld + cols);
    if (!w->enabled || a < w->lo || b > w->hi) return NULL;
    pthread_mutex_lock(&w->lock);
    if (a < w->lo || b > w->hi) {  // the window changed meanwhile
        pthread_mutex_unlock(&w->lock);
        return NULL;
    }
    const unsigned hb = copy_hash(x, rows, cols, ld);
    WeightCopy *c = w->buckets[hb];
    while (c && !(c->src == x && c->rows == rows && c->cols == cols && c->ld == ld)) c = c->next;
    if (!c) {
        if (w->copies >= WEIGHT_COPIES_MAX) {
            pthread_mutex_unlock(&w->lock);
            return NULL;
        }
        c = mhe_calloc(1, sizeof *c);
        *c = (WeightCopy){.src = x, .rows = rows, .cols = cols, .ld = ld, .gen = w->gen - 1, .next = w->buckets[hb]};
        w->buckets[hb] = c;
        w->copies++;
    }
    if (c->prows < prows || !c->h) {
        // One copy serves the padded product and the unpadded ones of the same weight (the tied
        // word embedding: the head's forward, its dx, the embedding); grown, it is made again.
        free(c->h);
        c->prows = prows > rows ? prows : rows;
        c->h = cpu_host_alloc((size_t)c->prows * cols * 2);
        c->gen = w->gen - 1;
    }
    if (c->gen != w->gen) {
        // Outside a parallel region the rounding is split over the threads; inside one (an
        // attention product) it runs on the calling thread while the others wait on the lock.
        cpu_pack_bf16(x, rows, cols, ld, c->h);
        memset(c->h + (size_t)rows * cols, 0, (size_t)(c->prows - rows) * cols * sizeof *c->h);
        c->gen = w->gen;
    } else {
        w->reused++;
        if (w->check) check_copy(c);
    }
    pthread_mutex_unlock(&w->lock);
    return c->h;
}

const uint16_t *cpu_weights_bf16(CpuWeights *w, const float *x, int rows, int cols, int ld) {
    return cpu_weights_bf16_padded(w, x, rows, cols, ld, rows);
}
