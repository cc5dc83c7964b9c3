// defines: the emulation's host-memory runtime, streams and events, cuBLAS over OpenBLAS, NCCL over MPI.
// The out-of-line half of the CUDA emulation (see cuda_emu.h): the host-memory runtime, cuBLAS
// over OpenBLAS and NCCL over MPI (the launcher: cuda_emu_launch.cpp).
#include "kernels/cuda/emu/cuda_emu.h"

extern "C" {
#include "common/num.h"
}

#include <cblas.h>
// The C API only: Open MPI would otherwise pull in its removed C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <sys/mman.h>

#include <chrono>
#include <unordered_map>
#include <unordered_set>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <thread>
#include <vector>

// Streams run their work synchronously, so the emulation cannot reorder anything; what it
// checks is that streams and events are used as real CUDA requires, stricter where real CUDA
// would silently do nothing: a handle must be live, and a stream may only wait on an event that
// has been recorded (CUDA treats a never-recorded event as already complete, which hides a
// missing record).  Each stream counts its operations, and an event remembers the stream and
// the count it was recorded at (what a wait orders after).
struct CUstream_st {
    uint64_t ops;
};
struct CUevent_st {
    std::chrono::steady_clock::time_point at;
    bool recorded;
    cudaStream_t stream;
    uint64_t after_ops;  // the recording stream's operations before the record
};
static std::mutex handles_mu;
static std::unordered_set<const void *> live_streams, live_events;
static thread_local char emu_error[256];

static cudaError_t emu_fail(cudaError_t e, const char *fmt, const void *handle) {
    std::snprintf(emu_error, sizeof emu_error, fmt, handle);
    return e;
}
// The legacy default stream (nullptr) is always valid.
static bool stream_live(cudaStream_t s) {
    std::lock_guard<std::mutex> lock(handles_mu);
    return !s || live_streams.count(s);
}
static bool event_live(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(handles_mu);
    return e && live_events.count(e);
}
struct cublasContext {
    cudaStream_t stream;
};
// A non-blocking communicator's collectives are MPI_Iallreduce requests, pending until
// ncclCommGetAsyncError (which reports ncclInProgress meanwhile) or a stream synchronisation
// sees them complete: so a dead peer leaves work in progress, as with real NCCL.
struct NcclPending {
    MPI_Request req;
    float *avg;  // ncclAvg: divide after the sum lands
    size_t count;
};
struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
    bool blocking;
    std::vector<NcclPending> pending;
};

// Non-blocking communicators of this process, so stream synchronisation can complete their work.
static std::mutex nccl_registry_mu;
static std::vector<ncclComm *> nccl_registry;

static void nccl_finish(ncclComm *c) {
    for (auto &p : c->pending)
        if (p.avg)
            for (size_t i = 0; i < p.count; i++) p.avg[i] /= (float)c->size;
    c->pending.clear();
}
static void nccl_complete_all(void) {
    std::lock_guard<std::mutex> lock(nccl_registry_mu);
    for (ncclComm *c : nccl_registry) {
        for (auto &p : c->pending) MPI_Wait(&p.req, MPI_STATUS_IGNORE);
        nccl_finish(c);
    }
}

// ---- runtime ----
// Record-only mode (cuda_cost.h) hands out inaccessible address space: nothing may touch it,
// and a bug that does faults at once instead of reading garbage.
static std::mutex reserved_mu;
static std::unordered_map<void *, size_t> reserved;
// Device memory: MHE_EMU_DEVICE_MEMORY bytes (an integer, README "Numbers"; default 1 TiB, more than any
// test needs), of which `in_use` is allocated.  cudaMalloc fails past it and cudaMemGetInfo
// reports it, as a real device does, so memory checks can be tested without one.
static std::unordered_map<void *, size_t> sizes;
static size_t in_use;

static size_t device_memory(void) {
    static const size_t total = [] {
        const char *e = std::getenv("MHE_EMU_DEVICE_MEMORY");
        if (!e) return (size_t)1 << 40;
        uint64_t v = 0;
        if (mhe_parse_u64(e, &v) != MHE_NUM_OK || v == 0) {
            std::fprintf(stderr, "cuda_emu: MHE_EMU_DEVICE_MEMORY=%s is not a positive number of bytes\n", e);
            std::exit(2);
        }
        return v;
    }();
    return total;
}

