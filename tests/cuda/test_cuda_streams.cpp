// Streams and events (kernels/cuda/README.md "Streams and the all-reduce"):
//   1. the emulation refuses what real CUDA would silently accept or crash on: a wait on an
//      event that was never recorded, handles that are not live, elapsed time of an
//      unrecorded event, a launch on a destroyed stream;
//   2. the cost model's two-stream timeline on hand-computable cases, through the real
//      overlapped NCCL path (cuda_nccl_allreduce_start / _finish over this process alone, an MPI
//      singleton, predicted for 8 ranks): kernels of exactly 100 us on A100 and all-reduces of
//      exactly 150 us, the step, busy times and exposed communication worked out below.
#include "kernels/cuda/cuda_compat.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" {
#include "kernels/backend_info.h"
}
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/cuda_nccl.h"

#include "tests/cuda/expect.h"

__global__ void nothing(int *p) {
    if (p) p[0] = 1;
}

static bool says(cudaError_t e, const char *what) { return std::strstr(cudaGetErrorString(e), what) != nullptr; }

static void misuse_is_refused() {
    cudaStream_t s;
    cudaEvent_t e, never;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreate(&e));
    CUDA_CHECK(cudaEventCreate(&never));

    cudaError_t r = cudaStreamWaitEvent(s, never, 0);
    EXPECT(r == cudaErrorInvalidValue && says(r, "never recorded"), "wait on an unrecorded event: %d %s", (int)r,
           cudaGetErrorString(r));
    float ms = 0;
    r = cudaEventElapsedTime(&ms, never, never);
    EXPECT(r != cudaSuccess && says(r, "never recorded"), "elapsed time of an unrecorded event: %d", (int)r);

    // Recorded on the legacy stream or on s, the same event may be waited on, repeatedly.
    CUDA_CHECK(cudaEventRecord(e, s));
    EXPECT(cudaStreamWaitEvent(nullptr, e, 0) == cudaSuccess, "wait on a recorded event");
    EXPECT(cudaStreamWaitEvent(s, e, 0) == cudaSuccess, "second wait on a recorded event");
    CUDA_CHECK(cudaEventRecord(never, nullptr));
    EXPECT(cudaStreamWaitEvent(s, never, 0) == cudaSuccess, "wait after a record on the legacy stream");

    CUDA_CHECK(cudaEventDestroy(e));
    r = cudaStreamWaitEvent(s, e, 0);
    EXPECT(r == cudaErrorInvalidResourceHandle && says(r, "not a live event"), "wait on a destroyed event: %d", (int)r);
    r = cudaEventRecord(e, s);
    EXPECT(r == cudaErrorInvalidResourceHandle, "record of a destroyed event: %d", (int)r);
    CUDA_CHECK(cudaStreamDestroy(s));
    r = cudaEventRecord(never, s);
    EXPECT(r == cudaErrorInvalidResourceHandle && says(r, "not a live stream"), "record on a destroyed stream: %d", (int)r);
    r = cudaStreamSynchronize(s);
    EXPECT(r == cudaErrorInvalidResourceHandle, "synchronize a destroyed stream: %d", (int)r);
    CUDA_CHECK(cudaEventDestroy(never));

    // A kernel launched on a destroyed stream ends the process with a message (in a child).
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) {
        MHE_LAUNCH(nothing, 1, 1, 0, s, mhe_cost(0, 0))(nullptr);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1, "launch on a destroyed stream: status %d", status);
}

// One kernel on the backend's stream costing exactly 100 us on A100: bytes / 2.039 TB/s = 96 us
// plus the 4 us launch.
static void kernel_100us(cudaStream_t s) { MHE_LAUNCH(nothing, 1, 1, 0, s, mhe_cost(0, 2.039e12 * 96e-6))(nullptr); }

static bool near(double got, double want_us) { return std::fabs(got - want_us * 1e-6) < 1e-9; }

