// Optimizer-side ops of the CPU backend: reductions and the AdamW / LAMB element updates.
#include <math.h>

#include "kernels/cpu/cpu_internal.h"

static double cpu_sum_squares(Backend *be, const float *x, size_t n) {
    double t0 = cpu_prof_begin(be);
    double s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
    return s;
}

static void cpu_adamw_update(Backend *be, float *p, const float *grad, float *m, float *v,
                             size_t n, float lr, float b1, float b2, float eps, float wd,
                             float bc1, float bc2, float grad_scale) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        p[i] -= lr * ((m[i] / bc1) / (sqrtf(v[i] / bc2) + eps) + wd * p[i]);
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_lamb_direction(Backend *be, const float *p, const float *grad, float *m, float *v,
                               float *u, size_t n, float b1, float b2, float eps, float wd,
                               float bc1, float bc2, float grad_scale) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale;
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        u[i] = (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps) + wd * p[i];
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

void cpu_install_optim(Backend *be) {
    be->sum_squares = cpu_sum_squares;
    be->adamw_update = cpu_adamw_update;
    be->lamb_direction = cpu_lamb_direction;
}
