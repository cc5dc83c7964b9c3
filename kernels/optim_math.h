// The one element-wise definition of AdamW and LAMB.  The host optimizer (trainer/train/optim.c,
// also the ZeRO-1 shard path), the CPU backend (cpu/cpu_optim.c) and the CUDA kernel
// (cuda/cuda_optim.cu, also under the emulation) all call these, so the backends and the
// host can differ only by the compiler's floating-point contraction (nvcc fuses multiply-adds),
// never by the formula.
//
// AdamW is in PyTorch's form (torch.optim.AdamW, foreach=False, capturable=False):
//   p *= 1 - lr wd;   p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)
// with bc1 = 1 - b1^t, bc2 = 1 - b2^t and the scalars computed in double and rounded once, as
// torch does with Python floats (optim_bias, adamw_scalars below: host only).
#ifndef MHE_KERNELS_OPTIM_MATH_H
#define MHE_KERNELS_OPTIM_MATH_H

#include <math.h>

#if defined(__CUDACC__)
#define MHE_OPTIM_INLINE __host__ __device__ static inline
#else
#define MHE_OPTIM_INLINE static inline
#endif

// The moments, in place: m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g².
MHE_OPTIM_INLINE void optim_moments(float *m, float *v, float g, float b1, float b2) {
    *m = b1 * *m + (1.0f - b1) * g;
    *v = b2 * *v + (1.0f - b2) * g * g;
}

// The new parameter from p and the already updated moments.  decay = 1 - lr wd (exactly 1 when
// wd = 0, so the multiply is exact), step_size = lr / bc1, bc2_sqrt = sqrt(bc2).
MHE_OPTIM_INLINE float adamw_param(float p, float m, float v, float step_size, float decay, float bc2_sqrt,
                                   float eps) {
    p *= decay;
    const float denom = sqrtf(v) / bc2_sqrt + eps;
    return p - step_size * (m / denom);
}

// The LAMB direction u = m̂ / (sqrt(v̂) + eps) + wd p from the updated moments; the caller
// scales it by lr times the trust ratio ‖p‖/‖u‖ of the whole tensor.
MHE_OPTIM_INLINE float lamb_direction_of(float p, float m, float v, float bc1, float bc2, float eps, float wd) {
    const float mh = m / bc1, vh = v / bc2;
    return mh / (sqrtf(vh) + eps) + wd * p;
}

// Host-side scalars.  Bias corrections of step t (>= 1), powers in double rounded once.
typedef struct {
    float bc1, bc2, bc2_sqrt;
} OptimBias;
static inline OptimBias optim_bias(float b1, float b2, long long t) {
    const double bc2 = 1.0 - pow(b2, (double)t);
    OptimBias r = {(float)(1.0 - pow(b1, (double)t)), (float)bc2, (float)sqrt(bc2)};
    return r;
}

// AdamW's per-tensor scalars from lr, the tensor's weight decay and bc1.
typedef struct {
    float step_size, decay;
} AdamwScalars;
static inline AdamwScalars adamw_scalars(float lr, float wd, float bc1) {
    AdamwScalars r = {(float)((double)lr / bc1), (float)(1.0 - (double)lr * wd)};
    return r;
}

#endif