static void timeline_predicts_overlap() {
    EXPECT(backend_cuda_cost_dry_run(1) == 1, "record-only mode");
    const GpuSpec *a100 = gpu_spec_find("a100");
    Backend *be = backend_cuda_create(0, 0);
    MPI_Comm world = MPI_COMM_WORLD;
    CudaNccl *nccl = cuda_nccl_create(&world, be, 10);
    cudaStream_t s = cuda_stream(be);
    // An 8-rank ring moves 2 * 7/8 of the buffer: 4,600,000 floats = 18.4 MB -> 32.2 MB at
    // 230 GB/s = 140 us, plus 10 us per call = 150 us.
    const size_t n = 4600000;
    float *g = static_cast<float *>(be->alloc(be, 2 * n * sizeof(float)));
    backend_cuda_cost_ranks(8);
    CostReport r;

    // Hidden: K | start | K K | finish | K.  Compute 0-100, 100-300, 300-400 (the sum, 100-250,
    // is done before the optimizer's kernel needs it): step 400, compute 400, comm 150,
    // exposed 0, without overlap 550.
    backend_cuda_cost_start();
    kernel_100us(s);
    cuda_nccl_allreduce_start(nccl, g, n);
    kernel_100us(s);
    kernel_100us(s);
    cuda_nccl_allreduce_finish(nccl);
    kernel_100us(s);
    backend_cuda_cost_stop(a100, &r);
    EXPECT(r.ranks == 8 && r.comm_calls == 1 && r.n_comm == 1, "ranks %d calls %ld", r.ranks, r.comm_calls);
    EXPECT(near(r.comm[0].start, 100) && near(r.comm[0].end, 250), "sum at %g-%g s", r.comm[0].start, r.comm[0].end);
    EXPECT(near(r.seconds, 400) && near(r.compute_seconds, 400) && near(r.comm_seconds, 150), "step %g compute %g comm %g",
           r.seconds, r.compute_seconds, r.comm_seconds);
    EXPECT(near(r.exposed_comm_seconds, 0) && near(r.serial_seconds, 550), "exposed %g serial %g", r.exposed_comm_seconds,
           r.serial_seconds);

    // Exposed: K | start | K | finish | K.  The compute stream reaches the wait at 200, the sum
    // ends at 250: 50 us exposed, the last kernel 250-350.
    backend_cuda_cost_start();
    kernel_100us(s);
    cuda_nccl_allreduce_start(nccl, g, n);
    kernel_100us(s);
    cuda_nccl_allreduce_finish(nccl);
    kernel_100us(s);
    backend_cuda_cost_stop(a100, &r);
    EXPECT(near(r.seconds, 350) && near(r.exposed_comm_seconds, 50) && near(r.serial_seconds, 450),
           "step %g exposed %g serial %g", r.seconds, r.exposed_comm_seconds, r.serial_seconds);

    // Two sums queue on the communication stream (100-250, 250-400) behind one kernel
    // (100-200): 200 us exposed, step 500.  Their order on the stream is the issue order.
    backend_cuda_cost_start();
    kernel_100us(s);
    cuda_nccl_allreduce_start(nccl, g, n);
    cuda_nccl_allreduce_start(nccl, g + n, n);
    kernel_100us(s);
    cuda_nccl_allreduce_finish(nccl);
    kernel_100us(s);
    backend_cuda_cost_stop(a100, &r);
    EXPECT(r.comm_calls == 2 && near(r.comm[1].start, 250) && near(r.comm[1].end, 400), "second sum at %g-%g",
           r.comm[1].start, r.comm[1].end);
    EXPECT(near(r.seconds, 500) && near(r.exposed_comm_seconds, 200), "step %g exposed %g", r.seconds,
           r.exposed_comm_seconds);

    // The timeline file has every call of the last step on its stream.
    char path[] = "/tmp/mhe_timeline_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "mkstemp");
    close(fd);
    EXPECT(backend_cuda_cost_write_timeline(path) == 0, "timeline written");
    FILE *f = std::fopen(path, "r");
    char line[256];
    int comm = 0, compute = 0;
    while (f && std::fgets(line, sizeof line, f)) {
        comm += std::strncmp(line, "comm\t", 5) == 0;
        compute += std::strncmp(line, "compute\t", 8) == 0;
    }
    if (f) std::fclose(f);
    std::remove(path);
    EXPECT(comm == 2 && compute == 3, "timeline: %d comm, %d compute lines", comm, compute);

    // One rank: the all-reduce costs nothing (no peer), the step is the compute alone.
    backend_cuda_cost_ranks(1);
    backend_cuda_cost_start();
    kernel_100us(s);
    cuda_nccl_allreduce_sum(nccl, g, n);
    kernel_100us(s);
    backend_cuda_cost_stop(a100, &r);
    EXPECT(near(r.seconds, 200) && near(r.comm_seconds, 0), "one rank: step %g comm %g", r.seconds, r.comm_seconds);

    be->free(be, g);
    cuda_nccl_free(nccl);
    be->destroy(be);
}

// A kernel whose real grid is smaller than the GPU (MheCost.blocks) runs on that share of its
// SMs: 96 us of bytes on all 108 SMs of an A100 take 96 * 108 / 3 us on 3 blocks, the launch
// still 4 us; 108 blocks or more (or 0: unspecified) take the plain 96 + 4.
static void small_grids_use_part_of_the_gpu() {
    EXPECT(backend_cuda_cost_dry_run(1) == 1, "record-only mode");
    const GpuSpec *a100 = gpu_spec_find("a100");
    Backend *be = backend_cuda_create(0, 0);
    cudaStream_t s = cuda_stream(be);
    const double blocks[4] = {3, 54, 108, 500}, want_us[4] = {96.0 * 36 + 4, 96.0 * 2 + 4, 100, 100};
    for (int i = 0; i < 4; i++) {
        CostReport r;
        backend_cuda_cost_start();
        MHE_LAUNCH(nothing, 1, 1, 0, s, mhe_cost_blocks(0, 2.039e12 * 96e-6, blocks[i]))(nullptr);
        backend_cuda_cost_stop(a100, &r);
        EXPECT(near(r.seconds, want_us[i]), "%g blocks: %g s, expected %g us", blocks[i], r.seconds, want_us[i]);
    }
    backend_cuda_cost_dry_run(0);
    be->destroy(be);
}

int main(int argc, char **argv) {
    misuse_is_refused();
    MPI_Init(&argc, &argv);
    timeline_predicts_overlap();
    small_grids_use_part_of_the_gpu();
    MPI_Finalize();
    if (failures) {
        std::fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    std::printf("PASS\n");
    return 0;
}
