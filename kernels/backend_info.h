// What the CUDA side reports about itself.  Without the CUDA backend these answer "none".
#ifndef MHE_KERNELS_BACKEND_INFO_H
#define MHE_KERNELS_BACKEND_INFO_H

#include <stdio.h>

int backend_cuda_compiled(void);
int backend_cuda_device_count(void);  // 0 without a GPU or without the backend
void backend_cuda_print_versions(FILE *out);  // cuda runtime, cuBLAS, NCCL lines

#endif
