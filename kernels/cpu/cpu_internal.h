// Shared by the CPU backend's files: profiling helpers and the op tables each file fills.
#ifndef MHE_KERNELS_CPU_INTERNAL_H
#define MHE_KERNELS_CPU_INTERNAL_H

#include <omp.h>
#include <stdint.h>

#include "common/error.h"
#include "kernels/cpu/cpu_act.h"
#include "kernels/cpu/cpu_isa.h"  // first: renames the per-level functions declared below
#include "kernels/ops.h"

// Loops over fewer elements run on one thread.  With the OpenMP threads spinning between
// regions (oneDNN's matmuls keep them hot) a fork/join costs a few microseconds; a memory-bound
// pass over 64K floats takes ~20 us on one core, so above that splitting pays on a quiet
// machine.  The earlier thresholds (1M, 8M) kept every activation pass of the bench's models
// (1M-4M floats) on one thread, and the non-matmul part of a step did not scale: 1.4x with 2
// threads.  Loops use dynamic chunks, so on a loaded machine a descheduled thread holds up one
// small chunk, not half the op.
#define CPU_PARALLEL_MIN (1 << 15)       // compute-heavy loops (GELU, exp): ~10 ns/element
#define CPU_PARALLEL_MIN_MEM (1 << 16)   // memory-bound passes (bias, adds, dropout, LayerNorm)
// Reductions whose sums depend on how the loop is split (sum_squares' omp reduction) keep the
// old threshold, so their results for the models' tensors do not change with the thread count.
#define CPU_PARALLEL_MIN_REDUCE (1 << 20)
// Column sums over rows (bias_backward, LayerNorm's dgamma/dbeta): each thread owns a block of
// this many columns and adds the rows in order, so the bits do not depend on the width.  256
// columns read 512 contiguous bytes of a bf16 row; 64 read 128 and left the prefetcher a
// stride (~14 -> ~10 ms and ~13 -> ~9 ms of a `small` bf16 step on an AMX Xeon).
#define CPU_COLSUM_COLS 256

// Zeroed host memory for the backend's buffers (cpu_backend.c): common/error.h mhe_alloc_huge.
#define CPU_HUGE_PAGE MHE_HUGE_PAGE
void *cpu_host_alloc(size_t bytes);

// oneDNN matmuls (cpu_gemm.c): primitives cached per shape, per-thread streams and scratch.
typedef struct CpuGemm CpuGemm;
CpuGemm *cpu_gemm_create(int threads);
void cpu_gemm_destroy(CpuGemm *g);
int cpu_gemm_native_bf16(const CpuGemm *g);
// Route the linear layers' bf16 products (activation x weight into bf16, and dy^T x into fp32:
// the weight gradients) to AMX tiles (cpu_amx_linear.h) when `on` and the CPU has them; the
// backend asks it at the avx512 level.
void cpu_gemm_use_amx(CpuGemm *g, int on);
// dW [M, N] (ldw) = dy^T x (+ dW when beta is 1; beta 0 or 1) for bf16 dy [K, M] and x [K, N],
// and, with db, db[m] = (db[m] unless db_store) + sum_k dy[k][m], in one pass over dy on AMX
// tiles.  0 (nothing done) where that path does not take the shape or AMX is off.
int cpu_gemm_weight_grad(CpuGemm *g, int M, int N, int K, const uint16_t *dy, int ldy, const uint16_t *x, int ldx,
                         float beta, float *dW, int ldw, float *db, int db_store);
