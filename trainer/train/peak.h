// The machine's matmul ceiling, measured rather than assumed: MFU is reported against it.
#ifndef MHE_TRAINER_PEAK_H
#define MHE_TRAINER_PEAK_H

#include "kernels/ops.h"

// GFLOP/s of the backend's own matmul at its precision (oneDNN fp32 or bf16 on every OpenMP
// thread on the CPU, cuBLAS on CUDA) on square matrices of size n, on the CPU in both forms the
// model runs (A B into the activation type, A^T B into fp32): the best of at least `reps` products of each
// after a warm-up, and of as many more (up to 64) as fill 50 ms.  Takes about
// max(reps + 1 products, 50 ms).
double peak_matmul_gflops(Backend *be, int n, int reps);

// The ceiling MFU is measured against: the best rate of peak_matmul_gflops over square sizes
// 1024, 2048, 4096, growing while the rate still grows by 5% and the measurements so far plus the
// next size's (about 8x this one's) stay within 1 s.
// One 1024^3 product cannot fill a many-core CPU or its AMX/AVX-512 units, and a model whose
// larger matmuls outran it reported MFU 100% (issue 33).  *n_used (may be NULL): the size
// that gave it; *seconds_used (may be NULL): how long its measurement took.
double peak_matmul_ceiling(Backend *be, int *n_used, double *seconds_used);

// One linear-layer product of a model, C[M, N] = X[M, K] Wᵀ, run `count` times per pass.
typedef struct {
    int M, N, K, count;
} PeakProduct;

// GFLOP/s of the backend's matmul over a model's own linear-layer products: each as the forward
// (X Wᵀ into the activation type, W fp32 with its bf16 copy kept, as in a step) and the weight
// gradient (Yᵀ X into fp32); the best of `reps` passes after one warm-up pass.  What
// runtime.precision: auto compares between an fp32 and a bf16 backend (precision_auto.h).
double peak_products_gflops(Backend *be, const PeakProduct *p, int n, int reps);

// MFU of a step that ran at `achieved` GFLOP/s, against the best matmul rate this process has
// reached.  The start-up probe can land in a slice where other jobs held the cores; when the
// model's own step (whose matmuls ran at least this fast) beats it, *peak is raised to the
// step's rate, so MFU never reads above 1, and says so once on stderr (an MFU of 100% is then a
// bound, not a measurement).  -1 when the ceiling or the rate is unknown.
double peak_mfu(double *peak, double achieved);

#endif
