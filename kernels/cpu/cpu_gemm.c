// Every matmul of the CPU backend goes through cpu_gemm: oneDNN's matmul primitive (its C API),
// fp32 or bf16 x bf16 -> fp32.  oneDNN picks the ISA at run time (brgemm AVX-512, AVX2, ...),
// so one binary is right on any x86-64.  Primitives are created once per shape and cached:
// creation costs tens of microseconds to milliseconds (kernel JIT), execution of the small
// per-head products of attention only a few microseconds.
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_amx.h"
#include "kernels/cpu/cpu_amx_linear.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_bf16.h"

#define DNNL_OK(call)                                                                       \
    do {                                                                                    \
        dnnl_status_t st_ = (call);                                                         \
        if (st_ != dnnl_success) mhe_fatal("oneDNN: %s failed (status %d)", #call, (int)st_); \
    } while (0)

// One cached primitive: the key is everything its creation depends on.
typedef struct {
    int ta, tb, M, N, K, lda, ldb, ldc, bf16, cbf16, bias;
    float alpha, beta;
} GemmKey;

typedef struct GemmEntry {
    GemmKey key;
    dnnl_primitive_t prim;          // NULL: oneDNN has no kernel for it (bf16 on an old CPU)
    dnnl_memory_t *mem;             // per thread: src, weights, dst, scratchpad (NULL: none), bias
    void **scratch;                 // per thread scratchpad buffers (user scratchpad mode)
    size_t scratch_bytes;
    struct GemmEntry *next;
} GemmEntry;

#define GEMM_BUCKETS 1024
#define MEMS 5                      // memory objects per thread and entry
// The MLM head's row count changes from batch to batch (the scored positions), so shapes keep
// arriving during training; past this many primitives the cache is emptied (outside parallel
// regions only, where no other thread can be executing one) and refills with the live shapes.
#define GEMM_CACHE_MAX 384
struct CpuGemm {
    dnnl_engine_t engine;
    dnnl_stream_t *streams;         // one per thread: executions from parallel loops never share one
    int threads;
    int native_bf16;                // the CPU has bf16 dot-product instructions
    int amx;                        // bf16 products of activations on AMX tiles (cpu_amx_linear.h)
    pthread_mutex_t lock;           // guards the cache's buckets (lookups are cheap next to a product)
    GemmEntry *buckets[GEMM_BUCKETS];
    int entries;
    uint16_t **bf16_buf;            // per thread operand copies rounded to bf16 (grow-only)
    size_t *bf16_elems;
    CpuWeights *weights;            // bf16 copies of steady weights (cpu_weights.c)
    int tn_chunked;                 // padded copies (tn_wins, pad_b_wins): -1 auto (oneDNN at avx2), 0 off,
                                    // 1 always (MHE_CPU_GEMM_TN)
    float *tn_buf;                  // the padded copies (grow-only)
    size_t tn_elems;
};

static int key_eq(const GemmKey *a, const GemmKey *b) { return memcmp(a, b, sizeof *a) == 0; }
static unsigned key_hash(const GemmKey *k) {
    const unsigned char *p = (const unsigned char *)k;
    unsigned h = 2166136261u;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 16777619u;
    return h % GEMM_BUCKETS;
}

CpuGemm *cpu_gemm_create(int threads) {
    CpuGemm *g = mhe_calloc(1, sizeof *g);
    g->threads = threads;
    DNNL_OK(dnnl_engine_create(&g->engine, dnnl_cpu, 0));
    g->streams = mhe_calloc((size_t)threads, sizeof *g->streams);
    for (int t = 0; t < threads; t++)
        DNNL_OK(dnnl_stream_create(&g->streams[t], g->engine, dnnl_stream_default_flags));
    pthread_mutex_init(&g->lock, NULL);
    g->bf16_buf = mhe_calloc((size_t)threads, sizeof *g->bf16_buf);
    g->bf16_elems = mhe_calloc((size_t)threads, sizeof *g->bf16_elems);
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    g->native_bf16 = isa == dnnl_cpu_isa_avx512_core_bf16 || isa == dnnl_cpu_isa_avx512_core_amx;
    // The padded copies (tn_wins, pad_b_wins): measured only where oneDNN's fp32 matmul is its
    // AVX2 jit sgemm; at avx512_core and up (brgemm) those products run at full rate.
    const char *tn = getenv("MHE_CPU_GEMM_TN");
    if (tn && strcmp(tn, "0") && strcmp(tn, "1")) mhe_fatal("MHE_CPU_GEMM_TN=%s: expected 0 or 1", tn);
    g->tn_chunked = tn ? tn[0] == '1' : isa == dnnl_cpu_isa_avx2 || isa == dnnl_cpu_isa_avx2_vnni ? -1 : 0;
    g->weights = cpu_weights_create();
    return g;
}

static void free_entries(CpuGemm *g) {
    for (int b = 0; b < GEMM_BUCKETS; b++) {
        for (GemmEntry *e = g->buckets[b], *next; e; e = next) {
            next = e->next;
            for (int t = 0; t < g->threads; t++) {
                for (int i = 0; i < MEMS; i++)
                    if (e->mem[t * MEMS + i]) dnnl_memory_destroy(e->mem[t * MEMS + i]);
                free(e->scratch[t]);
            }
            if (e->prim) dnnl_primitive_destroy(e->prim);
            free(e->mem);
            free(e->scratch);
            free(e);
        }
        g->buckets[b] = NULL;
    }
    g->entries = 0;
}

void cpu_gemm_destroy(CpuGemm *g) {
    if (!g) return;
    free_entries(g);
    cpu_weights_destroy(g->weights);
    for (int t = 0; t < g->threads; t++) {
        dnnl_stream_destroy(g->streams[t]);
        free(g->bf16_buf[t]);
    }
    free(g->tn_buf);
    dnnl_engine_destroy(g->engine);
    pthread_mutex_destroy(&g->lock);
    free(g->streams);
    free(g->bf16_buf);
    free(g->bf16_elems);
    free(g);
}

int cpu_gemm_native_bf16(const CpuGemm *g) { return g->native_bf16; }

void backend_cpu_library(char *buf, size_t len) {
    static const struct {
        dnnl_cpu_isa_t isa;
        const char *name;
    } names[] = {{dnnl_cpu_isa_sse41, "sse41"},
                 {dnnl_cpu_isa_avx, "avx"},
                 {dnnl_cpu_isa_avx2, "avx2"},
                 {dnnl_cpu_isa_avx2_vnni, "avx2_vnni"},
                 {dnnl_cpu_isa_avx512_core, "avx512_core"},
                 {dnnl_cpu_isa_avx512_core_vnni, "avx512_core_vnni"},
                 {dnnl_cpu_isa_avx512_core_bf16, "avx512_core_bf16"},
                 {dnnl_cpu_isa_avx512_core_amx, "avx512_core_amx"}};
    const dnnl_version_t *v = dnnl_version();
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    const char *name = NULL;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (names[i].isa == isa) name = names[i].name;
    if (name) snprintf(buf, len, "oneDNN %d.%d.%d %s", v->major, v->minor, v->patch, name);
    else snprintf(buf, len, "oneDNN %d.%d.%d isa 0x%x", v->major, v->minor, v->patch, (unsigned)isa);
}
void cpu_gemm_use_amx(CpuGemm *g, int on) { g->amx = on && cpu_amx_available(); }
CpuWeights *cpu_gemm_weights(CpuGemm *g) { return g->weights; }

// Row-major op(X) of `rows` x `cols` stored with leading dimension ld (transposed: stored
// [cols, rows]): strides of the logical matrix.
static void plain_md(dnnl_memory_desc_t *md, int rows, int cols, int trans, int ld,
                     dnnl_data_type_t dt) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    DNNL_OK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static GemmEntry *create_entry(CpuGemm *g, const GemmKey *k) {
    GemmEntry *e = mhe_calloc(1, sizeof *e);
    e->key = *k;
    e->mem = mhe_calloc((size_t)g->threads * MEMS, sizeof *e->mem);
    e->scratch = mhe_calloc((size_t)g->threads, sizeof *e->scratch);
    const dnnl_data_type_t in = k->bf16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t a, b, c;
    plain_md(&a, k->M, k->K, k->ta, k->lda, in);
    plain_md(&b, k->K, k->N, k->tb, k->ldb, in);
    plain_md(&c, k->M, k->N, 0, k->ldc, k->cbf16 ? dnnl_bf16 : dnnl_f32);
    // Bias [1, N] fp32, added to the fp32 accumulators before they are stored (one pass less).
    dnnl_memory_desc_t bias;
    plain_md(&bias, 1, k->N, 0, k->N, dnnl_f32);
    dnnl_matmul_desc_t md;
    DNNL_OK(dnnl_matmul_desc_init(&md, &a, &b, k->bias ? &bias : NULL, &c));
    dnnl_primitive_attr_t attr;
    DNNL_OK(dnnl_primitive_attr_create(&attr));
    // User scratchpad: each thread passes its own, so one primitive may run in several
    // threads at once (attention runs per-head products inside a parallel loop).
    DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->alpha != 1.0f) DNNL_OK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha));
    if (k->beta != 0.0f) {
        // C = alpha AB + beta C: the sum post-op reads C before the primitive overwrites it.
        dnnl_post_ops_t po;
        DNNL_OK(dnnl_post_ops_create(&po));
        DNNL_OK(dnnl_post_ops_append_sum(po, k->beta));
        DNNL_OK(dnnl_primitive_attr_set_post_ops(attr, po));
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, g->engine, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success) {
        if (!k->bf16) mhe_fatal("oneDNN: no fp32 matmul for %dx%dx%d (status %d)", k->M, k->N, k->K, (int)st);
        return e;  // bf16 without a kernel: the caller computes the rounded operands in fp32
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    DNNL_OK(dnnl_primitive_create(&e->prim, pd));
    for (int t = 0; t < g->threads; t++) {
        dnnl_memory_t *m = e->mem + t * MEMS;
        DNNL_OK(dnnl_memory_create(&m[0], &a, g->engine, DNNL_MEMORY_NONE));
        DNNL_OK(dnnl_memory_create(&m[1], &b, g->engine, DNNL_MEMORY_NONE));
        DNNL_OK(dnnl_memory_create(&m[2], &c, g->engine, DNNL_MEMORY_NONE));
        if (k->bias) DNNL_OK(dnnl_memory_create(&m[4], &bias, g->engine, DNNL_MEMORY_NONE));
        if (e->scratch_bytes) {
            e->scratch[t] = aligned_alloc(64, (e->scratch_bytes + 63) / 64 * 64);
            if (!e->scratch[t]) mhe_fatal("out of memory allocating a oneDNN scratchpad");
            DNNL_OK(dnnl_memory_create(&m[3], sp, g->engine, e->scratch[t]));
        }
    }
    dnnl_primitive_desc_destroy(pd);
    return e;
}

