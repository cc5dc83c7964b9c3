// The CUDA backend: every op of kernels/ops.h on one GPU, matmuls through cuBLAS.
#ifndef MHE_KERNELS_CUDA_BACKEND_H
#define MHE_KERNELS_CUDA_BACKEND_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// device: CUDA ordinal (the local rank's GPU).  bf16 != 0 (runtime.precision: bf16) rounds the
// matmul inputs to bf16 and accumulates in fp32 (tensor cores); every other op, the weights and
// the optimizer state stay fp32.  Exits with a message when the device cannot be used.
Backend *backend_cuda_create(int device, int bf16);

// bf16 mode: how many bf16 twins of matmul operands the backend holds and their bytes
// (cuda_mirror.cu; tests check that a steady-state step creates none).
long backend_cuda_mirror_segments(Backend *be, size_t *bytes);
// bf16 mode: how many twins are lean (their fp32 copy no longer written, cuda_mirror.cu) and how
// many floats' fp32 data is stale (NULL: not wanted).
long backend_cuda_mirror_lean(Backend *be, size_t *stale_floats);

#ifdef __cplusplus
}
#endif

#endif
