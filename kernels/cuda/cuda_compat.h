// defines: what every .cu includes first: CUDA or its emulation, MHE_LAUNCH, checks, block reductions.
// What every .cu source includes first: the CUDA headers under nvcc, or the CPU emulation
// (emu/cuda_emu.h) when the same source is compiled as host C++ for the tests.  Also the
// checking macros and the shared block-reduction helpers.
#ifndef MHE_KERNELS_CUDA_COMPAT_H
#define MHE_KERNELS_CUDA_COMPAT_H

#include "kernels/cuda/cuda_cost.h"

#if defined(MHE_CUDA_EMU)
#include "kernels/cuda/emu/cuda_emu.h"
#else
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>
#include <nccl.h>
// Launch through one macro so the emulation (a function call) and nvcc (<<<>>>) share sources;
// `cost` (an MheCost) is recorded for the cost model first.  The if/else form keeps a
// following `else` bound to the caller's `if`.
#define MHE_LAUNCH(kernel, grid, block, shmem, stream, cost) \
    if (!mhe_cost_record(#kernel, (cost))) {                  \
    } else                                                    \
        kernel<<<(grid), (block), (shmem), (stream)>>>
#define MHE_DYNAMIC_SHARED(type, name)                               \
    extern __shared__ __align__(128) unsigned char mhe_dynamic_smem[]; \
    type *name = reinterpret_cast<type *>(mhe_dynamic_smem)
// A __shared__ variable: `MHE_SHARED(float, buf, [2][32]);` (the emulation gives each running
// block its own, so blocks can run concurrently there).
#define MHE_SHARED(type, name, dims) __shared__ type name dims
#endif

// Loop unrolling for nvcc (fragment arrays must stay in registers); g++ has no `unroll`.
#if defined(MHE_CUDA_EMU)
#define MHE_UNROLL
#else
#define MHE_UNROLL _Pragma("unroll")
#endif

// common/error.h is C11 (_Noreturn); the one function the CUDA side needs, declared for C++.
extern "C" [[noreturn]] void mhe_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Bad input (a config asking for what cannot run): exit status 2 (common/error.h).
extern "C" [[noreturn]] void mhe_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Threads per block of the row kernels.  The emulation runs one std::thread per CUDA thread,
// so it defaults to two warps (still exercising the cross-warp half of every reduction);
// MHE_EMU_BLOCK=32..1024 changes it at run time.
#if defined(MHE_CUDA_EMU)
#define MHE_BLOCK (mhe_emu_block_threads())
#define MHE_MAX_GRID 8
#else
#define MHE_BLOCK 256
#define MHE_MAX_GRID 4096
#endif

#define CUDA_CHECK(call)                                                                   \
    do {                                                                                   \
        cudaError_t mhe_e = (call);                                                        \
        if (mhe_e != cudaSuccess)                                                          \
            mhe_fatal("%s:%d: %s failed: %s", __FILE__, __LINE__, #call,                   \
                      cudaGetErrorString(mhe_e));                                          \
    } while (0)
#define CUBLAS_CHECK(call)                                                                 \
    do {                                                                                   \
        cublasStatus_t mhe_s = (call);                                                     \
        if (mhe_s != CUBLAS_STATUS_SUCCESS)                                                \
            mhe_fatal("%s:%d: %s failed: cublas status %d", __FILE__, __LINE__, #call,     \
                      (int)mhe_s);                                                         \
    } while (0)
// Kernel launches report errors asynchronously; this catches bad launch configurations.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// Blocks of 256 threads (the real build's MHE_BLOCK) covering `threads` threads: the real grid
// of a one-thread-per-item kernel, for the cost model (MheCost.blocks).
static inline double cuda_real_blocks(size_t threads) { return (double)((threads + 255) / 256); }

// Grid for a grid-stride loop over n elements.
static inline unsigned cuda_grid_for(size_t n) {
    size_t g = (n + MHE_BLOCK - 1) / MHE_BLOCK;
    if (g < 1) g = 1;
    return g > MHE_MAX_GRID ? MHE_MAX_GRID : (unsigned)g;
}

template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, <= 1024), returned to every thread.
// `buf` is __shared__ T[32] owned by the caller; reusable after the call returns.
template <typename T> __device__ __forceinline__ T block_sum(T v, T *buf) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // buf may still be read by a previous call
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    T total = lane < n_warps ? buf[lane] : T(0);
    return warp_sum(total);
}
__device__ __forceinline__ float block_max(float v, float *buf) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) buf[warp] = v;
    __syncthreads();
    float m = lane < n_warps ? buf[lane] : -INFINITY;
    return warp_max(m);
}

#endif
