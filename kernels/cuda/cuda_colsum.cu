// The second stage of the column sums (cuda_colsum.h).
#include "kernels/cuda/cuda_colsum.h"

// One thread per column: its chunks' partials in chunk order (a few dozen values).
__global__ void colsum2_finish_kernel(const float *partials, int chunks, int C, float *outA, float *outB) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float a = 0, b = 0;
    for (int k = 0; k < chunks; k++) {
        a += partials[(size_t)k * C + c];
        b += partials[((size_t)chunks + k) * C + c];
    }
    if (outA) outA[c] += a;
    if (outB) outB[c] += b;
}
