// defines: the CUDA backend's skeleton: device, stream and cuBLAS handle (backend_cuda_create,
// destroy), device memory (alloc, free, memset, copies, uploads and downloads, recorded by the cost
// model), synchronisation, and the op table filled by each family's install function.
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
    // A bf16 run stores its activations in bf16 (cuda_act_stage.cu).
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
    cuda_install_matmul(be);
    cuda_install_bias(be);
    cuda_install_elementwise(be);
    cuda_install_rows(be);
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
    if (c->act_bf16) {
        cuda_install_act_bf16(be);  // first: it keeps the fp32 table the staged ops run
        cuda_install_matmul_bf16(be);
        cuda_install_bias_bf16(be);
        cuda_install_linear_bf16(be);
        cuda_install_elementwise_bf16(be);
        cuda_install_layernorm_bf16(be);
        cuda_install_attention_bf16(be);
    }
    // Last: it hands each attention call to its core, the own ones through the ops above.
    cuda_install_attention_dispatch(be);
    return be;
}