static GemmEntry *lookup(CpuGemm *g, const GemmKey *k) {
    const unsigned h = key_hash(k);
    pthread_mutex_lock(&g->lock);
    GemmEntry *e = g->buckets[h];
    while (e && !key_eq(&e->key, k)) e = e->next;
    if (!e) {
        if (g->entries >= GEMM_CACHE_MAX && !omp_in_parallel()) free_entries(g);
        g->entries++;
        e = create_entry(g, k);
        e->next = g->buckets[h];
        g->buckets[h] = e;
    }
    pthread_mutex_unlock(&g->lock);
    return e;
}

// X stored as `rows` rows of `cols` values, leading dimension ld -> contiguous bf16.  Split
// over the threads when large (a serial pass over an activation would idle the other cores);
// inside a parallel loop (attention) the pragma's region runs on the calling thread.
// This file is built once, at the program's x86-64-v2 (cpu_isa.h), so the weights' per-step
// rounding (cpu_weights.c: every weight once a step) ran 4 floats a vector; the loader picks the
// widest of these clones the CPU has (the same bits: the rounding is integer arithmetic).
#define PACK_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
PACK_CLONES static void pack_rows(const float *x, int r0, int r1, int cols, int ld, uint16_t *out) {
    for (int r = r0; r < r1; r++) {
        const float *xr = x + (size_t)r * ld;
        uint16_t *o = out + (size_t)r * cols;
#pragma omp simd
        for (int c = 0; c < cols; c++) o[c] = to_bf16(xr[c]);
    }
}
void cpu_pack_bf16(const float *x, int rows, int cols, int ld, uint16_t *out) {
    // Small operands (attention's per-head ones) without an OpenMP region: even one that the
    // if clause keeps on one thread costs a nested team's set-up, a microsecond or more.
    if ((size_t)rows * cols < (1u << 17)) {
        pack_rows(x, 0, rows, cols, ld, out);
        return;
    }
    // Whole blocks of rows per thread: a row of a narrow weight is a few hundred bytes.
    const int block = 64;
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < rows; r += block) pack_rows(x, r, r + block < rows ? r + block : rows, cols, ld, out);
}