cudaError_t mhe_emu_mem_get_info(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> lock(reserved_mu);
    *total_bytes = device_memory();
    *free_bytes = *total_bytes - (in_use < *total_bytes ? in_use : *total_bytes);
    return cudaSuccess;
}

cudaError_t mhe_emu_malloc(void **p, size_t bytes) {
    size_t padded = (bytes + 255) / 256 * 256 + 256;
    {
        std::lock_guard<std::mutex> lock(reserved_mu);
        if (bytes > device_memory() - in_use) return cudaErrorMemoryAllocation;
        in_use += bytes;
    }
    if (mhe_cost_dry_run()) {
        void *q = mmap(nullptr, padded, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (q == MAP_FAILED) return cudaErrorMemoryAllocation;
        std::lock_guard<std::mutex> lock(reserved_mu);
        reserved[q] = padded;
        sizes[q] = bytes;
        *p = q;
        return cudaSuccess;
    }
    // 256-byte alignment, as cudaMalloc guarantees.
    *p = std::aligned_alloc(256, padded);
    std::lock_guard<std::mutex> lock(reserved_mu);
    if (!*p) {
        in_use -= bytes;
        return cudaErrorMemoryAllocation;
    }
    // Fresh device memory holds 0xff bytes (NaN as fp32 and bf16, -1 as an integer), as
    // compute-sanitizer's initcheck would flag a read of it: a kernel reading memory nobody wrote
    // fails its parity test.  (The backend's alloc op zero-fills by contract, ops.h.)
    std::memset(*p, 0xff, padded);
    sizes[*p] = bytes;
    return cudaSuccess;
}
cudaError_t mhe_emu_free(void *p) {
    if (!p) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lock(reserved_mu);
        auto s = sizes.find(p);
        if (s != sizes.end()) {
            in_use -= s->second;
            sizes.erase(s);
        }
        auto it = reserved.find(p);
        if (it != reserved.end()) {
            munmap(p, it->second);
            reserved.erase(it);
            return cudaSuccess;
        }
    }
    std::free(p);
    return cudaSuccess;
}
cudaError_t mhe_emu_memcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
    if (bytes && !mhe_cost_dry_run()) std::memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t mhe_emu_memcpy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                                 cudaStream_t s) {
    mhe_emu_stream_op(s, "cudaMemcpyAsync");
    return mhe_emu_memcpy(dst, src, bytes, kind);
}
cudaError_t mhe_emu_memset(void *p, int value, size_t bytes) {
    if (bytes && !mhe_cost_dry_run()) std::memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t mhe_emu_memset_async(void *p, int value, size_t bytes, cudaStream_t s) {
    mhe_emu_stream_op(s, "cudaMemsetAsync");
    return mhe_emu_memset(p, value, bytes);
}
// Emulated GPUs per host: MHE_EMU_DEVICES (default 1), so multi-rank runs can each "own" one.
// They are all the same host memory; each process only touches its own.
cudaError_t mhe_emu_get_device_count(int *n) {
    static const int count = [] {
        const char *e = std::getenv("MHE_EMU_DEVICES");
        long long v = 1;
        if (e && mhe_parse_int(e, 1, 1024, &v) != MHE_NUM_OK) {
            std::fprintf(stderr, "cuda_emu: MHE_EMU_DEVICES=%s is not an integer in [1, 1024]\n", e);
            std::exit(2);
        }
        return (int)v;
    }();
    *n = count;
    return cudaSuccess;
}
cudaError_t mhe_emu_set_device(int d) {
    int n = 0;
    mhe_emu_get_device_count(&n);
    return d >= 0 && d < n ? cudaSuccess : cudaErrorInvalidDevice;
}
cudaError_t mhe_emu_get_last_error(void) { return cudaSuccess; }
cudaError_t mhe_emu_device_synchronize(void) {
    nccl_complete_all();
    return cudaSuccess;
}
void mhe_emu_stream_op(cudaStream_t s, const char *what) {
    if (!stream_live(s)) {
        std::fprintf(stderr, "cuda_emu: %s issued on %p, which is not a live stream\n", what, (void *)s);
        std::exit(1);
    }
    if (s) s->ops++;
}
cudaError_t mhe_emu_stream_create(cudaStream_t *s) {
    *s = new CUstream_st{0};
    std::lock_guard<std::mutex> lock(handles_mu);
    live_streams.insert(*s);
    return cudaSuccess;
}
cudaError_t mhe_emu_stream_create_flags(cudaStream_t *s, unsigned) { return mhe_emu_stream_create(s); }
cudaError_t mhe_emu_stream_destroy(cudaStream_t s) {
    if (!s || !stream_live(s)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: %p is not a live stream", s);
    {
        std::lock_guard<std::mutex> lock(handles_mu);
        live_streams.erase(s);
    }
    delete s;
    return cudaSuccess;
}
cudaError_t mhe_emu_stream_synchronize(cudaStream_t s) {
    if (!stream_live(s)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: %p is not a live stream", s);
    nccl_complete_all();
    return cudaSuccess;
}
cudaError_t mhe_emu_stream_query(cudaStream_t s) {
    if (!stream_live(s)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: %p is not a live stream", s);
    return cudaSuccess;
}
cudaError_t mhe_emu_stream_wait_event(cudaStream_t s, cudaEvent_t e, unsigned) {
    if (!stream_live(s)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: %p is not a live stream", s);
    if (!event_live(e)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: %p is not a live event", e);
    if (!e->recorded)
        return emu_fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: event %p was never recorded (the wait would order nothing)", e);
    if (s) s->ops++;
    return cudaSuccess;
}
cudaError_t mhe_emu_event_create(cudaEvent_t *e) {
    *e = new CUevent_st{std::chrono::steady_clock::now(), false, nullptr, 0};
    std::lock_guard<std::mutex> lock(handles_mu);
    live_events.insert(*e);
    return cudaSuccess;
}
cudaError_t mhe_emu_event_create_flags(cudaEvent_t *e, unsigned) { return mhe_emu_event_create(e); }
cudaError_t mhe_emu_event_destroy(cudaEvent_t e) {
    if (!event_live(e)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: %p is not a live event", e);
    {
        std::lock_guard<std::mutex> lock(handles_mu);
        live_events.erase(e);
    }
    delete e;
    return cudaSuccess;
}
cudaError_t mhe_emu_event_record(cudaEvent_t e, cudaStream_t s) {
    if (!event_live(e)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live event", e);
    if (!stream_live(s)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: %p is not a live stream", s);
    e->at = std::chrono::steady_clock::now();
    e->recorded = true;
    e->stream = s;
    e->after_ops = s ? s->ops++ : 0;
    return cudaSuccess;
}
cudaError_t mhe_emu_event_synchronize(cudaEvent_t e) {
    if (!event_live(e)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: %p is not a live event", e);
    nccl_complete_all();
    return cudaSuccess;
}
cudaError_t mhe_emu_event_query(cudaEvent_t e) {
    if (!event_live(e)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: %p is not a live event", e);
    return cudaSuccess;
}
cudaError_t mhe_emu_event_elapsed(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!event_live(a) || !event_live(b)) return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: %p is not a live event", event_live(a) ? b : a);
    if (!a->recorded || !b->recorded)
        return emu_fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: event %p was never recorded", a->recorded ? b : a);
    *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
    return cudaSuccess;
}
cudaError_t mhe_emu_runtime_version(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}
cudaError_t mhe_emu_driver_version(int *v) {
    *v = 0;
    return cudaSuccess;
}
const char *mhe_emu_error_string(cudaError_t e) {
    if (e == cudaSuccess) return "no error (emulated)";
    return emu_error[0] ? emu_error : "error (emulated)";
}

// ---- cuBLAS ----
cublasStatus_t mhe_emu_cublas_create(cublasHandle_t *h) {
    *h = new cublasContext{nullptr};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_cublas_destroy(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_cublas_set_stream(cublasHandle_t h, cudaStream_t s) {
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_cublas_set_math_mode(cublasHandle_t, cublasMath_t) {
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_cublas_get_version(cublasHandle_t, int *v) {
    *v = CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

static CBLAS_TRANSPOSE blas_op(cublasOperation_t t) {
    return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

static void sgemm_impl(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const float *alpha, const float *a, int lda, const float *b, int ldb,
                       const float *beta, float *c, int ldc) {
    if (m == 0 || n == 0) return;
    cblas_sgemm(CblasColMajor, blas_op(ta), blas_op(tb), m, n, k, *alpha, a, lda, b, ldb, *beta, c,
                ldc);
}

// Every public cuBLAS entry first asks the cost recorder (an unrecorded call is fatal; in
// record-only mode nothing is computed).
cublasStatus_t mhe_emu_sgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, const float *alpha, const float *a, int lda,
                             const float *b, int ldb, const float *beta, float *c, int ldc) {
    if (!mhe_cost_take_blas() || m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    cblas_sgemm(CblasColMajor, blas_op(ta), blas_op(tb), m, n, k, *alpha, a, lda, b, ldb, *beta, c,
                ldc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t mhe_emu_sgemm_strided_batched(cublasHandle_t h, cublasOperation_t ta,
                                             cublasOperation_t tb, int m, int n, int k,
                                             const float *alpha, const float *a, int lda,
                                             long long sa, const float *b, int ldb, long long sb,
                                             const float *beta, float *c, int ldc, long long sc,
                                             int batch) {
    (void)h;
    if (!mhe_cost_take_blas()) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < batch; i++)
        sgemm_impl(ta, tb, m, n, k, alpha, a + i * sa, lda, b + i * sb, ldb, beta, c + i * sc,
                      ldc);
    return CUBLAS_STATUS_SUCCESS;
}

// Widens a column-major rows x cols matrix (leading dimension ld) of type t to fp32.
// Column-major `rows` x cols at p (leading dimension ld) widened to fp32, keeping ld.  Only the
// elements cuBLAS reads are touched: the last column ends at its row `rows` (a head's columns
// inside a wider row end before the buffer does); the padding after it reads as 0.
static void widen(std::vector<float> &out, const void *p, cudaDataType t, int ld, int rows, int cols) {
    const size_t n = (size_t)ld * (size_t)cols, used = cols > 0 ? (size_t)ld * (size_t)(cols - 1) + (size_t)rows : 0;
    out.assign(n, 0.0f);
    if (t == CUDA_R_32F) {
        std::memcpy(out.data(), p, used * sizeof(float));
    } else {
        const __nv_bfloat16 *h = static_cast<const __nv_bfloat16 *>(p);
        for (size_t i = 0; i < used; i++) out[i] = __bfloat162float(h[i]);
    }
}

// Mixed precision as the tensor-core path computes it: inputs of any supported type, products
// accumulated in fp32, output rounded once to its type.
static cublasStatus_t gemm_ex_impl(
    cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute) {
    auto ok = [](cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; };
    if (!ok(at) || !ok(bt) || !ok(ct) ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_TF32))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    size_t ea = at == CUDA_R_32F ? 4 : 2, eb = bt == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
    int a_cols = ta == CUBLAS_OP_N ? k : m, b_cols = tb == CUBLAS_OP_N ? n : k;
    float al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
    std::vector<float> fa, fb, fc;
    for (int i = 0; i < batch; i++) {
        const char *pa = static_cast<const char *>(a) + (size_t)(i * sa) * ea;
        const char *pb = static_cast<const char *>(b) + (size_t)(i * sb) * eb;
        char *pc = static_cast<char *>(c) + (size_t)(i * sc) * ec;
        widen(fa, pa, at, lda, ta == CUBLAS_OP_N ? m : k, a_cols);
        widen(fb, pb, bt, ldb, tb == CUBLAS_OP_N ? k : n, b_cols);
        widen(fc, pc, ct, ldc, m, n);
        // Rows beyond m of each column of C belong to the caller: only m rows are written back.
        cblas_sgemm(CblasColMajor, blas_op(ta), blas_op(tb), m, n, k, al, fa.data(), lda, fb.data(),
                    ldb, be, fc.data(), ldc);
        for (int col = 0; col < n; col++)
            for (int row = 0; row < m; row++) {
                size_t at_ = (size_t)col * ldc + row;
                if (ct == CUDA_R_32F)
                    reinterpret_cast<float *>(pc)[at_] = fc[at_];
                else
                    reinterpret_cast<__nv_bfloat16 *>(pc)[at_] = __float2bfloat16(fc[at_]);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t mhe_emu_gemm_strided_batched_ex(
    cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
    const void *alpha, const void *a, cudaDataType at, int lda, long long sa, const void *b,
    cudaDataType bt, int ldb, long long sb, const void *beta, void *c, cudaDataType ct, int ldc,
    long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (!mhe_cost_take_blas()) return CUBLAS_STATUS_SUCCESS;
    return gemm_ex_impl(ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc,
                        sc, batch, compute);
}

cublasStatus_t mhe_emu_gemm_ex(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                               int n, int k, const void *alpha, const void *a, cudaDataType at,
                               int lda, const void *b, cudaDataType bt, int ldb, const void *beta,
                               void *c, cudaDataType ct, int ldc, cublasComputeType_t compute,
                               cublasGemmAlgo_t) {
    if (!mhe_cost_take_blas()) return CUBLAS_STATUS_SUCCESS;
    return gemm_ex_impl(ta, tb, m, n, k, alpha, a, at, lda, 0, b, bt, ldb, 0, beta, c, ct, ldc, 0,
                        1, compute);
}

// Pointer-array batches: the arrays live in (emulated) device memory, i.e. host memory here.
cublasStatus_t mhe_emu_gemm_batched_ex(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb,
                                      int m, int n, int k, const void *alpha, const void *const a[],
                                      cudaDataType at, int lda, const void *const b[],
                                      cudaDataType bt, int ldb, const void *beta, void *const c[],
                                      cudaDataType ct, int ldc, int batch,
                                      cublasComputeType_t compute, cublasGemmAlgo_t) {
    if (!mhe_cost_take_blas()) return CUBLAS_STATUS_SUCCESS;
    for (int i = 0; i < batch; i++) {
        cublasStatus_t st = gemm_ex_impl(ta, tb, m, n, k, alpha, a[i], at, lda, 0, b[i], bt, ldb, 0,
                                         beta, c[i], ct, ldc, 0, 1, compute);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---- NCCL over MPI ----
ncclResult_t mhe_emu_nccl_get_unique_id(ncclUniqueId *id) {
    std::random_device rd;
    for (size_t i = 0; i < sizeof id->internal; i++) id->internal[i] = (char)rd();
    return ncclSuccess;
}
ncclResult_t mhe_emu_nccl_comm_init_rank(ncclComm_t *c, int n, ncclUniqueId, int rank) {
    int init = 0, size = 0, me = 0;
    MPI_Initialized(&init);
    if (!init) return ncclInvalidUsage;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    // The emulation maps NCCL ranks onto MPI_COMM_WORLD one to one.
    if (size != n || me != rank) return ncclInvalidArgument;
    ncclComm *comm = new ncclComm{MPI_COMM_NULL, rank, n, true, {}};
    MPI_Comm_dup(MPI_COMM_WORLD, &comm->mpi);
    *c = comm;
    return ncclSuccess;
}
ncclResult_t mhe_emu_nccl_comm_init_rank_config(ncclComm_t *c, int n, ncclUniqueId id, int rank,
                                                ncclConfig_t *cfg) {
    ncclResult_t r = mhe_emu_nccl_comm_init_rank(c, n, id, rank);
    if (r == ncclSuccess && cfg && cfg->blocking == 0) {
        (*c)->blocking = false;
        std::lock_guard<std::mutex> lock(nccl_registry_mu);
        nccl_registry.push_back(*c);
    }
    return r;
}

static MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclInt32: return MPI_INT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

ncclResult_t mhe_emu_nccl_all_reduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t c, cudaStream_t s) {
    mhe_emu_stream_op(s, "ncclAllReduce");
    MPI_Datatype dt = mpi_type(t);
    MPI_Op mop = op == ncclSum || op == ncclAvg ? MPI_SUM : op == ncclMax ? MPI_MAX
               : op == ncclMin ? MPI_MIN : op == ncclProd ? MPI_PROD : MPI_OP_NULL;
    if (dt == MPI_DATATYPE_NULL || mop == MPI_OP_NULL || count > (size_t)INT32_MAX)
        return ncclInvalidArgument;
    if (op == ncclAvg && t != ncclFloat32) return ncclInvalidArgument;
    const void *in = send == recv ? MPI_IN_PLACE : send;
    NcclPending p{MPI_REQUEST_NULL, op == ncclAvg ? static_cast<float *>(recv) : nullptr, count};
    if (c->blocking) {
        if (MPI_Allreduce(in, recv, (int)count, dt, mop, c->mpi) != MPI_SUCCESS) return ncclSystemError;
        c->pending.push_back(p);
        nccl_finish(c);
        return ncclSuccess;
    }
    std::lock_guard<std::mutex> lock(nccl_registry_mu);
    if (MPI_Iallreduce(in, recv, (int)count, dt, mop, c->mpi, &p.req) != MPI_SUCCESS)
        return ncclSystemError;
    c->pending.push_back(p);
    return ncclInProgress;
}
// A sum onto `root` (recv significant there only), non-blocking like the all-reduce.
ncclResult_t mhe_emu_nccl_reduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                 ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
    mhe_emu_stream_op(s, "ncclReduce");
    MPI_Datatype dt = mpi_type(t);
    if (dt == MPI_DATATYPE_NULL || op != ncclSum || count > (size_t)INT32_MAX || root < 0 || root >= c->size)
        return ncclInvalidArgument;
    const void *in = c->rank == root && send == recv ? MPI_IN_PLACE : send;
    NcclPending p{MPI_REQUEST_NULL, nullptr, count};
    if (c->blocking) {
        if (MPI_Reduce(in, recv, (int)count, dt, MPI_SUM, root, c->mpi) != MPI_SUCCESS) return ncclSystemError;
        return ncclSuccess;
    }
    std::lock_guard<std::mutex> lock(nccl_registry_mu);
    if (MPI_Ireduce(in, recv, (int)count, dt, MPI_SUM, root, c->mpi, &p.req) != MPI_SUCCESS) return ncclSystemError;
    c->pending.push_back(p);
    return ncclInProgress;
}
ncclResult_t mhe_emu_nccl_broadcast(const void *send, void *recv, size_t count, ncclDataType_t t,
                                    int root, ncclComm_t c, cudaStream_t s) {
    mhe_emu_stream_op(s, "ncclBroadcast");
    MPI_Datatype dt = mpi_type(t);
    if (dt == MPI_DATATYPE_NULL || count > (size_t)INT32_MAX) return ncclInvalidArgument;
    if (c->rank == root && send != recv) {
        int sz = 0;
        MPI_Type_size(dt, &sz);
        std::memmove(recv, send, count * (size_t)sz);
    }
    return MPI_Bcast(recv, (int)count, dt, root, c->mpi) == MPI_SUCCESS ? ncclSuccess
                                                                         : ncclSystemError;
}
ncclResult_t mhe_emu_nccl_group_start(void) { return ncclSuccess; }
ncclResult_t mhe_emu_nccl_group_end(void) { return ncclSuccess; }
ncclResult_t mhe_emu_nccl_comm_get_async_error(ncclComm_t c, ncclResult_t *r) {
    std::lock_guard<std::mutex> lock(nccl_registry_mu);
    *r = ncclSuccess;
    for (auto &p : c->pending) {
        int done = 0;
        if (MPI_Test(&p.req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
            *r = ncclSystemError;
            return ncclSuccess;
        }
        if (!done) *r = ncclInProgress;
    }
    if (*r == ncclSuccess) nccl_finish(c);
    return ncclSuccess;
}
ncclResult_t mhe_emu_nccl_comm_abort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    std::lock_guard<std::mutex> lock(nccl_registry_mu);
    std::erase(nccl_registry, c);
    // Requests a dead peer never completes cannot be freed safely; the caller is about to exit.
    if (c->pending.empty()) MPI_Comm_free(&c->mpi);
    delete c;
    return ncclSuccess;
}
ncclResult_t mhe_emu_nccl_comm_destroy(ncclComm_t c) { return mhe_emu_nccl_comm_abort(c); }
ncclResult_t mhe_emu_nccl_comm_finalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t mhe_emu_nccl_get_version(int *v) {
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}
const char *mhe_emu_nccl_error_string(ncclResult_t r) {
    return r == ncclSuccess ? "no error (emulated)" : "error (emulated)";
}
