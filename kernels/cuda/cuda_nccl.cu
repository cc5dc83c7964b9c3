// defines: the NCCL communicator (cuda_nccl.h): create, all-reduce, reduce / broadcast, free.
// NCCL communicator (see cuda_nccl.h).  Non-blocking mode: calls may return ncclInProgress and
// complete later; completion is polled, never waited on blindly.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_nccl.h"

// Two streams: the backend's (compute) and this communicator's own, so a bucket's sum runs
// while the backend computes the next gradients.  Events carry the order both ways: one per
// started bucket (compute -> communication: the bucket's gradients are final), one at finish
// (communication -> compute: the optimizer reads summed gradients).
struct CudaNccl {
    ncclComm_t comm;
    cudaStream_t stream;       // the backend's
    cudaStream_t comm_stream;  // the all-reduces'
    std::vector<cudaEvent_t> ready;  // ready[k]: bucket k of this step may be reduced
    int started;                     // buckets started since the last finish
    cudaEvent_t done;
    Backend *be;  // whose weight copies a reduced buffer makes stale (cuda_fp32_wrote)
    int rank, world;
    double timeout_s;
};

static double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Polls until the communicator has no operation in progress (and, when `stream` is set, the
// stream has drained); aborts the communicator and ends the job on error or deadline.
static void nccl_wait(CudaNccl *c, const char *what, cudaStream_t stream) {
    double start = now_s();
    for (;;) {
        ncclResult_t r = ncclSuccess;
        if (ncclCommGetAsyncError(c->comm, &r) != ncclSuccess) r = ncclSystemError;
        if (r != ncclSuccess && r != ncclInProgress) {
            ncclCommAbort(c->comm);
            mhe_fatal("rank %d: NCCL %s failed: %s (a peer died or the network failed)", c->rank,
                      what, ncclGetErrorString(r));
        }
        if (r == ncclSuccess) {
            if (!stream) return;
            cudaError_t e = cudaStreamQuery(stream);
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady)
                mhe_fatal("rank %d: NCCL %s: %s", c->rank, what, cudaGetErrorString(e));
        }
        if (c->timeout_s > 0 && now_s() - start > c->timeout_s) {
            ncclCommAbort(c->comm);
            mhe_fatal("rank %d: NCCL %s did not complete within %.0f s (dist.timeout_s): a peer is "
                      "dead or stuck; ending the job", c->rank, what, c->timeout_s);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
}

static void nccl_check(CudaNccl *c, ncclResult_t r, const char *what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    mhe_fatal("rank %d: NCCL %s failed: %s", c->rank, what, ncclGetErrorString(r));
}

extern "C" CudaNccl *cuda_nccl_create(void *mpi_comm, Backend *be, float timeout_s) {
    MPI_Comm mc = *static_cast<MPI_Comm *>(mpi_comm);
    CudaNccl *c = new (std::nothrow) CudaNccl{};
    if (!c) mhe_fatal("out of memory creating the NCCL communicator");
    MPI_Comm_rank(mc, &c->rank);
    MPI_Comm_size(mc, &c->world);
    c->stream = cuda_stream(be);
    // Non-blocking: no implicit ordering with the legacy stream; the events order everything.
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    c->be = be;
    c->timeout_s = timeout_s;
    ncclUniqueId id;
    if (c->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) mhe_fatal("ncclGetUniqueId failed");
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mc);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    nccl_check(c, ncclCommInitRankConfig(&c->comm, c->world, id, c->rank, &config), "init");
    nccl_wait(c, "init", nullptr);
    return c;
}

enum { COLL_ALLREDUCE, COLL_REDUCE, COLL_BROADCAST };

// One collective on the communication stream, ordered after the backend's work so far.
static void collective_start(CudaNccl *c, int kind, float *buf, size_t n, int root) {
    if (!n) return;
    // The buffer changes here (all of it, the root's only for a reduce, all but the root's for a
    // broadcast): a bf16 copy of it is stale.
    if (kind == COLL_ALLREDUCE || (kind == COLL_REDUCE) == (c->rank == root))
        cuda_fp32_wrote(c->be, buf, n * sizeof(float));
    if (c->started == (int)c->ready.size()) {
        cudaEvent_t e;
        CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        c->ready.push_back(e);
    }
    cudaEvent_t ready = c->ready[(size_t)c->started++];
    // The backward pass has issued every kernel writing this bucket: the sum starts after them.
    mhe_cost_event_record(ready, MHE_STREAM_COMPUTE);
    CUDA_CHECK(cudaEventRecord(ready, c->stream));
    mhe_cost_stream_wait(MHE_STREAM_COMM, ready);
    CUDA_CHECK(cudaStreamWaitEvent(c->comm_stream, ready, 0));
    static const char *const labels[] = {"nccl all-reduce", "nccl reduce", "nccl broadcast"};
    const double bytes = (double)n * sizeof(float);
    if (!mhe_cost_record_collective(labels[kind], kind == COLL_ALLREDUCE ? 2.0 : 1.0, bytes, c->world, MHE_STREAM_COMM))
        return;
    ncclResult_t r = kind == COLL_ALLREDUCE ? ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->comm, c->comm_stream)
                     : kind == COLL_REDUCE  ? ncclReduce(buf, buf, n, ncclFloat32, ncclSum, root, c->comm, c->comm_stream)
                                            : ncclBroadcast(buf, buf, n, ncclFloat32, root, c->comm, c->comm_stream);
    nccl_check(c, r, labels[kind] + 5);
    // A non-blocking communicator may still be enqueueing (ncclInProgress); NCCL must be ready
    // before its next call.  This waits for the enqueue, not for the sum (the emulation's
    // enqueue is its sum, so there it waits for the sum: same values, no overlap in time).
    if (r == ncclInProgress) nccl_wait(c, labels[kind] + 5, nullptr);
}