void cpu_round_bf16(const float *x, float *out, size_t n) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = from_bf16(to_bf16(x[i]));
}

static uint16_t *thread_bf16(CpuGemm *g, int t, size_t elems) {
    if (elems > g->bf16_elems[t]) {
        free(g->bf16_buf[t]);
        g->bf16_buf[t] = cpu_host_alloc(elems * 2);
        g->bf16_elems[t] = elems;
    }
    return g->bf16_buf[t];
}

static void execute(CpuGemm *g, GemmEntry *e, int t, const void *A, const void *B,
                    const float *bias, void *C) {
    dnnl_memory_t *m = e->mem + t * MEMS;
    DNNL_OK(dnnl_memory_set_data_handle(m[0], (void *)A));
    DNNL_OK(dnnl_memory_set_data_handle(m[1], (void *)B));
    DNNL_OK(dnnl_memory_set_data_handle(m[2], C));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, m[0]}, {DNNL_ARG_WEIGHTS, m[1]}, {DNNL_ARG_DST, m[2]}};
    int na = 3;
    if (m[3]) args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, m[3]};
    if (bias) {
        DNNL_OK(dnnl_memory_set_data_handle(m[4], (void *)bias));
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, m[4]};
    }
    DNNL_OK(dnnl_primitive_execute(e->prim, g->streams[t], na, args));
    DNNL_OK(dnnl_stream_wait(g->streams[t]));
}

