// defines: the C interface of the cuDNN attention core's graphs (cuda_attn_cudnn.cpp).
// The C face of the cuDNN attention core's one C++17 translation unit (cuda_attn_cudnn.cpp):
// cuDNN's fused SDPA (flash) forward and backward through the cuDNN frontend's graph API.
// Everything here is host code; the frontend's headers stay inside that one file (they take
// over a minute to compile).  cuDNN itself is opened at run time (dlopen), so a build or a
// machine without it only loses this core.
#ifndef MHE_KERNELS_CUDA_ATTN_CUDNN_H
#define MHE_KERNELS_CUDA_ATTN_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One SDPA call's graph, with tensors as cuDNN sees them: dims [B, H, S, D], strides in
// elements in that order.  Two calls with equal descriptors share one built graph.
typedef struct {
    int64_t B, T, hq, hk, hv, dqk, dv;
    int64_t q_stride[4], k_stride[4], v_stride[4], o_stride[4];
    int64_t bias_stride[4];       // [B, hq, 1, T] when bias
    float scale;
    float dropout;                // 0: none
    int causal;
    int padding;                  // per-sequence key lengths (trailing padding), seq_len tensors
    int bias;                     // additive per-key bias [B, hq, 1, T] (bf16)
    int backward;                 // the backward graph (dbias when bias)
} CudnnSdpa;

// Loads cuDNN once (libcudnn.so.9 from the loader's path, then MHE_CUDNN_LIB); 1 when usable,
// else 0 with the reason in why (absent, too old for the frontend).
int mhe_cudnn_load(char *why, size_t why_len);
// The loaded cuDNN's version (e.g. 91900), 0 when none; the frontend's, compiled in.
long mhe_cudnn_version(void);
long mhe_cudnn_frontend_version(void);

// Builds d's graph without a device for compute capability sm (e.g. 90) and runs the frontend's
// validation: 1 when valid, else 0 with the reason.  Needs mhe_cudnn_load.
int mhe_cudnn_validate(const CudnnSdpa *d, int sm, char *why, size_t why_len);

// Builds (once per device, cached) d's graph with execution plans on the current device, which
// is `device`: 1 and the workspace bytes it needs, or 0 with the reason (validation, support
// check, no plan).
int mhe_cudnn_prepare(const CudnnSdpa *d, int device, size_t *workspace_bytes, char *why, size_t why_len);

// The device pointers of one call.  seq_q / seq_kv: int32 [B] when padding; bias, dbias:
// bf16 [B, hq, 1, T] with bias_stride when bias; stats: fp32 [B, hq, T] (the row log-sum-exp).
typedef struct {
    const void *q, *k, *v, *o, *dout, *bias;
    void *out, *dq, *dk, *dv, *dbias;
    float *stats;
    const int32_t *seq_q, *seq_kv;
    int64_t seed, offset;         // dropout's Philox stream
    void *workspace;
} CudnnSdpaArgs;

// Runs d's graph on the current device, `device` (forward: q, k, v -> out, stats; backward: q, k, v, o, dout, stats -> dq, dk,
// dv [, dbias]) on stream (a cudaStream_t); 1 on success, else 0 with the reason.
int mhe_cudnn_run(const CudnnSdpa *d, int device, void *stream, const CudnnSdpaArgs *a, char *why,
                  size_t why_len);

#ifdef __cplusplus
}
#endif

#endif
