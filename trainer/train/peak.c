#include "trainer/train/peak.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"

double peak_matmul_gflops(Backend *be, int n, int reps) {
    // Operands and result in the activation type: the product at the precision the model's
    // matmuls run at (bf16 units in a bf16 run).
    const size_t nn = (size_t)n * n, bytes = nn * dtype_size(be->act);
    float *host = mhe_malloc(nn * sizeof(float));
    for (size_t i = 0; i < nn; i++) host[i] = (float)(i % 7) * 0.01f;
    Act *a = be->alloc(be, bytes), *b = be->alloc(be, bytes), *c = be->alloc(be, bytes);
    be->upload_act(be, a, host, nn);
    be->upload_act(be, b, host, nn);
    // The profile would count these products as the model's.
    OpProfile *prof = be->profile;
    be->profile = NULL;
    // At least `reps` timed products and at least 50 ms of them: a 1024^3 bf16 product takes about
    // a millisecond on an AMX Xeon, and the best of 3 such read anywhere from 1,100 to 2,150 GFLOP/s
    // between processes (2026-11-28/29), while the best of ~50 settles within a few percent.
    double best = 0, timed = 0;
    for (int rep = 0; rep <= reps || (timed < 0.05 && rep <= 64); rep++) {
        double t0 = omp_get_wtime();
        be->matmul(be, 0, 0, n, n, n, 1.0f, mat_act(a, n), mat_act(b, n), 0.0f, out_act(c, n));
        be->synchronize(be);
        const double dt = omp_get_wtime() - t0;
        double g = 2.0 * (double)n * n * n / dt / 1e9;
        if (rep > 0) timed += dt;
        if (rep > 0 && g > best) best = g;  // the first call creates the kernels, warms caches
    }
    be->profile = prof;
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    free(host);
    return best;
}

double peak_matmul_ceiling(Backend *be, int *n_used) {
    double best = 0, prev = 0;
    int used = 0;
    for (int n = 1024; n <= 4096; n *= 2) {
        double t0 = omp_get_wtime();
        double g = peak_matmul_gflops(be, n, 3);
        double per_product = (omp_get_wtime() - t0) / 4;
        if (g > best) {
            best = g;
            used = n;
        }
        // The cores are full once doubling the size no longer raises the rate; the next size
        // costs 8x this one's time, kept to a fraction of a second at start-up (4096^3 floats
        // are 200 MB).
        if (g < 1.05 * prev || 8 * per_product > 0.25) break;
        prev = g;
    }
    if (n_used) *n_used = used;
    return best;
}

double peak_mfu(double *peak, double achieved) {
    if (*peak <= 0 || achieved <= 0) return -1;
    if (achieved > *peak) {
        static int said;
        if (!said++)
            fprintf(stderr, "mhetrain: the model's step ran at %.1f GFLOP/s, above the matmul ceiling measured at "
                            "start (%.1f GFLOP/s): MFU is counted against the step's own rate from here (100%% "
                            "there), which only bounds the ceiling from below\n", achieved, *peak);
        *peak = achieved;
    }
    return achieved / *peak;
}
