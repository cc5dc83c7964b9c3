// defines: the reductions over a whole buffer: sum of squares (gradient norms for clipping, LAMB's
// trust ratios), in double.  Not with the updates in cpu_optim.c: the trainer calls it apart from
// them, on gradients as well as parameters.
#include "kernels/cpu/cpu_internal.h"

static double cpu_sum_squares(Backend *be, const float *x, size_t n) {
    double t0 = cpu_prof_begin(be);
    double s = 0;
    // simd: without it the double reduction stays scalar (the compiler may not reorder it), a
    // quarter of the memory's rate; the order is then fixed by the thread count and the lanes.
#pragma omp parallel for simd reduction(+ : s) schedule(static) if (n >= CPU_PARALLEL_MIN_REDUCE)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
    return s;
}

void cpu_install_reduce(Backend *be) { be->sum_squares = cpu_sum_squares; }
