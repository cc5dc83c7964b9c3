// The CUDA backend's skeleton: device and handles, memory, and the matmuls (cuBLAS).
// Row-major C = op(A) op(B) is computed as the column-major product Cᵀ = op(B)ᵀ op(A)ᵀ, which
// is the same memory: cuBLAS gets (B, A) swapped and M, N exchanged, no transposes copied.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_attn_core.h"

void *cuda_device_alloc(size_t bytes, int device) {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess)
        mhe_fatal("CUDA device %d: out of memory allocating %zu bytes (%s)", device, bytes,
                  cudaGetErrorString(e));
    mhe_cost_alloc(p, bytes);
    return p;
}
void cuda_device_free(void *p) {
    if (!p) return;
    mhe_cost_free(p);
    CUDA_CHECK(cudaFree(p));
}
void cuda_memset(Backend *be, void *p, size_t bytes) {
    cuda_fp32_wrote(be, p, bytes);
    if (bytes && mhe_cost_record("memset", mhe_cost(0, (double)bytes)))
        CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cuda_stream(be)));
}
void cuda_memcpy_d2d(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_colsum_flush(be);  // src may be a waiting column sum's output
    cuda_fp32_wrote(be, dst, bytes);
    if (bytes && mhe_cost_record("memcpy d2d", mhe_cost(0, 2.0 * bytes)))
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream(be)));
}

static void cuda_memory_info(Backend *be, size_t *free_bytes, size_t *total_bytes) {
    CUDA_CHECK(cudaSetDevice(cuda_ctx(be)->device));
    CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
}

static void *cuda_alloc(Backend *be, size_t bytes) {
    void *p = cuda_device_alloc(bytes, cuda_ctx(be)->device);
    cuda_weight_copy_track(be, p, bytes);
    // On the backend's stream: a legacy-stream memset would not be ordered before its work
    // (the stream is non-blocking).
    cuda_memset(be, p, bytes);
    return p;
}

static void cuda_free(Backend *be, void *p) {
    if (!p) return;
    cuda_colsum_flush(be);  // a waiting column sum may write into it
    cuda_stream_sync(be, "free");  // it may still be in use on the stream
    cuda_weight_copy_release(be, p);
    cuda_device_free(p);
}

static void cuda_upload(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_fp32_wrote(be, dst, bytes);
    if (!bytes || !mhe_cost_record("memcpy h2d", MheCost{0, 0, (double)bytes, (double)bytes, 0})) return;
    cuda_staged_upload(be, dst, src, bytes);
}

static void cuda_download(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_colsum_flush(be);  // src may be a waiting column sum's output
    if (!bytes || !mhe_cost_record("memcpy d2h", MheCost{0, 0, (double)bytes, (double)bytes, 0})) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda_stream(be)));
    cuda_stream_sync(be, "download");
}

// Activations are fp32 storage while be->act is DT_F32: the conversion is the identity.
static void cuda_upload_act(Backend *be, Act *dst, const float *host_src, size_t n) {
    be->upload(be, dst, host_src, n * sizeof(float));
}
static void cuda_download_act(Backend *be, float *host_dst, const Act *src, size_t n) {
    be->download(be, host_dst, src, n * sizeof(float));
}

static void cuda_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    double t0 = cuda_prof_begin(be);
    cuda_memcpy_d2d(be, dst, src, bytes);
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

static void cuda_zero(Backend *be, void *dst, size_t bytes) {
    double t0 = cuda_prof_begin(be);
    cuda_memset(be, dst, bytes);
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

static void cuda_synchronize(Backend *be) {
    cuda_colsum_flush(be);  // everything issued is done afterwards, waiting column sums included
    cuda_stream_sync(be, "synchronize");
}

__global__ void to_bf16_kernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        y[i] = __float2bfloat16(x[i]);
}

