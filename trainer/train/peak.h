// The machine's matmul ceiling, measured rather than assumed: MFU is reported against it.
#ifndef MHE_TRAINER_PEAK_H
#define MHE_TRAINER_PEAK_H

#include "kernels/ops.h"

// GFLOP/s of the backend's own matmul at its precision (oneDNN fp32 or bf16 on every OpenMP
// thread on the CPU, cuBLAS on CUDA) on square matrices of size n: the best of `reps` after a
// warm-up.  Takes about (reps + 1) * 2n³ / rate seconds.
double peak_matmul_gflops(Backend *be, int n, int reps);

#endif
