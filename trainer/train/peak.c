#include "trainer/train/peak.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>

#include "common/error.h"

double peak_sgemm_gflops(int n, int reps) {
    // The CPU backend pins OpenBLAS to one thread and splits products over OpenMP itself; the
    // ceiling is OpenBLAS on all of this process's threads.
    const int blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(omp_get_max_threads());
    size_t nn = (size_t)n * (size_t)n;
    float *a = mhe_malloc(nn * sizeof(float)), *b = mhe_malloc(nn * sizeof(float)),
          *c = mhe_malloc(nn * sizeof(float));
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.01f;
        b[i] = (float)(i % 5) * 0.02f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = omp_get_wtime() - t0;
        if (t < best) best = t;
    }
    free(a);
    free(b);
    free(c);
    openblas_set_num_threads(blas_threads);
    return 2.0 * (double)n * (double)n * (double)n / best / 1e9;
}
