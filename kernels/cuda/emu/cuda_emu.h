// defines: the CPU emulation of CUDA's runtime, cuBLAS(Lt), NCCL, launches and WMMA (test infrastructure).
// CPU emulation of the slice of CUDA that kernels/cuda/*.cu use, so the same sources run in CI
// without a GPU (DESIGN.md §7).  Test infrastructure only: built into `mhecuda_emu`, never
// into the release binary.  Semantics kept (see README.md):
//   - the threads of a block run concurrently as std::threads, so __syncthreads is a real
//     barrier and races show up under TSan; barriers and launches are checked (cuda_emu_launch.cpp);
//   - warp shuffles go through a per-warp exchange array guarded by a per-warp barrier;
//   - shared memory (MHE_SHARED, MHE_DYNAMIC_SHARED) belongs to the running block, filled with
//     0xff bytes before each; blocks run in order, or shuffled and several at a time;
//   - memory, streams and events live on the host; work on a stream runs synchronously; stream
//     and event use is checked (live handles, waits only on recorded events, README.md);
//   - cuBLAS is served by OpenBLAS with cuBLAS's column-major semantics, NCCL by MPI;
//   - bf16 is the toolkit's own cuda_bf16.h, whose conversions are host-callable.
// The toolkit headers are included for their types only; every function the sources call is
// redirected by a macro to an mhe_emu_* function, so nothing links against libcudart.
#ifndef MHE_KERNELS_CUDA_EMU_CUDA_EMU_H
#define MHE_KERNELS_CUDA_EMU_CUDA_EMU_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <nccl.h>

#include "kernels/cuda/cuda_cost.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <source_location>
#include <string>
#include <type_traits>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
// Shared variables are declared with MHE_SHARED (below), one per running block.
#define __shared__ static_assert(false, "declare __shared__ variables with MHE_SHARED(type, name, dims)");
#define __launch_bounds__(...)

namespace mhe_emu {

constexpr int WARP = 32;

struct Warp {
    uint64_t slot[2][WARP];  // double-buffered: one barrier per shuffle suffices
};
struct Block;  // one running block: its barriers and what each thread arrived at (cuda_emu_launch.cpp)

// Each emulated CUDA thread is a fiber (an OS thread under ThreadSanitizer); these are its
// built-in variables.
struct ThreadState {
    uint3 thread_idx, block_idx;
    dim3 block_dim, grid_dim;
    int lane, linear;
    int shuffle_phase;  // which slot buffer the next shuffle of this lane uses
    int block_phase, warp_phase;  // block / warp barriers this thread has arrived at
    Block *block;
    Warp *warp;
    unsigned char *dynamic_shared, *static_shared;
    const char *kernel;  // for messages
};
inline thread_local ThreadState self;

// What a thread waits at: the barriers of a block and of a warp check that every thread arrived
// at the same one (cuda_emu_launch.cpp), and a barrier that can never complete (a shuffle some
// lanes of the warp will not reach before a __syncthreads, or after they returned) is reported
// instead of hanging.
enum Arrive { ARRIVE_SYNCTHREADS, ARRIVE_EXIT, ARRIVE_SHUFFLE, ARRIVE_SYNCWARP };
void block_arrive(Arrive what, const char *file, unsigned line);
void warp_arrive(Arrive what, const char *file, unsigned line);
// A broken rule inside a kernel: the message, naming the kernel, block and thread, then abort.
[[noreturn]] void kernel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// The kernel's name as the ptxas table spells it, from the launch's function pointer.
std::string kernel_name_from(const char *pretty_function);
template <auto F> const char *kernel_name() {
    static const std::string name = kernel_name_from(__PRETTY_FUNCTION__);
    return name.c_str();
}

// Runs body once per (block, thread); the threads of a block concurrently, the blocks in order or
// (MHE_EMU_SHUFFLE) in a seeded shuffled order, several at a time.  Before it runs, the launch
// is checked against the limits of the GPUs the real build targets (sm_80, sm_90): block and
// grid dimensions, static + dynamic shared memory (more than 48 KB needs the kernel's
// cudaFuncAttributeMaxDynamicSharedMemorySize raised first) and registers x threads, the
// per-kernel figures from ptxas (`file` says whether it is a product kernel, which must have them).
void launch(const void *kernel, const char *name, const char *file, dim3 grid, dim3 block,
            size_t dynamic_shared_bytes, const std::function<void()> &body);
// cudaFuncSetAttribute: MaxDynamicSharedMemorySize up to the sm_90 limit (227 KB).
cudaError_t func_set_attribute(const void *kernel, cudaFuncAttribute attr, int value);
// Figures for a kernel ptxas never saw (tests' own kernels): registers per thread and static
// shared bytes on both architectures.
void set_resources(const char *name, int registers, int static_shared_bytes);

// Shuffles take all lanes of the warp (the only mask the sources use).
inline void check_full_mask(unsigned mask, const char *what) {
    const int lanes = (int)(self.block_dim.x * self.block_dim.y * self.block_dim.z) - (self.linear / WARP) * WARP;
    const unsigned full = lanes >= WARP ? 0xffffffffu : (1u << lanes) - 1u;
    if (mask != full) kernel_fail("%s with mask %#x: the emulation supports whole warps only (%#x)", what, mask, full);
}

template <typename T> T shuffle(T v, int src_lane, bool keep_own, const std::source_location &loc) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
    // A lane can only start the shuffle after next (which reuses this buffer) once every lane
    // has arrived at the next one's barrier, i.e. has finished reading this one.
    uint64_t *slot = self.warp->slot[self.shuffle_phase];
    self.shuffle_phase ^= 1;
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    slot[self.lane] = bits;
    warp_arrive(ARRIVE_SHUFFLE, loc.file_name(), loc.line());  // every lane has published
    T out = v;
    if (!keep_own) std::memcpy(&out, &slot[src_lane], sizeof out);
    return out;
}