// C = alpha op(A) op(B) + beta C, row-major, as ops.h's matmul; bf16 != 0 rounds A and B to
// bf16 (fp32 accumulation and output).  Callable from inside an OpenMP parallel loop (the
// product then runs on the calling thread).
void cpu_gemm(CpuGemm *g, int bf16, int ta, int tb, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
// An operand: fp32 values (f, leading dimension ld; a bf16 product rounds them per call) or,
// in bf16 products only, bf16 values (h, leading dimension ld) used where they are.
typedef struct {
    const float *f;
    const uint16_t *h;
    int ld;
} CpuOperand;
// The result: fp32 (f) or, in bf16 products only, bf16 (h: the fp32 accumulators rounded once
// as they are stored; beta != 0 reads the old bf16 values), leading dimension ld.
typedef struct {
    float *f;
    uint16_t *h;
    int ld;
} CpuResult;
// cpu_gemm with either kind of operand and result and an optional bias [N] added to every row
// of the product (inside the primitive: no separate pass over C).
void cpu_gemm_ex(CpuGemm *g, int bf16, int ta, int tb, int M, int N, int K, float alpha,
                 CpuOperand A, CpuOperand B, const float *bias, float beta, CpuResult C);
// C [M, Np] = A [M, K] Wᵀ + bias with W [N, K] fp32 grown to Np >= N rows of zeros (C.ld >= Np):
// the vocabulary head's forward with its width padded (ops.h ops_head_ld), columns [N, Np) of C
// zero.  oneDNN's bf16 matmul ran it 3x faster with N = Np than with N odd and C.ld = Np.
void cpu_gemm_padded_weight(CpuGemm *g, int bf16, int M, int N, int Np, int K, CpuOperand A,
                            const float *W, const float *bias, CpuResult C);
// bf16 copies of steady weights (cpu_weights.c, ops.h weights_steady): the copy of x [rows,
// cols] (leading dimension ld; contiguous, as cpu_pack_bf16 writes it) when x lies in the memory
// declared steady, made at its first use in the window; NULL otherwise (round per call).
typedef struct CpuWeights CpuWeights;
CpuWeights *cpu_weights_create(void);
void cpu_weights_destroy(CpuWeights *w);
CpuWeights *cpu_gemm_weights(CpuGemm *g);
void cpu_weights_steady(CpuWeights *w, const float *p, size_t n);   // p NULL: the window ends
const uint16_t *cpu_weights_bf16(CpuWeights *w, const float *x, int rows, int cols, int ld);
// The same copy grown to prows >= rows rows, the rows past `rows` zero (the padded head's weight);
// it serves the unpadded requests of the same weight too.
const uint16_t *cpu_weights_bf16_padded(CpuWeights *w, const float *x, int rows, int cols, int ld, int prows);
// How many products took a copy made earlier in its window (the tests: the cache is used).
long cpu_weights_reused(const CpuWeights *w);
// A backend op wrote [p, p + bytes): a window over any of it ends.
void cpu_weights_wrote(CpuWeights *w, const void *p, size_t bytes);
// x [rows, cols] (leading dimension ld) rounded to bf16 into out (contiguous, ld = cols); split
// over the threads when large and called outside a parallel region.
void cpu_pack_bf16(const float *x, int rows, int cols, int ld, uint16_t *out);
// out[i] = x[i] rounded to the nearest bf16 (ties to even), as an fp32 value.
void cpu_round_bf16(const float *x, float *out, size_t n);

// Threads fixed at creation: per-thread scratch (attention, oneDNN) is sized for this many.
typedef struct {
    int threads;
    int bf16;       // runtime.precision bf16: activations (Backend.act) and matmul operands in bf16
    CpuGemm *gemm;
    float *rows;    // cpu_thread_floats' buffers: rows_teams of rows_stride floats
    size_t rows_stride;
    int rows_teams;
    const char *isa;  // the ISA level of the installed ops (cpu_isa.h)
} CpuContext;
static inline int cpu_threads(const Backend *be) { return ((const CpuContext *)be->ctx)->threads; }
static inline CpuContext *cpu_ctx(const Backend *be) { return (CpuContext *)be->ctx; }
// The backend's matmul at its precision.
static inline void cpu_gemm_be(const Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc) {
    cpu_gemm(cpu_ctx(be)->gemm, cpu_ctx(be)->bf16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static inline void cpu_wrote(const Backend *be, const void *p, size_t bytes) {
    cpu_weights_wrote(cpu_gemm_weights(cpu_ctx(be)->gemm), p, bytes);
}

static inline double cpu_prof_begin(const Backend *be) { return be->profile ? omp_get_wtime() : 0.0; }
static inline void cpu_prof_end(Backend *be, OpClass c, double t0, double flops) {
    if (!be->profile) return;
    be->profile->seconds[c] += omp_get_wtime() - t0;
    be->profile->flops[c] += flops;
    be->profile->calls[c]++;
}

// Each file installs its ops into the table.
void cpu_install_linear(Backend *be);
void cpu_install_elementwise(Backend *be);
void cpu_install_layernorm(Backend *be);
void cpu_install_activation(Backend *be);
void cpu_install_embedding(Backend *be);
void cpu_install_loss(Backend *be);
void cpu_install_attention(Backend *be);
void cpu_install_optim(Backend *be);
void cpu_install_reduce(Backend *be);

#endif
