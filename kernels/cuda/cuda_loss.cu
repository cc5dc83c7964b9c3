// defines: the fused softmax cross-entropy forward and backward (fp32 or bf16 logits).
// The fused softmax cross-entropy: one block per row, block reductions (warp shuffles + shared
// memory), the statistics and the loss in fp32 (the sum of exponentials in double).  One pass over
// the logits forward (the online softmax's running max and sum) and one backward (the gradient
// written over the logits, in bf16 in bf16 mode): no fp32 probabilities of V columns are stored.
//
// bf16 logits: in bf16 mode the logits and their gradient are bf16 activations; both kernels read
// them as such — the loss from bf16 logits, computed in fp32, as PyTorch's autocast gives it — at
// half the bytes of the largest activation of a GPT step ([B·T, V]).
#include <cmath>
#include <cstdint>

#include "kernels/cuda/cuda_internal.h"

__device__ __forceinline__ float logit(const float *z, int v) { return z[v]; }
__device__ __forceinline__ float logit(const __nv_bfloat16 *z, int v) { return __bfloat162float(z[v]); }

// loss = lse - z[label],  lse = max + log sum exp(z - max);  rows with label < 0 give 0, 0.
// One pass over the row (online softmax): each thread keeps a running max m and Σ exp(z - m),
// rescaled when m grows; the block then takes the largest m and adds every thread's sum rescaled to
// it.  The row is read once, not once for the max and again for the sum (GPT-2's rows are 100 KB).
template <typename T>
__global__ void cross_entropy_forward_kernel(const T *logits, const int32_t *labels, int V, size_t ld, float *loss,
                                             float *lse) {
    MHE_SHARED(float, fbuf, [32]);
    MHE_SHARED(double, dbuf, [32]);
    int r = blockIdx.x, label = labels[r];
    if (label < 0) {  // uniform over the block: no thread reaches a barrier
        if (threadIdx.x == 0) loss[r] = lse[r] = 0.0f;
        return;
    }
    const T *z = logits + r * ld;
    float m = -INFINITY;
    double s = 0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const float x = logit(z, v);
        if (x > m) {
            s *= (double)expf(m - x);  // 0 while m is -inf (s is 0 then too)
            m = x;
        }
        s += (double)expf(x - m);
    }
    const float mx = block_max(m, fbuf);
    s = block_sum(m == -INFINITY ? 0.0 : s * (double)expf(m - mx), dbuf);
    if (threadIdx.x == 0) {
        double l = mx + log(s);
        lse[r] = (float)l;
        loss[r] = (float)(l - logit(z, label));
    }
}

// dlogits = grad_scale * (softmax(z) - onehot(label)), zeros in the row's padding [V, ld); each
// element read and written by the same thread, so dlogits may alias logits (in bf16 mode z and dlb
// the same memory).
template <typename T>
__global__ void cross_entropy_backward_kernel(const T *logits, const float *lse, const int32_t *labels, int V,
                                              size_t ld, float grad_scale, float *dlogits, __nv_bfloat16 *dlb) {
    int r = blockIdx.x, label = labels[r];
    const T *z = logits + r * ld;
    float *g = dlogits ? dlogits + r * ld : nullptr;  // nullptr: bf16 mode, dlb only
    __nv_bfloat16 *gb = dlb ? dlb + r * ld : nullptr;
    float l = label < 0 ? 0.0f : lse[r];
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        store_dual(g, gb, v, label < 0 ? 0.0f : grad_scale * (expf(logit(z, v) - l) - (v == label ? 1.0f : 0.0f)));
    for (int v = V + threadIdx.x; v < (int)ld; v += blockDim.x) store_dual(g, gb, v, 0.0f);
}

// The same two kernels on bf16 rows whose stride is a multiple of 8 (the model's padded logits,
// ops_head_ld): 16-byte loads and stores of 8 logits, and in the forward a thread's running sum in
// float (a few hundred terms, each at most 1 after the rescale; the block's sum stays in double).
// The scalar kernels move 2 bytes per access: on an H200 they ran at 22% (forward) and 29%
// (backward) of the memory bandwidth on GPT-2's [16384, 50304] logits (CALIBRATION.md run 7).
__global__ void cross_entropy_forward_vec_kernel(const __nv_bfloat16 *logits, const int32_t *labels, int V, size_t ld,
                                                 float *loss, float *lse) {
    MHE_SHARED(float, fbuf, [32]);
    MHE_SHARED(double, dbuf, [32]);
    const int r = blockIdx.x, label = labels[r];
    if (label < 0) {  // uniform over the block: no thread reaches a barrier
        if (threadIdx.x == 0) loss[r] = lse[r] = 0.0f;
        return;
    }
    const __nv_bfloat16 *z = logits + r * ld;
    const int full = V / 8;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x; j <= full; j += blockDim.x) {
        float x[8];
        int k_end = 8;
        if (j < full) {
            const uint4 v = reinterpret_cast<const uint4 *>(z)[j];
            const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(&v);
#pragma unroll
            for (int k = 0; k < 8; k++) x[k] = __bfloat162float(h[k]);
        } else {  // the tail: V % 8 logits
            k_end = V - 8 * full;
            for (int k = 0; k < k_end; k++) x[k] = __bfloat162float(z[8 * full + k]);
        }
        float mj = m;
        for (int k = 0; k < k_end; k++) mj = fmaxf(mj, x[k]);
        if (mj > m) {
            s *= expf(m - mj);  // 0 while m is -inf (s is 0 then too)
            m = mj;
        }
        for (int k = 0; k < k_end; k++) s += expf(x[k] - m);
    }
    const float mx = block_max(m, fbuf);
    const double total = block_sum(m == -INFINITY ? 0.0 : (double)s * (double)expf(m - mx), dbuf);
    if (threadIdx.x == 0) {
        const double l = mx + log(total);
        lse[r] = (float)l;
        loss[r] = (float)(l - __bfloat162float(z[label]));
    }
}

