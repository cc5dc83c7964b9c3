// defines: the elementwise arithmetic of the residual stream (add, axpy, scale, add_scalar, mul,
// mul_acc).
#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

enum { EW_ADD, EW_AXPY, EW_SCALE, EW_ADD_SCALAR, EW_MUL, EW_MUL_ACC };

__global__ void elementwise_kernel(int op, const float *a, const float *b, float c, float *out,
                                   __nv_bfloat16 *outb, size_t n) {
    GRID_STRIDE(i, n) {
        float r;
        switch (op) {
        case EW_ADD: r = a[i] + b[i]; break;
        case EW_AXPY: r = out[i] + c * a[i]; break;
        case EW_SCALE: r = out[i] * c; break;
        case EW_ADD_SCALAR: r = a[i] + c; break;
        case EW_MUL: r = a[i] * b[i]; break;
        default: r = out[i] + a[i] * b[i]; break;
        }
        store_dual(out, outb, i, r);
    }
}

// FLOPs and bytes per element of each op (reads + writes of 4 bytes).
static MheCost ew_cost(int op, size_t n) {
    static const double flops[] = {1, 2, 1, 1, 1, 2}, words[] = {3, 3, 2, 2, 3, 4};
    return mhe_cost(flops[op] * n, 4.0 * words[op] * n);
}
static void elementwise(Backend *be, int op, const float *a, const float *b, float c, float *out, size_t n) {
    double t0 = cuda_prof_begin(be);
    cuda_colsum_flush(be);  // a parameter gradient's reader (cuda_colsum.cu)
    __nv_bfloat16 *outb = cuda_fp32_copy_out(be, out, n);
    if (n) MHE_LAUNCH(elementwise_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(ew_cost(op, n), outb, n))(op, a, b, c, out, outb, n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_add(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_ADD, a, b, 0, out, n); }
static void cuda_axpy(Backend *be, float alpha, const float *x, float *y, size_t n) { elementwise(be, EW_AXPY, x, nullptr, alpha, y, n); }
static void cuda_scale(Backend *be, float *x, float alpha, size_t n) { elementwise(be, EW_SCALE, nullptr, nullptr, alpha, x, n); }
static void cuda_add_scalar(Backend *be, const float *x, float c, float *out, size_t n) { elementwise(be, EW_ADD_SCALAR, x, nullptr, c, out, n); }
static void cuda_mul(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_MUL, a, b, 0, out, n); }
static void cuda_mul_acc(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_MUL_ACC, a, b, 0, out, n); }

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) { cuda_add(be, af(a), af(b), af(out), n); }
void cuda_install_elementwise(Backend *be) {
    be->add = act_add;
    be->axpy = cuda_axpy;
    be->scale = cuda_scale;
    be->add_scalar = cuda_add_scalar;
    be->mul = cuda_mul;
    be->mul_acc = cuda_mul_acc;
}

// bf16 activations (bf16 mode): add on the pre-LN residual stream, fp32 inside.
__global__ void act_add_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, __nv_bfloat16 *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
static void bf16_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) {
    double t0 = cuda_prof_begin(be);
    if (n) MHE_LAUNCH(act_add_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)n, 6.0 * n))(ab(a), ab(b), ab(out), n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
void cuda_install_elementwise_bf16(Backend *be) { be->add = bf16_add; }