// WMMA loads and stores take a 256-bit aligned pointer and a leading dimension that is a
// multiple of 16 bytes (8 bf16, 4 floats), as the PTX wmma.load/store require.
inline void check_wmma(const char *what, const void *p, unsigned ldm, size_t elem) {
    if (reinterpret_cast<uintptr_t>(p) % 32)
        kernel_fail("wmma::%s: pointer %p is not 32-byte aligned", what, p);
    if ((ldm * elem) % 16)
        kernel_fail("wmma::%s: ldm %u is not a multiple of %zu elements", what, ldm, 16 / elem);
}

}  // namespace mhe_emu

#define threadIdx (mhe_emu::self.thread_idx)
#define blockIdx (mhe_emu::self.block_idx)
#define blockDim (mhe_emu::self.block_dim)
#define gridDim (mhe_emu::self.grid_dim)
#define warpSize (mhe_emu::WARP)

inline void __syncthreads(std::source_location loc = std::source_location::current()) {
    mhe_emu::block_arrive(mhe_emu::ARRIVE_SYNCTHREADS, loc.file_name(), loc.line());
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location loc = std::source_location::current()) {
    mhe_emu::check_full_mask(mask, "__syncwarp");
    mhe_emu::warp_arrive(mhe_emu::ARRIVE_SYNCWARP, loc.file_name(), loc.line());
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int = 32, std::source_location loc = std::source_location::current()) {
    mhe_emu::check_full_mask(mask, "__shfl_xor_sync");
    return mhe_emu::shuffle(v, mhe_emu::self.lane ^ lane_mask, false, loc);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int = 32, std::source_location loc = std::source_location::current()) {
    mhe_emu::check_full_mask(mask, "__shfl_down_sync");
    int src = mhe_emu::self.lane + (int)delta;
    return mhe_emu::shuffle(v, src, src >= mhe_emu::WARP, loc);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int = 32, std::source_location loc = std::source_location::current()) {
    mhe_emu::check_full_mask(mask, "__shfl_sync");
    return mhe_emu::shuffle(v, src_lane & (mhe_emu::WARP - 1), false, loc);
}
inline float atomicAdd(float *p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    return std::atomic_ref<unsigned>(*p).fetch_add(v);
}

// Device-only math intrinsics the host library lacks.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __ldg(const float *p) { return *p; }

