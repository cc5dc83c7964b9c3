// defines: the reductions over a whole buffer: sum of squares (the global gradient norm), per-block
// partials in double, added in a fixed order on the host.
#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

// Per-block partial sums of x² in double (warp shuffles + shared memory).
__global__ void sum_squares_kernel(const float *x, size_t n, double *partials) {
    MHE_SHARED(double, buf, [32]);
    double s = 0;
    GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    s = block_sum(s, buf);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
static double cuda_sum_squares(Backend *be, const float *x, size_t n) {
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    if (!n) return 0.0;
    cuda_colsum_flush(be);  // the gradient norm reads what waits
    MHE_LAUNCH(sum_squares_kernel, CUDA_SUM_BLOCKS, MHE_BLOCK, 0, c->stream, mhe_cost_blocks(2.0 * n, 4.0 * n + 8.0 * CUDA_SUM_BLOCKS, CUDA_SUM_BLOCKS))(x, n, c->partials);
    CUDA_CHECK_LAUNCH();
    const size_t pb = CUDA_SUM_BLOCKS * sizeof(double);
    if (mhe_cost_record("memcpy d2h", MheCost{0, 0, (double)pb, (double)pb, 0}))
        CUDA_CHECK(cudaMemcpyAsync(c->host_partials, c->partials, pb, cudaMemcpyDeviceToHost, c->stream));
    cuda_stream_sync(be, "sum_squares");
    double s = 0;
    for (int b = 0; b < CUDA_SUM_BLOCKS; b++) s += c->host_partials[b];
    cuda_prof_end(be, OPC_OTHER, t0, 0);
    return s;
}

void cuda_install_reduce(Backend *be) { be->sum_squares = cuda_sum_squares; }
