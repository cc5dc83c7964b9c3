// defines: the optimizer's element updates: AdamW (adamw_update) and the LAMB direction
// (lamb_direction), their element math shared with the host optimizer and CUDA (../optim_math.h).
#include "kernels/cpu/cpu_internal.h"
#include "kernels/optim_math.h"

static void cpu_adamw_update(Backend *be, float *p, const float *grad, float *m, float *v,
                             size_t n, float b1, float b2, float eps, float step_size, float decay,
                             float bc2_sqrt, float grad_scale) {
    double t0 = cpu_prof_begin(be);
    cpu_wrote(be, p, n * sizeof *p);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        optim_moments(&m[i], &v[i], grad[i] * grad_scale, b1, b2);
        p[i] = adamw_param(p[i], m[i], v[i], step_size, decay, bc2_sqrt, eps);
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_lamb_direction(Backend *be, const float *p, const float *grad, float *m, float *v,
                               float *u, size_t n, float b1, float b2, float eps, float wd,
                               float bc1, float bc2, float grad_scale) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) {
        optim_moments(&m[i], &v[i], grad[i] * grad_scale, b1, b2);
        u[i] = lamb_direction_of(p[i], m[i], v[i], bc1, bc2, eps, wd);
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

void cpu_install_optim(Backend *be) {
    be->adamw_update = cpu_adamw_update;
    be->lamb_direction = cpu_lamb_direction;
}
