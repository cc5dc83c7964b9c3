// The CPU backend: memory is host memory, ops are C + OpenMP, matmuls through oneDNN.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_internal.h"

// 64-byte alignment keeps the matmuls and vector loops on cache-line boundaries; huge pages
// from 2 MiB (mhe_alloc_huge): the tile loads and the passes over [N, 4D] activations walk rows
// a page or more apart, and with 4 KiB pages each row was a TLB miss.  On an AMX Xeon (THP
// "madvise") the bench's bf16 steps ran 3-5% faster (small, tiny512, tiny; four alternating
// pairs each).
void *cpu_host_alloc(size_t bytes) { return mhe_alloc_huge(bytes); }

static void *cpu_alloc(Backend *be, size_t bytes) {
    (void)be;
    return cpu_host_alloc(bytes);
}

static void cpu_free(Backend *be, void *p) {
    (void)be;
    free(p);
}

static void cpu_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    double t0 = cpu_prof_begin(be);
    cpu_wrote(be, dst, bytes);
    if (bytes) memmove(dst, src, bytes);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// Large clears (the gradients at each zero_grad: 103 MB in the bench's `small`) split over the
// threads in 1 MiB pieces: one core's memset filled ~11 GB/s on an AMX Xeon, two ~19.
#define ZERO_PIECE ((size_t)1 << 20)
static void cpu_zero(Backend *be, void *dst, size_t bytes) {
    double t0 = cpu_prof_begin(be);
    cpu_wrote(be, dst, bytes);
    const size_t pieces = (bytes + ZERO_PIECE - 1) / ZERO_PIECE;
#pragma omp parallel for schedule(static) num_threads(cpu_threads(be)) if (pieces >= 8 && !omp_in_parallel())
    for (size_t i = 0; i < pieces; i++) {
        const size_t at = i * ZERO_PIECE;
        memset((char *)dst + at, 0, bytes - at < ZERO_PIECE ? bytes - at : ZERO_PIECE);
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_synchronize(Backend *be) { (void)be; }

static void cpu_weights_steady_op(Backend *be, const float *p, size_t n) {
    cpu_weights_steady(cpu_gemm_weights(cpu_ctx(be)->gemm), p, n);
}

static void cpu_upload_act(Backend *be, Act *dst, const float *host_src, size_t n) {
    if (!act_bf16(be)) {
        cpu_copy(be, act_f(dst), host_src, n * sizeof *host_src);
        return;
    }
    double t0 = cpu_prof_begin(be);
    uint16_t *h = act_h(dst);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) h[i] = to_bf16(host_src[i]);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}
static void cpu_download_act(Backend *be, float *host_dst, const Act *src, size_t n) {
    if (!act_bf16(be)) {
        cpu_copy(be, host_dst, act_cf(src), n * sizeof *host_dst);
        return;
    }
    double t0 = cpu_prof_begin(be);
    const uint16_t *h = act_ch(src);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) host_dst[i] = from_bf16(h[i]);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

float *cpu_thread_floats(Backend *be, size_t floats, size_t *stride) {
    CpuContext *c = cpu_ctx(be);
    // A team is as wide as the backend's threads unless the caller has changed OpenMP's default.
    const int teams = c->threads > omp_get_max_threads() ? c->threads : omp_get_max_threads();
    if (floats > c->rows_stride || teams > c->rows_teams) {
        if (omp_in_parallel()) mhe_fatal("cpu_thread_floats: grown inside a parallel region");
        free(c->rows);
        // Whole cache lines per thread, so two threads' rows never share one.
        const size_t want = (floats + 15) / 16 * 16;
        c->rows_stride = want > c->rows_stride ? want : c->rows_stride;
        c->rows_teams = teams;
        c->rows = aligned_alloc(64, (size_t)teams * c->rows_stride * sizeof *c->rows);
        if (!c->rows) mhe_fatal("out of memory allocating per-thread rows");
    }
    *stride = c->rows_stride;
    return c->rows;
}

static void cpu_destroy(Backend *be) {
    cpu_gemm_destroy(cpu_ctx(be)->gemm);
    free(cpu_ctx(be)->rows);
    free(be->ctx);
    free(be);
}

Backend *backend_cpu_create_for(int threads, int bf16) {
    // First, so that an MHE_CPU_ISA this CPU cannot run fails before anything is set up.
    const char *isa;
    const CpuInstallFn install_ops = cpu_isa_choose(&isa);
    if (threads > 0) omp_set_num_threads(threads);
    // Parallelism comes from OpenMP alone: oneDNN runs on OpenMP too and keeps to the calling
    // thread inside parallel regions (attention's per-head products), so nothing oversubscribes.
    Backend *be = mhe_calloc(1, sizeof *be);
    be->name = "cpu";
    be->act = bf16 ? DT_BF16 : DT_F32;
    CpuContext *ctx = mhe_calloc(1, sizeof *ctx);
    ctx->threads = omp_get_max_threads();
    ctx->gemm = cpu_gemm_create(ctx->threads);
    ctx->bf16 = bf16 != 0;
    ctx->isa = isa;
    // MHE_CPU_ISA below avx512 keeps every product on oneDNN, as it keeps attention's.
    cpu_gemm_use_amx(ctx->gemm, ctx->bf16 && strcmp(isa, "avx512") == 0);
    static int warned;
    if (ctx->bf16 && !cpu_gemm_native_bf16(ctx->gemm) && !warned++)
        fprintf(stderr, "note: this CPU has no native bf16 instructions; bf16 is emulated and slower than fp32\n");
    be->ctx = ctx;
    be->destroy = cpu_destroy;
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->upload = cpu_copy;
    be->download = cpu_copy;
    be->copy = cpu_copy;
    be->zero = cpu_zero;
    be->synchronize = cpu_synchronize;
    be->upload_act = cpu_upload_act;
    be->download_act = cpu_download_act;
    be->weights_steady = cpu_weights_steady_op;
    install_ops(be);
    return be;
}

const char *backend_cpu_isa(const Backend *be) { return cpu_ctx(be)->isa; }
int backend_cpu_native_bf16(const Backend *be) { return cpu_gemm_native_bf16(cpu_ctx(be)->gemm); }

Backend *backend_cpu_create(int threads) { return backend_cpu_create_for(threads, 0); }
