// defines: mhe_cuda_libs_load and the cuBLAS, cuBLASLt and NCCL functions the CUDA backend calls,
// each forwarding to the library opened at run time (kernels/cuda/cuda_libs.h).
//
// Why not link them: a program linked against libcublasLt and libnccl maps and relocates them at
// start-up, ~220 MB of resident memory in every process (`mhetrain info`: 230 MB against 11 MB
// without the CUDA backend), CPU runs included; and a machine whose toolkit the loader cannot find
// (no ld.so.conf entry, a binary copied elsewhere) could not start mhetrain at all, not even on the
// CPU.  So these definitions stand in for the libraries' own: the first call (or the CUDA backend's
// creation, through mhe_cuda_libs_load) opens all three and resolves every name below; a missing
// library or name is one message, and a CPU run never opens them.  Each definition's parameter list
// is the header's: a mismatch is a conflicting declaration of an extern "C" function, which does
// not compile.  Built into the nvcc build only (the emulation has its own definitions).
#include "kernels/cuda/cuda_libs.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#define MHE_STR2(x) #x
#define MHE_STR(x) MHE_STR2(x)

namespace {

enum Lib { CUBLAS, CUBLASLT, NCCL, LIB_COUNT };
const char *const lib_names[LIB_COUNT] = {"libcublas.so." MHE_STR(CUBLAS_VER_MAJOR),
                                          "libcublasLt.so." MHE_STR(CUBLAS_VER_MAJOR),
                                          "libnccl.so." MHE_STR(NCCL_MAJOR)};

// Every forwarded function: its library, its name, and where its address goes.
#define MHE_LIB_FUNCTIONS(X)                                                                                        \
    X(CUBLAS, cublasCreate_v2) X(CUBLAS, cublasDestroy_v2) X(CUBLAS, cublasSetStream_v2)                            \
    X(CUBLAS, cublasSetMathMode) X(CUBLAS, cublasSgemmStridedBatched) X(CUBLAS, cublasGemmStridedBatchedEx)         \
    X(CUBLAS, cublasGemmBatchedEx) X(CUBLASLT, cublasLtCreate) X(CUBLASLT, cublasLtDestroy)                         \
    X(CUBLASLT, cublasLtMatmul) X(CUBLASLT, cublasLtMatmulAlgoGetHeuristic) X(CUBLASLT, cublasLtMatmulDescCreate)   \
    X(CUBLASLT, cublasLtMatmulDescDestroy) X(CUBLASLT, cublasLtMatmulDescSetAttribute)                             \
    X(CUBLASLT, cublasLtMatmulPreferenceCreate) X(CUBLASLT, cublasLtMatmulPreferenceDestroy)                       \
    X(CUBLASLT, cublasLtMatmulPreferenceSetAttribute) X(CUBLASLT, cublasLtMatrixLayoutCreate)                      \
    X(CUBLASLT, cublasLtMatrixLayoutDestroy) X(NCCL, ncclGetErrorString) X(NCCL, ncclCommAbort) X(NCCL, ncclReduce) \
    X(NCCL, ncclGetVersion) X(NCCL, ncclGetUniqueId) X(NCCL, ncclCommInitRankConfig) X(NCCL, ncclCommGetAsyncError) \
    X(NCCL, ncclCommFinalize) X(NCCL, ncclCommDestroy) X(NCCL, ncclBroadcast) X(NCCL, ncclAllReduce)

struct Table {
#define MHE_SLOT(lib, name) void *name;
    MHE_LIB_FUNCTIONS(MHE_SLOT)
#undef MHE_SLOT
};
Table table;
bool loaded = false;
char why_not[512] = "";

void load_once() {
    void *h[LIB_COUNT];
    for (int l = 0; l < LIB_COUNT; l++) {
        h[l] = dlopen(lib_names[l], RTLD_NOW | RTLD_LOCAL);
        if (!h[l]) {
            const char *e = dlerror();
            snprintf(why_not, sizeof why_not, "%s", e ? e : lib_names[l]);
            return;  // those opened before stay open: unloading a library is never safe to undo
        }
    }
#define MHE_RESOLVE(lib, name)                                                                              \
    if (!(table.name = dlsym(h[lib], #name))) {                                                             \
        snprintf(why_not, sizeof why_not, "%s has no %s (a different major version?)", lib_names[lib], #name); \
        return;                                                                                             \
    }
    MHE_LIB_FUNCTIONS(MHE_RESOLVE)
#undef MHE_RESOLVE
    loaded = true;
}

bool ensure() {
    static std::once_flag once;
    std::call_once(once, load_once);
    return loaded;
}

}  // namespace

extern "C" int mhe_cuda_libs_load(char *why, size_t len) {
    if (ensure()) return 1;
    if (why && len) snprintf(why, len, "%s", why_not);
    return 0;
}


// A call before the backend loaded them (it loads them first) finds them here; a library that
// cannot load makes the call fail the way the library reports failures.  as() casts the resolved
// address to the type of the header's own declaration, deduced from it, so no type is written twice.
template <typename F>
static F *as(void *p, F *) {
    return reinterpret_cast<F *>(p);
}

extern "C" {
cublasStatus_t CUBLASWINAPI cublasCreate_v2(cublasHandle_t *handle) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasCreate_v2, &cublasCreate_v2)(handle);
}
cublasStatus_t CUBLASWINAPI cublasDestroy_v2(cublasHandle_t handle) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasDestroy_v2, &cublasDestroy_v2)(handle);
}
cublasStatus_t CUBLASWINAPI cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasSetStream_v2, &cublasSetStream_v2)(handle, streamId);
}
cublasStatus_t CUBLASWINAPI cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasSetMathMode, &cublasSetMathMode)(handle, mode);
}
cublasStatus_t CUBLASWINAPI cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                      cublasOperation_t transb, int m, int n, int k,
                                                      const float *alpha, const float *A, int lda, long long int strideA,
                                                      const float *B, int ldb, long long int strideB, const float *beta,
                                                      float *C, int ldc, long long int strideC, int batchCount) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasSgemmStridedBatched, &cublasSgemmStridedBatched)(handle, transa, transb, m, n, k, alpha, A, lda, strideA, B,
                                                                ldb, strideB, beta, C, ldc, strideC, batchCount);
}
cublasStatus_t CUBLASWINAPI cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                                       cublasOperation_t transb, int m, int n, int k, const void *alpha,
                                                       const void *A, cudaDataType Atype, int lda, long long int strideA,
                                                       const void *B, cudaDataType Btype, int ldb, long long int strideB,
                                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                                       long long int strideC, int batchCount,
                                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    // Overloaded in C++ (a legacy cudaDataType compute type): the cast picks the library's own.
    using F = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                             const void *, cudaDataType, int, long long int, const void *, cudaDataType, int,
                             long long int, const void *, void *, cudaDataType, int, long long int, int,
                             cublasComputeType_t, cublasGemmAlgo_t);
    return as(table.cublasGemmStridedBatchedEx, static_cast<F *>(&cublasGemmStridedBatchedEx))(handle, transa, transb, m, n, k, alpha, A, Atype, lda,
                                                                 strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc,
                                                                 strideC, batchCount, computeType, algo);
}
cublasStatus_t CUBLASWINAPI cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                                int m, int n, int k, const void *alpha, const void *const Aarray[],
                                                cudaDataType Atype, int lda, const void *const Barray[], cudaDataType Btype,
                                                int ldb, const void *beta, void *const Carray[], cudaDataType Ctype,
                                                int ldc, int batchCount, cublasComputeType_t computeType,
                                                cublasGemmAlgo_t algo) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    using F = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                             const void *const *, cudaDataType, int, const void *const *, cudaDataType, int,
                             const void *, void *const *, cudaDataType, int, int, cublasComputeType_t,
                             cublasGemmAlgo_t);
    return as(table.cublasGemmBatchedEx, static_cast<F *>(&cublasGemmBatchedEx))(handle, transa, transb, m, n, k, alpha, Aarray, Atype, lda,
                                                          Barray, Btype, ldb, beta, Carray, Ctype, ldc, batchCount,
                                                          computeType, algo);
}

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtCreate, &cublasLtCreate)(lightHandle);
}
cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtDestroy, &cublasLtDestroy)(lightHandle);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                           cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                           cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t *algo, void *workspace,
                                           size_t workspaceSizeInBytes, cudaStream_t stream) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmul, &cublasLtMatmul)(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc,
                                                     D, Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle,
                                                           cublasLtMatmulDesc_t operationDesc,
                                                           cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                           cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                           cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                                           cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                           int *returnAlgoCount) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulAlgoGetHeuristic, &cublasLtMatmulAlgoGetHeuristic)(lightHandle, operationDesc, Adesc, Bdesc, Cdesc,
                                                                     Ddesc, preference, requestedAlgoCount,
                                                                     heuristicResultsArray, returnAlgoCount);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulDescCreate, &cublasLtMatmulDescCreate)(matmulDesc, computeType, scaleType);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulDescDestroy, &cublasLtMatmulDescDestroy)(matmulDesc);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                           size_t sizeInBytes) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulDescSetAttribute, &cublasLtMatmulDescSetAttribute)(matmulDesc, attr, buf, sizeInBytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulPreferenceCreate, &cublasLtMatmulPreferenceCreate)(pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulPreferenceDestroy, &cublasLtMatmulPreferenceDestroy)(pref);
}
cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void *buf, size_t sizeInBytes) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatmulPreferenceSetAttribute, &cublasLtMatmulPreferenceSetAttribute)(pref, attr, buf, sizeInBytes);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatrixLayoutCreate, &cublasLtMatrixLayoutCreate)(matLayout, type, rows, cols, ld);
}
cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    if (!ensure()) return CUBLAS_STATUS_NOT_INITIALIZED;
    return as(table.cublasLtMatrixLayoutDestroy, &cublasLtMatrixLayoutDestroy)(matLayout);
}

const char *ncclGetErrorString(ncclResult_t result) {
    if (!ensure()) return why_not;
    return as(table.ncclGetErrorString, &ncclGetErrorString)(result);
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclCommAbort, &ncclCommAbort)(comm);
}
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclReduce, &ncclReduce)(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
ncclResult_t ncclGetVersion(int *version) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclGetVersion, &ncclGetVersion)(version);
}
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclGetUniqueId, &ncclGetUniqueId)(uniqueId);
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclCommInitRankConfig, &ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclCommGetAsyncError, &ncclCommGetAsyncError)(comm, asyncError);
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclCommFinalize, &ncclCommFinalize)(comm);
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclCommDestroy, &ncclCommDestroy)(comm);
}
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclBroadcast, &ncclBroadcast)(sendbuff, recvbuff, count, datatype, root, comm, stream);
}
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    if (!ensure()) return ncclSystemError;
    return as(table.ncclAllReduce, &ncclAllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
}
