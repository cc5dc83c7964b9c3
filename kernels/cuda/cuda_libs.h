// cuBLAS, cuBLASLt and NCCL opened at run time (cuda_libs.cpp), not linked: a CPU run of a
// CUDA-enabled mhetrain never maps them, and one without them still starts.
#ifndef MHE_KERNELS_CUDA_CUDA_LIBS_H
#define MHE_KERNELS_CUDA_CUDA_LIBS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Opens the three libraries and resolves every function the backend calls, once per process.
// 1 when all are there; 0 with the loader's one-line reason in why (a missing library, or a name
// it lacks).  Not in the emulated build (its cuda_emu.cpp defines those functions itself).
int mhe_cuda_libs_load(char *why, size_t len);

#ifdef __cplusplus
}
#endif

#endif
