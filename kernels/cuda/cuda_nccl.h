// defines: the NCCL gradient all-reduce between GPUs (cuda_nccl_create, _allreduce_*, ZeRO-1's
// _reduce_start / _broadcast_start, _free).
// Gradient all-reduce between GPUs with NCCL, bootstrapped by MPI (DESIGN.md §6): rank 0 makes
// the unique id, MPI broadcasts it, every rank joins a non-blocking communicator.  Every
// operation polls ncclCommGetAsyncError against a deadline, so a dead or stuck peer ends the
// job with a message (exit 1) instead of a hang.
#ifndef MHE_KERNELS_CUDA_NCCL_H
#define MHE_KERNELS_CUDA_NCCL_H

#include <stddef.h>

#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudaNccl CudaNccl;

// Collective over the MPI communicator `mpi_comm` (an MPI_Comm *, e.g. comm_mpi_handle()):
// one rank per GPU, `be` the CUDA backend of this rank.  timeout_s <= 0 waits forever.
CudaNccl *cuda_nccl_create(void *mpi_comm, Backend *be, float timeout_s);
// In-place sum of n floats of device memory over all ranks, ordered after the backend's
// previous work on its stream; returns when the result is in `buf` (start + finish).
void cuda_nccl_allreduce_sum(CudaNccl *c, float *buf, size_t n);
// Overlapped sums (README "Streams and the all-reduce"): start records an event on the
// backend's stream and enqueues the sum on the communicator's own stream behind it, so it runs
// while the backend keeps computing; `buf` must not be written by the backend until finish.
// finish makes the backend's stream wait for every started sum (an event on the communication
// stream) and returns when they are complete, polled against the deadline.
void cuda_nccl_allreduce_start(CudaNccl *c, float *buf, size_t n);
void cuda_nccl_allreduce_finish(CudaNccl *c);
// ZeRO-1 (comm/grad_reducer.h): the same overlapped form for a sum onto one rank's buffer
// (ncclReduce, in place at `root`; the other ranks' buffers are left as they were) and for
// `root`'s buffer copied to everyone's (ncclBroadcast); completed by cuda_nccl_allreduce_finish.
void cuda_nccl_reduce_start(CudaNccl *c, float *buf, size_t n, int root);
void cuda_nccl_broadcast_start(CudaNccl *c, float *buf, size_t n, int root);
void cuda_nccl_free(CudaNccl *c);

#ifdef __cplusplus
}
#endif

#endif