__global__ void cross_entropy_backward_vec_kernel(const __nv_bfloat16 *logits, const float *lse, const int32_t *labels,
                                                  int V, size_t ld, float grad_scale, __nv_bfloat16 *dlb) {
    const int r = blockIdx.x, label = labels[r];
    const uint4 *z = reinterpret_cast<const uint4 *>(logits + r * ld);
    uint4 *g = reinterpret_cast<uint4 *>(dlb + r * ld);
    const float l = label < 0 ? 0.0f : lse[r];
    for (int j = threadIdx.x; j < (int)(ld / 8); j += blockDim.x) {
        const uint4 in = z[j];
        const __nv_bfloat16 *h = reinterpret_cast<const __nv_bfloat16 *>(&in);
        uint4 out;
        __nv_bfloat16 *o = reinterpret_cast<__nv_bfloat16 *>(&out);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int v = 8 * j + k;
            const float d = label < 0 || v >= V
                                ? 0.0f
                                : grad_scale * (expf(__bfloat162float(h[k]) - l) - (v == label ? 1.0f : 0.0f));
            o[k] = __float2bfloat16(d);
        }
        g[j] = out;
    }
}

// bf16 rows on 16 bytes: the vector kernels.
static bool ce_vec(const void *a, const void *b, int ld) {
    return ld % 8 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 && (!b || reinterpret_cast<uintptr_t>(b) % 16 == 0);
}

static void cuda_cross_entropy_forward(Backend *be, const float *logits, const int32_t *labels, int N, int V,
                                       int ld, float *loss, float *lse) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote(be, loss, (size_t)N * sizeof(float));
    cuda_fp32_wrote(be, lse, (size_t)N * sizeof(float));
    const __nv_bfloat16 *zb = act_in(be, logits);
    const double el = zb ? 2.0 : 4.0;
    const MheCost cost = mhe_cost(4.0 * N * V, el * N * V + 12.0 * N);
    cudaStream_t st = cuda_stream(be);
    if (N && zb && ce_vec(zb, nullptr, ld))
        MHE_LAUNCH(cross_entropy_forward_vec_kernel, N, MHE_BLOCK, 0, st, cost)(zb, labels, V, (size_t)ld, loss, lse);
    else if (N && zb)
        MHE_LAUNCH(cross_entropy_forward_kernel<__nv_bfloat16>, N, MHE_BLOCK, 0, st, cost)(zb, labels, V, (size_t)ld, loss, lse);
    else if (N)
        MHE_LAUNCH(cross_entropy_forward_kernel<float>, N, MHE_BLOCK, 0, st, cost)(logits, labels, V, (size_t)ld, loss, lse);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_LOSS, t0, 0);
}

static void cuda_cross_entropy_backward(Backend *be, const float *logits, const float *lse, const int32_t *labels,
                                        int N, int V, int ld, float grad_scale, float *dlogits) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *zb = act_in(be, logits);
    float *dlw;
    __nv_bfloat16 *dlb = act_out(be, dlogits, &dlw);
    // The logits read over V, the gradient stored over ld (the padding's zeros).
    const MheCost cost = with_act_store(mhe_cost(4.0 * N * V, (zb ? 2.0 : 4.0) * N * V + 4.0 * N * ld + 8.0 * N), dlb,
                                        dlw, (double)N * ld);
    cudaStream_t st = cuda_stream(be);
    if (N && zb && dlb && !dlw && ce_vec(zb, dlb, ld))
        MHE_LAUNCH(cross_entropy_backward_vec_kernel, N, MHE_BLOCK, 0, st, cost)(zb, lse, labels, V, (size_t)ld, grad_scale, dlb);
    else if (N && zb)
        MHE_LAUNCH(cross_entropy_backward_kernel<__nv_bfloat16>, N, MHE_BLOCK, 0, st, cost)(zb, lse, labels, V, (size_t)ld, grad_scale, dlw, dlb);
    else if (N)
        MHE_LAUNCH(cross_entropy_backward_kernel<float>, N, MHE_BLOCK, 0, st, cost)(logits, lse, labels, V, (size_t)ld, grad_scale, dlw, dlb);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_LOSS, t0, 0);
}

// The op table's signatures (ops.h's Act for the logits) over the fp32 implementations above.
static void act_cross_entropy_forward(Backend *be, const Act *logits, const int32_t *labels, int N, int V, int ld,
                                      float *loss, float *lse) {
    if (ld < V) mhe_fatal("cross_entropy_forward: row stride %d below the width %d", ld, V);
    cuda_cross_entropy_forward(be, af(logits), labels, N, V, ld, loss, lse);
}
static void act_cross_entropy_backward(Backend *be, const Act *logits, const float *lse, const int32_t *labels, int N,
                                       int V, int ld, float grad_scale, Act *dlogits) {
    if (ld < V) mhe_fatal("cross_entropy_backward: row stride %d below the width %d", ld, V);
    cuda_cross_entropy_backward(be, af(logits), lse, labels, N, V, ld, grad_scale, af(dlogits));
}

void cuda_install_loss(Backend *be) {
    be->cross_entropy_forward = act_cross_entropy_forward;
    be->cross_entropy_backward = act_cross_entropy_backward;
}
