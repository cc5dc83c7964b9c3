// What the CUDA side reports about itself.  Without the CUDA backend these answer "none".
#ifndef MHE_KERNELS_BACKEND_INFO_H
#define MHE_KERNELS_BACKEND_INFO_H

#include <stdio.h>

#include "kernels/ops.h"

int backend_cuda_compiled(void);
int backend_cuda_device_count(void);  // 0 without a GPU or without the backend
void backend_cuda_print_versions(FILE *out);  // cuda runtime, cuBLAS, NCCL lines
// The CUDA backend on GPU `device` (bf16 compute when bf16 != 0).  Without the backend, or
// without a GPU, a clear message and exit status 2.
Backend *backend_cuda_create_for(int device, int bf16);

// Gradient all-reduce on device buffers between GPUs (NCCL, bootstrapped over the MPI
// communicator `mpi_comm`, an MPI_Comm *), with a deadline.  Only for a CUDA backend.
typedef struct DeviceComm DeviceComm;
DeviceComm *device_comm_create(void *mpi_comm, Backend *be, float timeout_s);
void device_comm_allreduce_sum(DeviceComm *c, float *buf, size_t n);
void device_comm_free(DeviceComm *c);

#endif