// bf16 rows (leading dimension ld) -> contiguous fp32.
static void bf16_to_f32(const uint16_t *h, int rows, int cols, int ld, float *out) {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= (1u << 17))
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) out[(size_t)r * cols + c] = from_bf16(h[(size_t)r * ld + c]);
}

// The weight gradients (dW = dy^T x, the sum over the tokens): oneDNN 2.6's transposed-A bf16
// matmul ran them at 1,100-1,550 GFLOP/s on an AMX Xeon where its x W^T ran at ~2,000.
int cpu_gemm_weight_grad(CpuGemm *g, int M, int N, int K, const uint16_t *dy, int ldy, const uint16_t *x, int ldx,
                         float beta, float *dW, int ldw, float *db, int db_store) {
    // M off the 16 grid (the head's vocabulary) where dy's rows are padded that far (ops_head_ld).
    if (!g->amx || N % 16 || ldy < (M + 15) / 16 * 16 || K < 64 || (beta != 0.0f && beta != 1.0f) ||
        omp_in_parallel())
        return 0;
    uint16_t *scratch = thread_bf16(g, 0, cpu_amx_gemm_tn_scratch(M, N, g->threads));
    cpu_amx_gemm_tn(M, N, K, dy, (size_t)ldy, x, (size_t)ldx, beta != 0.0f, dW, (size_t)ldw, db, !db_store, scratch,
                    g->threads);
    return 1;
}