extern "C" void cuda_nccl_allreduce_start(CudaNccl *c, float *buf, size_t n) {
    collective_start(c, COLL_ALLREDUCE, buf, n, 0);
}
extern "C" void cuda_nccl_reduce_start(CudaNccl *c, float *buf, size_t n, int root) {
    collective_start(c, COLL_REDUCE, buf, n, root);
}
extern "C" void cuda_nccl_broadcast_start(CudaNccl *c, float *buf, size_t n, int root) {
    collective_start(c, COLL_BROADCAST, buf, n, root);
}

extern "C" void cuda_nccl_allreduce_finish(CudaNccl *c) {
    if (!c->started) return;
    c->started = 0;
    mhe_cost_event_record(c->done, MHE_STREAM_COMM);
    CUDA_CHECK(cudaEventRecord(c->done, c->comm_stream));
    mhe_cost_stream_wait(MHE_STREAM_COMPUTE, c->done);
    CUDA_CHECK(cudaStreamWaitEvent(c->stream, c->done, 0));
    // Completion is polled with the deadline, so a dead peer ends the job instead of a hang.
    nccl_wait(c, "all-reduce", c->comm_stream);
}

extern "C" void cuda_nccl_allreduce_sum(CudaNccl *c, float *buf, size_t n) {
    cuda_nccl_allreduce_start(c, buf, n);
    cuda_nccl_allreduce_finish(c);
}

extern "C" void cuda_nccl_free(CudaNccl *c) {
    if (!c) return;
    nccl_check(c, ncclCommFinalize(c->comm), "finalize");
    nccl_wait(c, "finalize", nullptr);
    ncclCommDestroy(c->comm);
    for (cudaEvent_t e : c->ready) CUDA_CHECK(cudaEventDestroy(e));
    CUDA_CHECK(cudaEventDestroy(c->done));
    CUDA_CHECK(cudaStreamDestroy(c->comm_stream));
    delete c;
}
