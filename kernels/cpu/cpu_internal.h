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

// Threads fixed at creation: per-thread scratch (attention) is sized for this many.
typedef struct {
    int threads;
} CpuContext;
static inline int cpu_threads(const Backend *be) { return ((const CpuContext *)be->ctx)->threads; }

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