// Transposed-A fp32 products (the weight gradients dW = dyᵀ x, summed over the tokens) on
// oneDNN 2.6's AVX2 jit sgemm ran at 40-50 GFLOP/s a core (Zen 4, ONEDNN_MAX_CPU_ISA=AVX2) where
// the smaller side is at most 256 and the wider operand's rows lie a multiple of 2 KiB apart
// (1024 x 256, 256 x 1024, 8192 x 256, ... with K = 4,096 or 608), and at 66-76 at 512 x 512.
// The same product over copies whose rows lie 16 floats further apart ran at 106-110: the
// slowness is the operands' row stride, not the transposed layout (K-chunked transposes into
// x Wᵀ's layout, the path before this one, reached 80-89 with their own time included).  So the
// product runs as a sum over chunks of 256 tokens, each chunk's rows of both operands copied
// (whole rows, memcpy) into a scratch with padded row strides (pad_ld) that stays in L2 for the
// chunk's product.  Measured on Zen 4 at ONEDNN_MAX_CPU_ISA=AVX2, one thread's CPU time, operands
// evicted first, the copies' time included (tests/bench/bench_weight_grads, 2026-12-05, load
// ~1.4): 95-101 GFLOP/s on those shapes (1,024 x 256, 256 x 1,024, 8,192 x 256, 512 x 512).  On
// the others of the bench's models, whose plain products run at 98-105, it was 0.95-1.02x of
// plain (a standalone oneDNN program had shown 1.03-1.07x there), so the rule keeps to the
// shapes and strides that were slow.
enum { TN_KC = 256 };
static int tn_wins(const CpuGemm *g, int M, int N, int K, int lda, int ldb) {
    if (g->tn_chunked >= 0) return g->tn_chunked;
    const int lo = M < N ? M : N, hi = M < N ? N : M, ld_wide = M < N ? ldb : lda;
    if (K < 128 || (double)M * N * K < (double)(1 << 24)) return 0;
    return (lo <= 256 && hi >= 1024 && ld_wide % 512 == 0) || (lo == 512 && hi == 512 && lda % 512 == 0 && ldb % 512 == 0);
}
// A row stride for a copy of w floats: whole 64-byte lines, and off every multiple of 512 bytes
// (the slow strides above were 1, 2, 4 and 32 KiB; 3 KiB ran at full rate, so the rule is wider
// than it need be).
static int pad_ld(int w) {
    const int ld = (w + 15) / 16 * 16;
    return ld % 128 == 0 ? ld + 16 : ld;
}
// rows x cols of x (row stride ld) into out (row stride ldo), split over the threads when large.
static void copy_rows(const float *x, int rows, int cols, int ld, float *out, int ldo) {
#pragma omp parallel for schedule(static) if ((size_t)rows * cols >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < rows; r++) memcpy(out + (size_t)r * ldo, x + (size_t)r * ld, (size_t)cols * sizeof *out);
}

// The padded copies' scratch, grown to at least n floats (outside parallel regions only).
static float *tn_scratch(CpuGemm *g, size_t n) {
    if (n > g->tn_elems) {
        free(g->tn_buf);
        g->tn_buf = cpu_host_alloc(n * sizeof *g->tn_buf);
        g->tn_elems = n;
    }
    return g->tn_buf;
}

// C = alpha Aᵀ B + beta C (A [K, M], B [K, N]) as a sum over K chunks of the padded copies'
// products, the first chunk with beta, the rest added (oneDNN's sum post-op).  A fixed chunking:
// the same shape sums in the same order every run.
static void gemm_tn_chunked(CpuGemm *g, int M, int N, int K, float alpha, const float *A, int lda,
                            const float *B, int ldb, float beta, float *C, int ldc) {
    const int lpa = pad_ld(M), lpb = pad_ld(N);
    float *ap = tn_scratch(g, ((size_t)lpa + lpb) * TN_KC), *bp = ap + (size_t)lpa * TN_KC;
    for (int k0 = 0; k0 < K; k0 += TN_KC) {
        const int kc = K - k0 < TN_KC ? K - k0 : TN_KC;
        copy_rows(A + (size_t)k0 * lda, kc, M, lda, ap, lpa);
        copy_rows(B + (size_t)k0 * ldb, kc, N, ldb, bp, lpb);
        GemmKey k = {1, 0, M, N, kc, lpa, lpb, ldc, 0, 0, 0, alpha, k0 ? 1.0f : beta};
        execute(g, lookup(g, &k), 0, ap, bp, NULL, C);
    }
}

// The other products the same row strides slowed at oneDNN's AVX2 level: A B and A Bᵀ with a
// narrow result (N <= 256) over a long sum (K >= 768) where B's rows lie a multiple of 512 bytes
// apart, i.e. tiny's FFN down-projection (4,096 x 256 x 1,024, Bᵀ 4 KiB rows), its up-projection's
// and the QKV projection's dx (B's rows 1 KiB apart) and the head's dx (608 x 256 x 8,192): 96-104
// -> 103-113 GFLOP/s with B read from a copy whose rows are padded (a standalone oneDNN program,
// one thread's CPU time, operands evicted first, Zen 4, 2026-12-04).  B is a weight there (K x N,
// at most 1/M of the product's traffic), so the copy is made per call.  Wider results (every
// product of small, the other projections of tiny) ran at 106-112 either way.
static int pad_b_wins(const CpuGemm *g, int ta, int M, int N, int K, int ldb) {
    if (g->tn_chunked >= 0) return g->tn_chunked && !ta;
    return !ta && N <= 256 && K >= 768 && M >= 512 && ldb % 128 == 0;
}