// ---- nvcuda::wmma (tensor-core fragments) ----
// Each lane holds the whole tile (row-major), so loads, fills and mma_sync are computed
// redundantly by every lane and exactly (products of bf16 values are exact in fp32; fp32
// accumulation in k order); stores are done by lane 0 between warp barriers.  Code that reads
// fragment elements by index (layout-dependent on the GPU) is not supported: the sources use
// only fill / load / mma / store.
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static constexpr int rows = std::is_same_v<Use, matrix_b> ? K : M;
    static constexpr int cols = std::is_same_v<Use, matrix_a> ? K : N;
    static constexpr int num_elements = rows * cols;
    T x[rows * cols];
};

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v) {
    for (int e = 0; e < f.num_elements; e++) f.x[e] = (T)v;
}
template <typename Use, int M, int N, int K, typename T, typename L>
void load_matrix_sync(fragment<Use, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    mhe_emu::check_wmma("load_matrix_sync", p, ldm, sizeof(T));
    using F = fragment<Use, M, N, K, T, L>;
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++)
            f.x[r * F::cols + c] = std::is_same_v<L, col_major> ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
    mhe_emu::check_wmma("load_matrix_sync", p, ldm, sizeof(T));
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++)
            f.x[r * N + c] = l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
template <int M, int N, int K, typename T>
void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
    mhe_emu::check_wmma("store_matrix_sync", p, ldm, sizeof(T));
    __syncwarp();  // every lane has its (identical) result before the memory changes
    if (mhe_emu::self.lane == 0)
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++)
                (l == mem_col_major ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[r * N + c];
    __syncwarp();
}
template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
              const fragment<matrix_b, M, N, K, TB, LB> &b, const fragment<accumulator, M, N, K, TC> &c) {
    // Each element converted once (not once per product: the conversions were most of the
    // emulation's time), then every out[i][j] summed over k in order from c, as before.
    TC fa[M * K], fb[K * N], out[M * N];
    for (int e = 0; e < M * K; e++) fa[e] = (TC)a.x[e];
    for (int e = 0; e < K * N; e++) fb[e] = (TC)b.x[e];
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) out[i * N + j] = c.x[i * N + j];
        for (int k = 0; k < K; k++) {
            const TC av = fa[i * K + k];
            for (int j = 0; j < N; j++) out[i * N + j] += av * fb[k * N + j];
        }
    }
    for (int e = 0; e < M * N; e++) d.x[e] = out[e];
}
}  // namespace wmma
}  // namespace nvcuda

// Block size the sources launch their row kernels with (env MHE_EMU_BLOCK, default 64).
int mhe_emu_block_threads(void);

