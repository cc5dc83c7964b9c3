// The machine's matmul ceiling, measured rather than assumed: MFU is reported against it.
#ifndef MHE_TRAINER_PEAK_H
#define MHE_TRAINER_PEAK_H

// GFLOP/s of single-precision GEMM (OpenBLAS on all of the current OpenMP threads, whatever
// OpenBLAS's own setting, which is restored) on square
// matrices of size n (best of `reps` after a warm-up).  Takes about reps * 2n³ / rate seconds.
double peak_sgemm_gflops(int n, int reps);

#endif
