// Shared by the CPU backend's files: profiling helpers and the op tables each file fills.
#ifndef MHE_KERNELS_CPU_INTERNAL_H
#define MHE_KERNELS_CPU_INTERNAL_H

#include <omp.h>

#include "kernels/ops.h"

// Loops over fewer elements run on one thread: for memory-bound loops a parallel region costs
// more than it saves, and far more on a loaded machine (a barrier waits for a descheduled thread).
#define CPU_PARALLEL_MIN (1 << 20)
// Memory-bound passes (bias, residual adds, dropout, LayerNorm, embeddings) take well under a
// millisecond per million floats on one core; a parallel region on a loaded machine can cost
// a scheduler time slice (several ms), so they only split when far larger.
#define CPU_PARALLEL_MIN_MEM (1 << 23)

// oneDNN matmuls (cpu_gemm.c): primitives cached per shape, per-thread streams and scratch.
typedef struct CpuGemm CpuGemm;
CpuGemm *cpu_gemm_create(int threads);
void cpu_gemm_destroy(CpuGemm *g);
int cpu_gemm_native_bf16(const CpuGemm *g);
// C = alpha op(A) op(B) + beta C, row-major, as ops.h's matmul; bf16 != 0 rounds A and B to
// bf16 (fp32 accumulation and output).  Callable from inside an OpenMP parallel loop (the
// product then runs on the calling thread).
void cpu_gemm(CpuGemm *g, int bf16, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
// out[i] = x[i] rounded to the nearest bf16 (ties to even), as an fp32 value.
void cpu_round_bf16(const float *x, float *out, size_t n);

// Threads fixed at creation: per-thread scratch (attention, oneDNN) is sized for this many.
typedef struct {
    int threads;
    int bf16;       // runtime.precision bf16: matmul operands (incl. attention's) in bf16
    CpuGemm *gemm;
} CpuContext;
static inline int cpu_threads(const Backend *be) { return ((const CpuContext *)be->ctx)->threads; }
static inline CpuContext *cpu_ctx(const Backend *be) { return (CpuContext *)be->ctx; }
// The backend's matmul at its precision.
static inline void cpu_gemm_be(const Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc) {
    cpu_gemm(cpu_ctx(be)->gemm, cpu_ctx(be)->bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static inline double cpu_prof_begin(const Backend *be) { return be->profile ? omp_get_wtime() : 0.0; }
static inline void cpu_prof_end(Backend *be, OpClass c, double t0, double flops) {
    if (!be->profile) return;
    be->profile->seconds[c] += omp_get_wtime() - t0;
    be->profile->flops[c] += flops;
    be->profile->calls[c]++;
}

// Each file installs its ops into the table.
void cpu_install_dense(Backend *be);
void cpu_install_nn(Backend *be);
void cpu_install_attention(Backend *be);
void cpu_install_optim(Backend *be);

#endif