void cuda_round_bf16(Backend *be, const float *x, __nv_bfloat16 *y, size_t n) {
    MHE_LAUNCH(to_bf16_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, y, n);
    CUDA_CHECK_LAUNCH();
}

// Elements spanned by a row-major operand of `rows` rows of `cols` with leading dimension ld,
// repeated `batch` times at `stride`: only these are read (never past the last row's end).
static size_t operand_span(int rows, int cols, int ld, long stride, int batch) {
    if (rows == 0 || cols == 0 || batch == 0) return 0;
    return (size_t)(batch - 1) * (size_t)stride + (size_t)(rows - 1) * (size_t)ld + (size_t)cols;
}

void cuda_gemm_batched(Backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, float *C, int ldc, long stride_c, int batch) {
    if (M == 0 || N == 0 || batch == 0) return;
    CudaCtx *c = cuda_ctx(be);
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cuda_fp32_wrote(be, C, operand_span(M, N, ldc, stride_c, batch) * sizeof(float));
    mhe_cost_record_gemm(M, N, K, batch, 0, beta != 0.0f);
    CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, op_b, op_a, N, M, K, &alpha, B, ldb, stride_b, A, lda,
                                           stride_a, &beta, C, ldc, stride_c, batch));
}

// Device pointer arrays for cuda_gemm_heads: entry i = b * n_heads + h of each operand.
struct PtrSpec {
    const char *base;
    long seq_bytes, head_bytes;
    int ratio;
};
__global__ void gemm_pointers_kernel(PtrSpec a, PtrSpec b, PtrSpec c, int n_heads, int count,
                                     const void **out) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += blockDim.x * gridDim.x) {
        int seq = i / n_heads, h = i % n_heads;
        out[i] = a.base + seq * a.seq_bytes + (h / a.ratio) * a.head_bytes;
        out[count + i] = b.base + seq * b.seq_bytes + (h / b.ratio) * b.head_bytes;
        out[2 * count + i] = c.base + seq * c.seq_bytes + (h / c.ratio) * c.head_bytes;
    }
}

// Elements from an operand's base to the end of the last matrix of the batch.
static size_t heads_span(const GemmHeads &o, int rows, int cols, int n_seq, int n_heads) {
    return (size_t)(n_seq - 1) * (size_t)o.seq_stride + (size_t)((n_heads - 1) / o.ratio) * (size_t)o.head_step +
           operand_span(rows, cols, o.ld, 0, 1);
}