// An fp32 product on thread t: one cached primitive, or at oneDNN's AVX2 level a transposed-A
// product in K chunks over padded copies, or a product over a padded copy of B, where that
// measured faster (tn_wins, pad_b_wins).
static void gemm_f32(CpuGemm *g, int t, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, const float *bias, float beta, float *C, int ldc) {
    // Outside parallel regions only: one scratch, and a product inside one (the attention core's
    // per-block ones) is small.
    if (g->tn_chunked && !omp_in_parallel()) {
        if (ta && !tb && !bias && tn_wins(g, M, N, K, lda, ldb)) {
            gemm_tn_chunked(g, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
        if (pad_b_wins(g, ta, M, N, K, ldb)) {
            const int rows = tb ? N : K, cols = tb ? K : N, ld = pad_ld(cols);
            float *bp = tn_scratch(g, (size_t)rows * ld);
            copy_rows(B, rows, cols, ldb, bp, ld);
            B = bp, ldb = ld;
        }
    }
    GemmKey k = {ta, tb, M, N, K, lda, ldb, ldc, 0, 0, bias != NULL, alpha, beta};
    execute(g, lookup(g, &k), t, A, B, bias, C);
}

void cpu_gemm_ex(CpuGemm *g, int bf16, int ta, int tb, int M, int N, int K, float alpha,
                 CpuOperand A, CpuOperand B, const float *bias, float beta, CpuResult C) {
    if (M <= 0 || N <= 0) return;
    if ((A.h || B.h || C.h) && !bf16) mhe_fatal("cpu_gemm: a bf16 operand in an fp32 product");
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                const size_t at = (size_t)i * C.ld + j;
                const float old = beta == 0.0f ? 0.0f : (C.h ? from_bf16(C.h[at]) : C.f[at]) * beta;
                const float v = old + (bias ? bias[j] : 0.0f);
                if (C.h) C.h[at] = to_bf16(v);
                else C.f[at] = v;
            }
        return;
    }
    const int t = omp_in_parallel() ? omp_get_thread_num() : 0;
    // Per-thread streams, memory objects and scratch exist for the backend's threads only.
    if (t >= g->threads) mhe_fatal("cpu_gemm called from OpenMP thread %d of a team wider than the backend's %d threads", t, g->threads);
    const int hb_ = bias != NULL;
    if (!bf16) {
        gemm_f32(g, t, ta, tb, M, N, K, alpha, A.f, A.ld, B.f, B.ld, bias, beta, C.f, C.ld);
        return;
    }
    // bf16: fp32 operands are rounded into contiguous copies (same orientation, leading
    // dimension = stored row length): a steady weight's kept copy (cpu_weights.c) or a per-thread
    // one made now; products accumulate in fp32.  Operands given in bf16 (activations) are used
    // where they are, with their own leading dimension.
    const int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
    GemmKey k = {ta, tb, M, N, K, A.h ? A.ld : acols, B.h ? B.ld : bcols, C.ld, 1, C.h != NULL, hb_, alpha, beta};
    if (ta && !tb && A.h && B.h && C.f && !bias && alpha == 1.0f &&
        cpu_gemm_weight_grad(g, M, N, K, A.h, A.ld, B.h, B.ld, beta, C.f, C.ld, NULL, 0))
        return;
    // An activation times a weight into a bf16 activation: the linear layers' x W^T + b and
    // dy W.  oneDNN 2.6 ran dy W at 1,300-1,800 GFLOP/s on an AMX Xeon (K = 1,536-2,048), and the
    // vocabulary head's (K = V = 30,522) at 630-740.
    if (g->amx && !ta && A.h && B.f && C.h && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && N % 16 == 0 &&
        K >= 32 && M >= 32 && !omp_in_parallel()) {
        const uint16_t *w = cpu_weights_bf16(g->weights, B.f, brows, bcols, B.ld);
        const size_t ns = cpu_amx_linear_scratch(M, N, K, g->threads);
        uint16_t *scratch = thread_bf16(g, 0, ns + (w ? 0 : (size_t)brows * bcols));
        if (!w) {
            cpu_pack_bf16(B.f, brows, bcols, B.ld, scratch + ns);
            w = scratch + ns;
        }
        cpu_amx_linear(M, N, K, A.h, (size_t)A.ld, w, (size_t)bcols, tb, bias, beta != 0.0f, C.h, (size_t)C.ld,
                       scratch, g->threads);
        return;
    }
    // A product with a side of at most 16 (mhe_add's head-embedding products: K, N or M = the
    // head count) gets oneDNN 2.6's gemm:jit in bf16, which ran them at ~6 GFLOP/s on an AMX
    // Xeon (0.75 ms for 4096 x 64 x 8); the fp32 primitive below is the same arithmetic.
    // Without bf16 instructions (AVX-512 without avx512_bf16: Skylake to Ice Lake, or
    // ONEDNN_MAX_CPU_ISA=AVX512_CORE) oneDNN 2.6 still has a bf16 gemm:jit that emulates the dot
    // product, at 0.4x the fp32 path's tokens/s on tiny512 and small (tests/bench/bf16_storage.sh,
    // Zen 4, 2026-12-04); the fp32 primitive over widened operands below is the same arithmetic.
    const int skinny = M <= 16 || N <= 16 || K <= 16;
    GemmEntry *e = skinny || !g->native_bf16 ? NULL : lookup(g, &k);
    if (e && e->prim) {
        const uint16_t *ka = A.h ? NULL : cpu_weights_bf16(g->weights, A.f, arows, acols, A.ld);
        const uint16_t *kb = B.h ? NULL : cpu_weights_bf16(g->weights, B.f, brows, bcols, B.ld);
        const size_t na = A.h || ka ? 0 : (size_t)arows * acols, nb = B.h || kb ? 0 : (size_t)brows * bcols;
        uint16_t *ha = thread_bf16(g, t, na + nb), *hb = ha + na;
        if (na) cpu_pack_bf16(A.f, arows, acols, A.ld, ha);
        if (nb) cpu_pack_bf16(B.f, brows, bcols, B.ld, hb);
        execute(g, e, t, A.h ? A.h : ka ? ka : ha, B.h ? B.h : kb ? kb : hb, bias, C.h ? (void *)C.h : (void *)C.f);
        return;
    }
    // No bf16 kernel on this CPU, or a skinny product: the same arithmetic (bf16-rounded
    // operands, fp32 products and sums, a bf16 result rounded once) through the fp32 primitive.
    const size_t fa_n = (size_t)arows * acols, fb_n = (size_t)brows * bcols, fc_n = C.h ? (size_t)M * N : 0;
    float *fa = (float *)thread_bf16(g, t, 2 * (fa_n + fb_n + fc_n)), *fb = fa + fa_n, *fc = fb + fb_n;
    // A steady weight's kept copy serves here too (the rounding it saves is the same).
    const uint16_t *ka = A.h ? NULL : cpu_weights_bf16(g->weights, A.f, arows, acols, A.ld);
    const uint16_t *kb = B.h ? NULL : cpu_weights_bf16(g->weights, B.f, brows, bcols, B.ld);
    if (A.h || ka) bf16_to_f32(A.h ? A.h : ka, arows, acols, A.h ? A.ld : acols, fa);
    else {
#pragma omp parallel for schedule(dynamic, 16) if (fa_n >= (1u << 17))
        for (int r = 0; r < arows; r++) cpu_round_bf16(A.f + (size_t)r * A.ld, fa + (size_t)r * acols, acols);
    }
    if (B.h || kb) bf16_to_f32(B.h ? B.h : kb, brows, bcols, B.h ? B.ld : bcols, fb);
    else {
#pragma omp parallel for schedule(dynamic, 16) if (fb_n >= (1u << 17))
        for (int r = 0; r < brows; r++) cpu_round_bf16(B.f + (size_t)r * B.ld, fb + (size_t)r * bcols, bcols);
    }
    if (C.h && beta != 0.0f) bf16_to_f32(C.h, M, N, C.ld, fc);
    gemm_f32(g, t, ta, tb, M, N, K, alpha, fa, acols, fb, bcols, bias, beta, C.h ? fc : C.f, C.h ? N : C.ld);
    if (C.h)
        for (int r = 0; r < M; r++) bf16_store(fc + (size_t)r * N, (size_t)N, C.h + (size_t)r * C.ld);
}

