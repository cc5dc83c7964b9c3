// defines: bf16 activation mode's switch and its conversions (be->act == DT_BF16, a bf16 run):
// cuda_install_act_bf16 (Backend.act, the fp32 op table kept for the staged ops), the widening and
// rounding kernels between bf16 storage and fp32 (cuda_act_stage.h: Stage), and the host
// boundary's upload_act / download_act through an fp32 staging buffer.
//
// Every Act buffer holds __nv_bfloat16, with fp32 arithmetic inside each op and one rounding
// when it stores.  The element type of a buffer is ops.h's Act, fixed for the backend's life, so
// nothing tracks which copy is current.  Each family's file installs its own bf16 ops after this
// switch (backend_cuda_create): the matmul on bf16 operands (cuda_matmul.cu; an fp32 operand, a
// weight, from the bf16 copy of its allocation, cuda_weight_copy.cu), the linear layers
// (cuda_linear.cu), the bias (cuda_bias.cu), add (cuda_elementwise.cu), layernorm_forward
// (cuda_layernorm.cu) and the staged attention core (cuda_attention.cu).  The ops whose kernels
// read and store bf16 (GELU, dropout, the residual step, BERT's embedding block, LayerNorm's
// backwards, the per-head broadcast and its backwards, the cross-entropy, the tensor-core
// attention) run on the bf16 buffers themselves (cuda_internal.h's act_in/act_out name the
// buffer in this mode); tanh, the row gather and scatter and the embeddings' two ops have kernels
// templated on the element type (cuda_activation.cu, cuda_rows.cu, cuda_embedding.cu).
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_act_stage.h"

// y[r * ldy + c] = T(x[r * ldx + c]) for a [rows, cols] matrix: widening and rounding (round to
// nearest even) between bf16 storage and fp32 staging.
__global__ void act_widen_kernel(const __nv_bfloat16 *__restrict__ x, size_t ldx, float *__restrict__ y, size_t ldy,
                                 size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (size_t)blockDim.x * gridDim.x)
        y[(i / cols) * ldy + i % cols] = __bfloat162float(x[(i / cols) * ldx + i % cols]);
}
__global__ void act_round_kernel(const float *__restrict__ x, size_t ldx, __nv_bfloat16 *__restrict__ y, size_t ldy,
                                 size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (size_t)blockDim.x * gridDim.x)
        y[(i / cols) * ldy + i % cols] = __float2bfloat16(x[(i / cols) * ldx + i % cols]);
}
void cuda_act_widen(Backend *be, const __nv_bfloat16 *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols) {
    const size_t n = rows * cols;
    if (n) MHE_LAUNCH(act_widen_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, ldx, y, ldy, rows, cols);
    CUDA_CHECK_LAUNCH();
}
void cuda_act_round(Backend *be, const float *x, size_t ldx, __nv_bfloat16 *y, size_t ldy, size_t rows, size_t cols) {
    const size_t n = rows * cols;
    if (n) MHE_LAUNCH(act_round_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, ldx, y, ldy, rows, cols);
    CUDA_CHECK_LAUNCH();
}

// The host boundary: fp32 host data through staging buffer 0, rounded or widened on the device.
static void act_upload(Backend *be, Act *dst, const float *host_src, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    float *f = cuda_grow(be, c->stage[0], c->stage_cap[0], n ? n : 1);
    be->upload(be, f, host_src, n * sizeof(float));
    cuda_act_round(be, f, n, ab(dst), n, 1, n);
}
static void act_download(Backend *be, float *host_dst, const Act *src, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    float *f = cuda_grow(be, c->stage[0], c->stage_cap[0], n ? n : 1);
    cuda_act_widen(be, ab(src), n, f, n, 1, n);
    be->download(be, host_dst, f, n * sizeof(float));
}

void cuda_install_act_bf16(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    Backend *inner = static_cast<Backend *>(std::malloc(sizeof(Backend)));
    if (!inner) mhe_fatal("out of memory creating the CUDA backend");
    std::memcpy(inner, be, sizeof *be);
    c->f32 = inner;
    be->act = DT_BF16;
    be->upload_act = act_upload;
    be->download_act = act_download;
}
