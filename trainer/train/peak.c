#include "trainer/train/peak.h"

#include <omp.h>
#include <stdlib.h>

#include "common/error.h"

double peak_matmul_gflops(Backend *be, int n, int reps) {
    const size_t nn = (size_t)n * n, bytes = nn * sizeof(float);
    float *host = mhe_malloc(bytes);
    for (size_t i = 0; i < nn; i++) host[i] = (float)(i % 7) * 0.01f;
    float *a = be->alloc(be, bytes), *b = be->alloc(be, bytes), *c = be->alloc(be, bytes);
    be->upload(be, a, host, bytes);
    be->upload(be, b, host, bytes);
    // The profile would count these products as the model's.
    OpProfile *prof = be->profile;
    be->profile = NULL;
    double best = 0;
    for (int rep = 0; rep <= reps; rep++) {
        double t0 = omp_get_wtime();
        be->matmul(be, 0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        be->synchronize(be);
        double g = 2.0 * (double)n * n * n / (omp_get_wtime() - t0) / 1e9;
        if (rep > 0 && g > best) best = g;  // the first call creates the kernels, warms caches
    }
    be->profile = prof;
    be->free(be, a);
    be->free(be, b);
    be->free(be, c);
    free(host);
    return best;
}

double peak_mfu(double *peak, double achieved) {
    if (*peak <= 0 || achieved <= 0) return -1;
    if (achieved > *peak) *peak = achieved;
    return achieved / *peak;
}