// Static shared memory: `MHE_SHARED(float, buf, [2][32]);` in both builds.  Here the variable
// is a reference into the running block's static area (ThreadState::static_shared), at an
// offset fixed when the declaration is first reached; blocks running at the same time
// (MHE_EMU_SHUFFLE) each have their own area.
namespace mhe_emu {
struct SharedVar {
    size_t offset;
    SharedVar(size_t bytes, size_t align);
};
}  // namespace mhe_emu
#define MHE_SHARED(type, name, dims)                                                    \
    static const mhe_emu::SharedVar mhe_shared_##name(sizeof(type dims), alignof(type)); \
    type(&name) dims = *reinterpret_cast<type(*) dims>(mhe_emu::self.static_shared + mhe_shared_##name.offset)

// Dynamic shared memory: `MHE_DYNAMIC_SHARED(float, buf);` in both builds.
#define MHE_DYNAMIC_SHARED(type, name) \
    type *name = reinterpret_cast<type *>(mhe_emu::self.dynamic_shared)

// The one launch form both compilers accept:
// MHE_LAUNCH(kernel, grid, block, shmem, stream, cost)(args...); the cost is recorded first and
// in record-only mode (cuda_cost.h) the kernel does not run.
#define MHE_LAUNCH(kernel, grid, block, shmem, stream, cost)                                \
    [&](auto &&...mhe_args) {                                                               \
        mhe_emu_stream_op((stream), #kernel);                                               \
        if (mhe_cost_record(#kernel, (cost)))                                               \
            mhe_emu::launch(reinterpret_cast<const void *>(&kernel), mhe_emu::kernel_name<&kernel>(), \
                            __FILE__, (grid), (block), (shmem), [&] { kernel(mhe_args...); }); \
    }

// ---- runtime (host memory, synchronous streams) ----
template <typename F> cudaError_t mhe_emu_func_set_attribute(F *kernel, cudaFuncAttribute attr, int value) {
    return mhe_emu::func_set_attribute(reinterpret_cast<const void *>(kernel), attr, value);
}
#define cudaFuncSetAttribute mhe_emu_func_set_attribute
// Counts one operation on stream s; a launch on a stream that is not live ends the process.
void mhe_emu_stream_op(cudaStream_t s, const char *what);
cudaError_t mhe_emu_malloc(void **p, size_t bytes);
cudaError_t mhe_emu_free(void *p);
cudaError_t mhe_emu_mem_get_info(size_t *free_bytes, size_t *total_bytes);
cudaError_t mhe_emu_memcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t mhe_emu_memcpy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                 cudaStream_t s);
cudaError_t mhe_emu_memset(void *p, int value, size_t bytes);
cudaError_t mhe_emu_memset_async(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t mhe_emu_get_device_count(int *n);
cudaError_t mhe_emu_set_device(int d);
cudaError_t mhe_emu_get_last_error(void);
cudaError_t mhe_emu_device_synchronize(void);
cudaError_t mhe_emu_stream_create(cudaStream_t *s);
cudaError_t mhe_emu_stream_create_flags(cudaStream_t *s, unsigned flags);
cudaError_t mhe_emu_stream_destroy(cudaStream_t s);
cudaError_t mhe_emu_stream_synchronize(cudaStream_t s);
cudaError_t mhe_emu_stream_query(cudaStream_t s);
cudaError_t mhe_emu_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t mhe_emu_event_create(cudaEvent_t *e);
cudaError_t mhe_emu_event_create_flags(cudaEvent_t *e, unsigned flags);
cudaError_t mhe_emu_event_destroy(cudaEvent_t e);
cudaError_t mhe_emu_event_record(cudaEvent_t e, cudaStream_t s);
cudaError_t mhe_emu_event_synchronize(cudaEvent_t e);
cudaError_t mhe_emu_event_query(cudaEvent_t e);
cudaError_t mhe_emu_event_elapsed(float *ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t mhe_emu_runtime_version(int *v);
cudaError_t mhe_emu_driver_version(int *v);
const char *mhe_emu_error_string(cudaError_t e);

// Pinned host memory is plain host memory here.
inline cudaError_t mhe_emu_malloc_host(void **p, size_t bytes) {
    *p = std::malloc(bytes ? bytes : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t mhe_emu_free_host(void *p) {
    std::free(p);
    return cudaSuccess;
}
#define cudaMallocHost(p, n) mhe_emu_malloc_host(reinterpret_cast<void **>(p), (n))
#define cudaFreeHost mhe_emu_free_host
#define cudaMalloc(p, n) mhe_emu_malloc(reinterpret_cast<void **>(p), (n))
#define cudaFree mhe_emu_free
#define cudaMemGetInfo mhe_emu_mem_get_info
#define cudaMemcpy mhe_emu_memcpy
#define cudaMemcpyAsync mhe_emu_memcpy_async
#define cudaMemset mhe_emu_memset
#define cudaMemsetAsync mhe_emu_memset_async
#define cudaGetDeviceCount mhe_emu_get_device_count
#define cudaSetDevice mhe_emu_set_device
#define cudaGetLastError mhe_emu_get_last_error
#define cudaDeviceSynchronize mhe_emu_device_synchronize
#define cudaStreamCreate mhe_emu_stream_create
#define cudaStreamCreateWithFlags mhe_emu_stream_create_flags
#define cudaStreamDestroy mhe_emu_stream_destroy
#define cudaStreamSynchronize mhe_emu_stream_synchronize
#define cudaStreamQuery mhe_emu_stream_query
#define cudaStreamWaitEvent mhe_emu_stream_wait_event
#define cudaEventCreate mhe_emu_event_create
#define cudaEventCreateWithFlags mhe_emu_event_create_flags
#define cudaEventDestroy mhe_emu_event_destroy
#define cudaEventRecord mhe_emu_event_record
#define cudaEventSynchronize mhe_emu_event_synchronize
#define cudaEventQuery mhe_emu_event_query
#define cudaEventElapsedTime mhe_emu_event_elapsed
#define cudaRuntimeGetVersion mhe_emu_runtime_version
#define cudaDriverGetVersion mhe_emu_driver_version
#define cudaGetErrorString mhe_emu_error_string

// ---- cuBLAS over OpenBLAS (column-major, as cuBLAS) ----
cublasStatus_t mhe_emu_cublas_create(cublasHandle_t *h);
cublasStatus_t mhe_emu_cublas_destroy(cublasHandle_t h);
cublasStatus_t mhe_emu_cublas_set_stream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t mhe_emu_cublas_set_math_mode(cublasHandle_t h, cublasMath_t m);
cublasStatus_t mhe_emu_cublas_get_version(cublasHandle_t h, int *v);
cublasStatus_t mhe_emu_sgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, const float *alpha, const float *a, int lda,
                             const float *b, int ldb, const float *beta, float *c, int ldc);
cublasStatus_t mhe_emu_sgemm_strided_batched(cublasHandle_t h, cublasOperation_t ta,
                                             cublasOperation_t tb, int m, int n, int k,
                                             const float *alpha, const float *a, int lda,
                                             long long sa, const float *b, int ldb, long long sb,
                                             const float *beta, float *c, int ldc, long long sc,
                                             int batch);
cublasStatus_t mhe_emu_gemm_strided_batched_ex(
    cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t mhe_emu_gemm_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                               int n, int k, const void *alpha, const void *a, cudaDataType at,
                               int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                               void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                               cublasGemmAlgo_t algo);

cublasStatus_t mhe_emu_gemm_batched_ex(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb,
                                      int m, int n, int k, const void *alpha, const void *const a[],
                                      cudaDataType at, int lda, const void *const b[],
                                      cudaDataType bt, int ldb, const void *beta, void *const c[],
                                      cudaDataType ct, int ldc, int batch,
                                      cublasComputeType_t compute, cublasGemmAlgo_t algo);

#undef cublasCreate
#undef cublasDestroy
#undef cublasSetStream
#undef cublasSgemm
#undef cublasGetVersion
#define cublasCreate mhe_emu_cublas_create
#define cublasDestroy mhe_emu_cublas_destroy
#define cublasSetStream mhe_emu_cublas_set_stream
#define cublasSetMathMode mhe_emu_cublas_set_math_mode
#define cublasGetVersion mhe_emu_cublas_get_version
#define cublasSgemm mhe_emu_sgemm
#define cublasSgemmStridedBatched mhe_emu_sgemm_strided_batched
#define cublasGemmEx mhe_emu_gemm_ex
#define cublasGemmStridedBatchedEx mhe_emu_gemm_strided_batched_ex
#define cublasGemmBatchedEx mhe_emu_gemm_batched_ex

// ---- cuBLASLt over OpenBLAS (cuda_emu_lt.cpp): matmuls with the DEFAULT, BIAS, BGRADB,
// GELU_AUX_BIAS and DGELU epilogues, computed for real; any other attribute, epilogue or type is refused
// (CUBLAS_STATUS_NOT_SUPPORTED), and pointers must meet the alignments the heuristic query
// was promised (CUBLAS_STATUS_INVALID_VALUE otherwise), as on the GPU. ----
cublasStatus_t mhe_emu_lt_create(cublasLtHandle_t *h);
cublasStatus_t mhe_emu_lt_destroy(cublasLtHandle_t h);
cublasStatus_t mhe_emu_lt_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t mhe_emu_lt_desc_destroy(cublasLtMatmulDesc_t d);
cublasStatus_t mhe_emu_lt_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                   size_t bytes);
cublasStatus_t mhe_emu_lt_layout_create(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                        int64_t ld);
cublasStatus_t mhe_emu_lt_layout_destroy(cublasLtMatrixLayout_t l);
cublasStatus_t mhe_emu_lt_pref_create(cublasLtMatmulPreference_t *p);
cublasStatus_t mhe_emu_lt_pref_destroy(cublasLtMatmulPreference_t p);
cublasStatus_t mhe_emu_lt_pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                   const void *buf, size_t bytes);
cublasStatus_t mhe_emu_lt_heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                    cublasLtMatmulPreference_t p, int requested,
                                    cublasLtMatmulHeuristicResult_t results[], int *returned);
cublasStatus_t mhe_emu_lt_matmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                                 cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl,
                                 const void *beta, const void *C, cublasLtMatrixLayout_t cl, void *D,
                                 cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *algo, void *ws,
                                 size_t ws_bytes, cudaStream_t s);
#define cublasLtCreate mhe_emu_lt_create
#define cublasLtDestroy mhe_emu_lt_destroy
#define cublasLtMatmulDescCreate mhe_emu_lt_desc_create
#define cublasLtMatmulDescDestroy mhe_emu_lt_desc_destroy
#define cublasLtMatmulDescSetAttribute mhe_emu_lt_desc_set
#define cublasLtMatrixLayoutCreate mhe_emu_lt_layout_create
#define cublasLtMatrixLayoutDestroy mhe_emu_lt_layout_destroy
#define cublasLtMatmulPreferenceCreate mhe_emu_lt_pref_create
#define cublasLtMatmulPreferenceDestroy mhe_emu_lt_pref_destroy
#define cublasLtMatmulPreferenceSetAttribute mhe_emu_lt_pref_set
#define cublasLtMatmulAlgoGetHeuristic mhe_emu_lt_heuristic
#define cublasLtMatmul mhe_emu_lt_matmul

// ---- NCCL over MPI (MPI_COMM_WORLD must be initialised; one emulated GPU per rank) ----
ncclResult_t mhe_emu_nccl_get_unique_id(ncclUniqueId *id);
ncclResult_t mhe_emu_nccl_comm_init_rank(ncclComm_t *c, int n, ncclUniqueId id, int rank);
ncclResult_t mhe_emu_nccl_comm_init_rank_config(ncclComm_t *c, int n, ncclUniqueId id, int rank,
                                                ncclConfig_t *cfg);
ncclResult_t mhe_emu_nccl_all_reduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t c, cudaStream_t s);
ncclResult_t mhe_emu_nccl_broadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
                                    int root, ncclComm_t c, cudaStream_t s);
