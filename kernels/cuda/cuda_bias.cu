// defines: the bias of the linear layers when it is not fused into their GEMM (cuda_linear.cu's
// cuBLASLt epilogues are the usual path): bias_add and bias_backward on fp32 rows and (bf16 mode)
// bf16 activations, and the same backward over rows ld apart (the padded vocabulary head,
// cuda_pad_ld.cu).  The column sums take one thread per column, rows in order: deterministic.
#include "kernels/cuda/cuda_internal.h"

__global__ void bias_add_kernel(float *y, __nv_bfloat16 *yb, const float *bias, size_t total, int C) {
    GRID_STRIDE(i, total) store_dual(y, yb, i, y[i] + bias[i % C]);
}
__global__ void bias_backward_kernel(const float *dy, int N, int C, size_t ld, float *dbias) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int r = 0; r < N; r++) s += dy[(size_t)r * ld + c];
    dbias[c] += s;
}

static void cuda_bias_add(Backend *be, float *y, const float *bias, int N, int C) {
    double t0 = cuda_prof_begin(be);
    size_t total = (size_t)N * C;
    __nv_bfloat16 *yb = cuda_fp32_copy_out(be, y, total);
    if (total) MHE_LAUNCH(bias_add_kernel, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(mhe_cost((double)total, 8.0 * total + 4.0 * C), yb, total))(y, yb, bias, total, C);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// dbias[c] += sum_r dy[r, c], dy's rows ld apart
void cuda_bias_backward_ld(Backend *be, const float *dy, int N, int C, int ld, float *dbias) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote(be, dbias, (size_t)C * sizeof(float));
    if (C) MHE_LAUNCH(bias_backward_kernel, cols_grid(C), MHE_BLOCK, 0, cuda_stream(be), mhe_cost_blocks((double)N * C, 4.0 * N * C + 8.0 * C, cuda_real_blocks(C)))(dy, N, C, (size_t)ld, dbias);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_bias_backward(Backend *be, const float *dy, int N, int C, float *dbias) {
    cuda_bias_backward_ld(be, dy, N, C, C, dbias);
}

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_bias_add(Backend *be, Act *y, const float *bias, int N, int C) { cuda_bias_add(be, af(y), bias, N, C); }
static void act_bias_backward(Backend *be, const Act *dy, int N, int C, float *dbias) {
    cuda_bias_backward(be, af(dy), N, C, dbias);
}

// bf16 activations (bf16 mode): the same on bf16 rows, fp32 inside.

__global__ void act_bias_add_kernel(__nv_bfloat16 *y, const float *bias, size_t total, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)blockDim.x * gridDim.x)
        y[i] = __float2bfloat16(__bfloat162float(y[i]) + bias[i % C]);
}
// One thread per column, rows in order: deterministic (the fp32 backend's bias_backward too).
__global__ void act_bias_backward_kernel(const __nv_bfloat16 *dy, int N, int C, size_t ld, float *dbias) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int r = 0; r < N; r++) s += __bfloat162float(dy[(size_t)r * ld + c]);
    dbias[c] += s;
}
static void bf16_bias_add(Backend *be, Act *y, const float *bias, int N, int C) {
    double t0 = cuda_prof_begin(be);
    const size_t total = (size_t)N * C;
    if (total) MHE_LAUNCH(act_bias_add_kernel, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)total, 4.0 * total + 4.0 * C))(ab(y), bias, total, C);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
void cuda_act_bias_backward_ld(Backend *be, const Act *dy, int N, int C, int ld, float *dbias) {
    double t0 = cuda_prof_begin(be);
    const unsigned blocks = (unsigned)((C + MHE_BLOCK - 1) / MHE_BLOCK);
    cuda_fp32_wrote_alloc(be, dbias);
    if (C) MHE_LAUNCH(act_bias_backward_kernel, blocks, MHE_BLOCK, 0, cuda_stream(be), mhe_cost_blocks((double)N * C, 2.0 * N * C + 8.0 * C, cuda_real_blocks(C)))(ab(dy), N, C, (size_t)ld, dbias);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void bf16_bias_backward(Backend *be, const Act *dy, int N, int C, float *dbias) {
    cuda_act_bias_backward_ld(be, dy, N, C, C, dbias);
}

void cuda_install_bias(Backend *be) {
    be->bias_add = act_bias_add;
    be->bias_backward = act_bias_backward;
}
void cuda_install_bias_bf16(Backend *be) {
    be->bias_add = bf16_bias_add;
    be->bias_backward = bf16_bias_backward;
}