void cuda_gemm_heads(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeads A,
                     GemmHeads B, float beta, GemmHeads C, int n_seq, int n_heads) {
    const int count = n_seq * n_heads;
    if (M == 0 || N == 0 || count == 0) return;
    if (C.ratio != 1) mhe_fatal("cuda_gemm_heads: the output must be per head");
    CudaCtx *c = cuda_ctx(be);
    cuda_grow(be, c->gemm_ptrs, c->gemm_ptrs_count, (size_t)count * 3);
    const long el = sizeof(float);  // fp32 operands (bf16 mode stages the attention core in fp32)
    cuda_fp32_wrote(be, C.base, heads_span(C, M, N, n_seq, n_heads) * sizeof(float));
    mhe_cost_record_gemm(M, N, K, count, 0, beta != 0.0f);
    PtrSpec pa{reinterpret_cast<const char *>(A.base), A.seq_stride * el, A.head_step * el, A.ratio};
    PtrSpec pb{reinterpret_cast<const char *>(B.base), B.seq_stride * el, B.head_step * el, B.ratio};
    PtrSpec pc{reinterpret_cast<const char *>(C.base), C.seq_stride * el, C.head_step * el, 1};
    const void **ptrs = const_cast<const void **>(c->gemm_ptrs);
    MHE_LAUNCH(gemm_pointers_kernel, cuda_grid_for(count), MHE_BLOCK, 0, c->stream, mhe_cost(0, 24.0 * count))(pa, pb, pc, n_heads, count, ptrs);
    CUDA_CHECK_LAUNCH();
    // Row-major C = op(A) op(B) as column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B's array first.
    CUBLAS_CHECK(cublasGemmBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     N, M, K, &alpha, ptrs + count, CUDA_R_32F, B.ld, ptrs, CUDA_R_32F, A.ld, &beta,
                                     c->gemm_ptrs + 2 * count, CUDA_R_32F, C.ld, count,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_heads_bf16(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeadsBf16 A,
                          GemmHeadsBf16 B, GemmHeadsBf16 C, int n_seq, int n_heads) {
    const int count = n_seq * n_heads;
    if (M == 0 || N == 0 || count == 0) return;
    if (C.ratio != 1) mhe_fatal("cuda_gemm_heads_bf16: the output must be per head");
    CudaCtx *c = cuda_ctx(be);
    cuda_grow(be, c->gemm_ptrs, c->gemm_ptrs_count, (size_t)count * 3);
    const long ec = C.bf16 ? 2 : 4;
    if (!C.bf16) {
        const GemmHeads span{static_cast<const float *>(C.base), C.ld, C.seq_stride, C.head_step, 1};
        cuda_fp32_wrote(be, C.base, heads_span(span, M, N, n_seq, n_heads) * sizeof(float));
    }
    mhe_cost_record_gemm_bf16_batched(M, N, K, count, C.bf16);
    PtrSpec pa{static_cast<const char *>(A.base), A.seq_stride * 2, A.head_step * 2, A.ratio};
    PtrSpec pb{static_cast<const char *>(B.base), B.seq_stride * 2, B.head_step * 2, B.ratio};
    PtrSpec pc{static_cast<const char *>(C.base), C.seq_stride * ec, C.head_step * ec, 1};
    const void **ptrs = const_cast<const void **>(c->gemm_ptrs);
    MHE_LAUNCH(gemm_pointers_kernel, cuda_grid_for(count), MHE_BLOCK, 0, c->stream, mhe_cost(0, 24.0 * count))(pa, pb, pc, n_heads, count, ptrs);
    CUDA_CHECK_LAUNCH();
    const float beta = 0.0f;
    // Row-major C = op(A) op(B) as column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B's array first.
    CUBLAS_CHECK(cublasGemmBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     N, M, K, &alpha, ptrs + count, CUDA_R_16BF, B.ld, ptrs, CUDA_R_16BF, A.ld, &beta,
                                     c->gemm_ptrs + 2 * count, C.bf16 ? CUDA_R_16BF : CUDA_R_32F, C.ld, count,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static void cuda_matmul_batched(Backend *be, int trans_a, int trans_b, int M, int N, int K,
                                float alpha, const float *A, int lda, long stride_a,
                                const float *B, int ldb, long stride_b, float beta, float *C,
                                int ldc, long stride_c, int batch) {
    double t0 = cuda_prof_begin(be);
    cuda_gemm_batched(be, trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C,
                      ldc, stride_c, batch);
    cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K * batch);
}

// Every operand is fp32 memory while be->act is DT_F32 (activations included; bf16 mode replaces
// this op, cuda_act.cu).
static void cuda_matmul(Backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha, MatIn A, MatIn B,
                        float beta, MatOut C) {
    cuda_matmul_batched(be, trans_a, trans_b, M, N, K, alpha, static_cast<const float *>(A.p), A.ld, 0,
                        static_cast<const float *>(B.p), B.ld, 0, beta, static_cast<float *>(C.p), C.ld, 0, 1);
}

static void cuda_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    cuda_colsum_flush(be);
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    cuda_staging_destroy(c);
    cuda_colsum_defer_destroy(be);
    cuda_weight_copies_destroy(be);
    cuda_linear_destroy(be);
    cuda_optim_destroy(be);
    std::free(c->f32);
    for (int i = 0; i < ACT_STAGE_SLOTS; i++) cuda_device_free(c->stage[i]);
    cuda_device_free(c->bf16_scratch);
    cuda_device_free(c->pad_weight);
    cuda_device_free(c->colsum);
    cuda_device_free(c->flash_part);
    cuda_device_free(c->flash_g);
    cuda_device_free(c->cudnn_ws);
    cuda_attention_dispatch_destroy(be);
    cuda_device_free(c->gemm_ptrs);
    cuda_device_free(c->partials);
    std::free(c->host_partials);
    CUBLAS_CHECK(cublasDestroy(c->blas));
    CUDA_CHECK(cudaStreamDestroy(c->stream));
    std::free(c);
    std::free(be);
}

extern "C" Backend *backend_cuda_create(int device, int bf16) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
        mhe_fatal("runtime.device: cuda, but no CUDA device is available");
    if (device < 0 || device >= count)
        mhe_fatal("CUDA device %d requested but only %d visible", device, count);
    CUDA_CHECK(cudaSetDevice(device));
    mhe_cost_restart_peak();
    CudaCtx *c = static_cast<CudaCtx *>(std::calloc(1, sizeof(CudaCtx)));
    Backend *be = static_cast<Backend *>(std::calloc(1, sizeof(Backend)));
    if (!c || !be) mhe_fatal("out of memory creating the CUDA backend");
    c->device = device;
    // A bf16 run stores its activations in bf16 (cuda_act.cu).
    c->act_bf16 = bf16 != 0;
    // Heads per tensor-core dK/dV block (cuda_flash_tc_bwd.cu chooses by default): lets the tests
    // run one shape split every way.
    const char *dkv = std::getenv("MHE_CUDA_DKV_HEADS");
    if (dkv && *dkv) {
        char *end = nullptr;
        const long h = std::strtol(dkv, &end, 10);
        if (*end || h < 0 || h > 1024) mhe_fatal("MHE_CUDA_DKV_HEADS=%s: expected a head count 0..1024 (0: automatic)", dkv);
        c->dkv_heads = (int)h;
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    // fp32 mode must be plain fp32 (no TF32) so it matches the CPU backend to 1e-5.
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    c->partials = static_cast<double *>(cuda_device_alloc(CUDA_SUM_BLOCKS * sizeof(double), device));
    c->host_partials = static_cast<double *>(std::calloc(CUDA_SUM_BLOCKS, sizeof(double)));
    if (!c->host_partials) mhe_fatal("out of memory creating the CUDA backend");
    cuda_staging_create(c);
    be->ctx = c;
    be->name = "cuda";
    be->act = DT_F32;
    be->destroy = cuda_destroy;
    be->alloc = cuda_alloc;
    be->memory_info = cuda_memory_info;
    be->free = cuda_free;
    be->upload = cuda_upload;
    be->download = cuda_download;
    be->upload_act = cuda_upload_act;
    be->download_act = cuda_download_act;
    be->copy = cuda_copy;
    be->zero = cuda_zero;
    be->synchronize = cuda_synchronize;
    be->matmul = cuda_matmul;
    be->matmul_batched = cuda_matmul_batched;
    cuda_install_elementwise(be);
    cuda_install_heads(be);
    cuda_install_activation(be);
    cuda_install_embedding(be);
    cuda_install_reduce(be);
    cuda_install_layernorm(be);
    cuda_install_loss(be);
    cuda_install_attention(be);
    cuda_install_linear(be);
    cuda_install_linear_ld(be);
    cuda_install_optim(be);
    // Deferred column sums (cuda_colsum.cu) with bf16 activations, where only the fp32 ops read
    // parameter gradients and they flush first.
    if (c->act_bf16) cuda_colsum_defer_init(be);
    if (c->act_bf16) cuda_install_act_bf16(be);
    // Last: it hands each attention call to its core, the own ones through the ops above.
    cuda_install_attention_dispatch(be);
    return be;
}