ncclResult_t mhe_emu_nccl_reduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                 ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s);
ncclResult_t mhe_emu_nccl_group_start(void);
ncclResult_t mhe_emu_nccl_group_end(void);
ncclResult_t mhe_emu_nccl_comm_get_async_error(ncclComm_t c, ncclResult_t *r);
ncclResult_t mhe_emu_nccl_comm_abort(ncclComm_t c);
ncclResult_t mhe_emu_nccl_comm_destroy(ncclComm_t c);
ncclResult_t mhe_emu_nccl_comm_finalize(ncclComm_t c);
ncclResult_t mhe_emu_nccl_get_version(int *v);
const char *mhe_emu_nccl_error_string(ncclResult_t r);

#define ncclGetUniqueId mhe_emu_nccl_get_unique_id
#define ncclCommInitRank mhe_emu_nccl_comm_init_rank
#define ncclCommInitRankConfig mhe_emu_nccl_comm_init_rank_config
#define ncclAllReduce mhe_emu_nccl_all_reduce
#define ncclBroadcast mhe_emu_nccl_broadcast
#define ncclReduce mhe_emu_nccl_reduce
#define ncclGroupStart mhe_emu_nccl_group_start
#define ncclGroupEnd mhe_emu_nccl_group_end
#define ncclCommGetAsyncError mhe_emu_nccl_comm_get_async_error
#define ncclCommAbort mhe_emu_nccl_comm_abort
#define ncclCommDestroy mhe_emu_nccl_comm_destroy
#define ncclCommFinalize mhe_emu_nccl_comm_finalize
#define ncclGetVersion mhe_emu_nccl_get_version
#define ncclGetErrorString mhe_emu_nccl_error_string

#endif
