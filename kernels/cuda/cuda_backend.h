// defines: backend_cuda_create, the CUDA backend's constructor.
// The CUDA backend: every op of kernels/ops.h on one GPU, matmuls through cuBLAS.
#ifndef MHE_KERNELS_CUDA_BACKEND_H
#define MHE_KERNELS_CUDA_BACKEND_H

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// device: CUDA ordinal (the local rank's GPU).  bf16 != 0 (runtime.precision: bf16) stores every
// activation and activation gradient in bf16 (be->act DT_BF16) with fp32 arithmetic inside each
// op and the matmuls on tensor cores (fp32 accumulation); the weights, the optimizer state and
// the normalisation and loss statistics stay fp32.  Exits with a message when the device cannot
// be used.
Backend *backend_cuda_create(int device, int bf16);

#ifdef __cplusplus
}
#endif

#endif