void cpu_gemm(CpuGemm *g, int bf16, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cpu_gemm_ex(g, bf16, ta, tb, M, N, K, alpha, (CpuOperand){A, NULL, lda}, (CpuOperand){B, NULL, ldb},
                NULL, beta, (CpuResult){C, NULL, ldc});
}

// The head's weight W [N, K] rounded into hw grown by zero rows to Np (hw NULL: its kept copy
// serves), and the bias into bp grown by zeros (bias NULL: none).
static void pad_weight_bias(const float *W, int N, int Np, int K, uint16_t *hw, const float *bias, float *bp) {
    if (hw) {
        cpu_pack_bf16(W, N, K, K, hw);
        memset(hw + (size_t)N * K, 0, (size_t)(Np - N) * K * sizeof *hw);
    }
    if (bias) {
        memcpy(bp, bias, (size_t)N * sizeof *bp);
        memset(bp + N, 0, (size_t)(Np - N) * sizeof *bp);
    }
}

void cpu_gemm_padded_weight(CpuGemm *g, int bf16, int M, int N, int Np, int K, CpuOperand A,
                            const float *W, const float *bias, CpuResult C) {
    if (M <= 0 || N <= 0) return;
    const int t = omp_in_parallel() ? omp_get_thread_num() : 0;
    const int hb_ = bias != NULL;
    GemmKey k = {0, 1, M, Np, K, A.h ? A.ld : K, K, C.ld, 1, C.h != NULL, hb_, 1.0f, 0.0f};
    if (bf16 && g->amx && A.h && C.h && Np % 16 == 0 && K >= 32 && M >= 32 && !omp_in_parallel()) {
        // On AMX tiles (cpu_gemm_ex's linear products), over the weight grown by zero rows and
        // the bias by zeros, as below.
        const uint16_t *wp = cpu_weights_bf16_padded(g->weights, W, N, K, K, Np);
        const size_t ns = (cpu_amx_linear_scratch(M, Np, K, g->threads) + 31) / 32 * 32;
        const size_t nw = wp ? 0 : ((size_t)Np * K + 31) / 32 * 32, nb = bias ? (size_t)Np * 2 : 0;
        uint16_t *scratch = thread_bf16(g, 0, ns + nw + nb), *hw = scratch + ns;
        float *bp = (float *)(hw + nw);
        pad_weight_bias(W, N, Np, K, nw ? hw : NULL, bias, bp);
        cpu_amx_linear(M, Np, K, A.h, (size_t)A.ld, wp ? wp : hw, (size_t)K, 1, bias ? bp : NULL, 0, C.h,
                       (size_t)C.ld, scratch, g->threads);
        return;
    }
    GemmEntry *e = bf16 && Np > N && K > 0 && M > 16 && K > 16 ? lookup(g, &k) : NULL;
    if (e && e->prim) {
        // The weight's kept copy grown by zero rows, or one made now; the bias grown by zeros.
        const uint16_t *wp = cpu_weights_bf16_padded(g->weights, W, N, K, K, Np);
        // Each part at a 64-byte boundary (the bias is fp32).
        const size_t na = A.h ? 0 : ((size_t)M * K + 31) / 32 * 32, nw = wp ? 0 : ((size_t)Np * K + 31) / 32 * 32;
        const size_t nb = bias ? (size_t)Np * 2 : 0;
        uint16_t *ha = thread_bf16(g, t, na + nw + nb), *hw = ha + na;
        float *bp = (float *)(hw + nw);
        if (na) cpu_pack_bf16(A.f, M, K, A.ld, ha);
        pad_weight_bias(W, N, Np, K, nw ? hw : NULL, bias, bp);
        execute(g, e, t, A.h ? A.h : ha, wp ? wp : hw, bias ? bp : NULL, C.h ? (void *)C.h : (void *)C.f);
        return;
    }
    // fp32, small, or no bf16 kernel: the unpadded product into the wider rows, then the zeros.
    cpu_gemm_ex(g, bf16, 0, 1, M, N, K, 1.0f, A, (CpuOperand){W, NULL, K}, bias, 0.0f, C);
    for (int r = 0; r < M; r++) {
        if (C.h) memset(C.h + (size_t)r * C.ld + N, 0, (size_t)(Np - N) * sizeof *C.h);
        else memset(C.f + (size_t)r * C.ld + N, 0, (size_t)(Np - N) * sizeof *C.f);
    }
}
