// defines: the emulation's cuBLASLt (descriptors, layouts, heuristic, cublasLtMatmul with epilogues).
// cuBLASLt for the CUDA emulation (see cuda_emu.h): the slice the backend uses — matmul
// descriptors, matrix layouts, preferences, the heuristic query and cublasLtMatmul with the
// DEFAULT, BIAS, BGRADB, GELU_AUX_BIAS and DGELU epilogues — computed on the host with OpenBLAS in cuBLASLt's
// column-major contract.  The epilogues run for real (the tests compare their results with the
// CPU backend).  What the backend does not use is refused rather than approximated, and the
// checks the library makes on a GPU are made here too: layouts consistent with the
// transposes, the bias type, pointer alignments no weaker than the preference promised.
#include "kernels/cuda/emu/cuda_emu.h"

#include <cblas.h>

#include <cmath>
#include <cstdint>
#include <vector>

struct cublasLtContext {
    int unused;
};

namespace {

struct LtDesc {
    cublasComputeType_t compute;
    cudaDataType_t scale;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int bias_type = -1;  // -1: D's type
    void *aux = nullptr;  // GELU_AUX_BIAS writes the GELU input there, DGELU reads it
    int64_t aux_ld = 0;
    int aux_type = -1;   // -1: D's type
};
struct LtLayout {
    cudaDataType t;
    uint64_t rows, cols;
    int64_t ld;
};
struct LtPref {
    uint64_t workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D: cuBLASLt's defaults
};

// The opaque handles are pointers to our own structs.
LtDesc *desc(cublasLtMatmulDesc_t d) { return reinterpret_cast<LtDesc *>(d); }
LtLayout *layout(cublasLtMatrixLayout_t l) { return reinterpret_cast<LtLayout *>(l); }
LtPref *pref(cublasLtMatmulPreference_t p) { return reinterpret_cast<LtPref *>(p); }

template <typename T> bool read_attr(T &out, const void *buf, size_t bytes) {
    if (bytes != sizeof(T)) return false;
    std::memcpy(&out, buf, sizeof(T));
    return true;
}

bool type_ok(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_16BF; }
bool has_aux(const LtDesc &d) {
    return d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || d.epilogue == CUBLASLT_EPILOGUE_DGELU;
}
// cuBLASLt's GELU is the tanh form (ops.h GELU_TANH) and its derivative.
const float GELU_C = 0.7978845608028654f, GELU_A = 0.044715f;
float gelu_tanh(float x) { return 0.5f * x * (1.0f + std::tanh(GELU_C * (x + GELU_A * x * x * x))); }
float gelu_tanh_grad(float x) {
    const float t = std::tanh(GELU_C * (x + GELU_A * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * x * x);
}

// What the emulation can compute: fp32 accumulation and scale, fp32 or bf16 inputs, fp32 or
// bf16 output (C of D's type), one of the three epilogues; the BIAS vector is of D's type (as
// cuBLASLt requires outside its fp8 and integer kernels), BGRADB's fp32 with an fp32 D.
cublasStatus_t supported(const LtDesc &d, const LtLayout &a, const LtLayout &b, const LtLayout &c,
                         const LtLayout &dl) {
    if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!type_ok(a.t) || !type_ok(b.t) || a.t != b.t || !type_ok(dl.t) || c.t != dl.t)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_BIAS &&
        d.epilogue != CUBLASLT_EPILOGUE_BGRADB && !has_aux(d))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.epilogue == CUBLASLT_EPILOGUE_BGRADB && dl.t != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    // The GELU epilogues: a bf16 aux matrix of D's shape with ld a multiple of 8 and >= its rows
    // (what the library asks for 16-bit types).
    const int aux_type = d.aux_type == -1 ? (int)dl.t : d.aux_type;
    if (has_aux(d) && (aux_type != CUDA_R_16BF || d.aux_ld < (int64_t)dl.rows || d.aux_ld % 8))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.bias_type != -1 && d.bias_type != (int)dl.t)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // D is m x n; op(A) m x k and op(B) k x n as stored (rows, cols) before the transposes.
    const uint64_t m = dl.rows, n = dl.cols;
    const uint64_t a_rows = d.ta == CUBLAS_OP_N ? m : a.rows, a_cols = d.ta == CUBLAS_OP_N ? a.cols : m;
    const uint64_t k = d.ta == CUBLAS_OP_N ? a.cols : a.rows;
    const uint64_t b_rows = d.tb == CUBLAS_OP_N ? k : n, b_cols = d.tb == CUBLAS_OP_N ? n : k;
    if (a.rows != a_rows || a.cols != a_cols || b.rows != b_rows || b.cols != b_cols || c.rows != m ||
        c.cols != n)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (const LtLayout *l : {&a, &b, &c, &dl})
        if (l->ld < (int64_t)l->rows || l->ld < 1) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

// Column-major rows x cols at p (leading dimension ld) widened to fp32, packed (ld = rows).
std::vector<float> widen(const void *p, const LtLayout &l) {
    std::vector<float> out(l.rows * l.cols);
    for (uint64_t c = 0; c < l.cols; c++)
        for (uint64_t r = 0; r < l.rows; r++) {
            const size_t at = (size_t)(c * (uint64_t)l.ld + r);
            out[c * l.rows + r] = l.t == CUDA_R_32F ? static_cast<const float *>(p)[at]
                                                    : __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[at]);
        }
    return out;
}

bool aligned(const void *p, uint32_t bytes) { return bytes == 0 || reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

cublasStatus_t mhe_emu_lt_create(cublasLtHandle_t *h) {
    *h = new cublasLtContext{0};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_destroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_desc_create(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    LtDesc *x = new LtDesc;
    x->compute = compute;
    x->scale = scale;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_desc_destroy(cublasLtMatmulDesc_t d) {
    delete desc(d);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_desc_set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                   size_t bytes) {
    LtDesc *x = desc(d);
    bool ok = false;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read_attr(x->ta, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read_attr(x->tb, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = read_attr(x->epilogue, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attr(x->bias, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = read_attr(x->bias_type, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = read_attr(x->aux, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = read_attr(x->aux_ld, buf, bytes); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: ok = read_attr(x->aux_type, buf, bytes); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t mhe_emu_lt_layout_create(cublasLtMatrixLayout_t *l, cudaDataType t, uint64_t rows, uint64_t cols,
                                        int64_t ld) {
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(new LtLayout{t, rows, cols, ld});
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_layout_destroy(cublasLtMatrixLayout_t l) {
    delete layout(l);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_pref_create(cublasLtMatmulPreference_t *p) {
    *p = reinterpret_cast<cublasLtMatmulPreference_t>(new LtPref);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_pref_destroy(cublasLtMatmulPreference_t p) {
    delete pref(p);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t mhe_emu_lt_pref_set(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a,
                                   const void *buf, size_t bytes) {
    LtPref *x = pref(p);
    bool ok = false;
    switch (a) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: ok = read_attr(x->workspace, buf, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: ok = read_attr(x->align[0], buf, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: ok = read_attr(x->align[1], buf, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: ok = read_attr(x->align[2], buf, bytes); break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: ok = read_attr(x->align[3], buf, bytes); break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

// One "algorithm" whose data records the alignments it was chosen for (checked at the call).
cublasStatus_t mhe_emu_lt_heuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                    cublasLtMatmulPreference_t p, int requested,
                                    cublasLtMatmulHeuristicResult_t results[], int *returned) {
    *returned = 0;
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = supported(*desc(d), *layout(a), *layout(b), *layout(c), *layout(dl));
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    std::memset(&results[0], 0, sizeof results[0]);
    for (int i = 0; i < 4; i++) results[0].algo.data[i] = pref(p)->align[i];
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// D = alpha op(A) op(B) + beta C, then the epilogue: BIAS adds bias[i] to row i of D; BGRADB
// stores bias[j] = sum over k of op(B)[k, j] (the bias gradient, from B as given: bf16 values
// in bf16 mode).  beta == 0 leaves C unread.
cublasStatus_t mhe_emu_lt_matmul(cublasLtHandle_t, cublasLtMatmulDesc_t dd, const void *alpha, const void *A,
                                 cublasLtMatrixLayout_t al, const void *B, cublasLtMatrixLayout_t bl,
                                 const void *beta, const void *C, cublasLtMatrixLayout_t cl, void *D,
                                 cublasLtMatrixLayout_t dl, const cublasLtMatmulAlgo_t *algo, void *, size_t,
                                 cudaStream_t) {
    if (!mhe_cost_take_blas()) return CUBLAS_STATUS_SUCCESS;
    const LtDesc &d = *desc(dd);
    const LtLayout &la = *layout(al), &lb = *layout(bl), &lc = *layout(cl), &ld = *layout(dl);
    cublasStatus_t st = supported(d, la, lb, lc, ld);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!algo) return CUBLAS_STATUS_INVALID_VALUE;  // the backend always passes the heuristic's choice
    const void *ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; i++)
        if (!aligned(ptrs[i], (uint32_t)algo->data[i])) return CUBLAS_STATUS_INVALID_VALUE;
    const bool wants_bias = d.epilogue != CUBLASLT_EPILOGUE_DEFAULT && d.epilogue != CUBLASLT_EPILOGUE_DGELU;
    if (wants_bias && (!d.bias || !aligned(d.bias, ld.t == CUDA_R_16BF ? 2 : 4))) return CUBLAS_STATUS_INVALID_VALUE;
    if (has_aux(d) && (!d.aux || !aligned(d.aux, 16))) return CUBLAS_STATUS_INVALID_VALUE;
    const int m = (int)ld.rows, n = (int)ld.cols, k = (int)(d.ta == CUBLAS_OP_N ? la.cols : la.rows);
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    const float a_ = *static_cast<const float *>(alpha), b_ = *static_cast<const float *>(beta);
    std::vector<float> fa = widen(A, la), fb = widen(B, lb), prod((size_t)m * n, 0.0f);
    auto op = [](cublasOperation_t t) { return t == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; };
    if (k > 0)
        cblas_sgemm(CblasColMajor, op(d.ta), op(d.tb), m, n, k, 1.0f, fa.data(), (int)la.rows, fb.data(),
                    (int)lb.rows, 0.0f, prod.data(), m);
    if (d.epilogue == CUBLASLT_EPILOGUE_BGRADB) {
        float *g = static_cast<float *>(const_cast<void *>(d.bias));
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int kk = 0; kk < k; kk++)
                s += d.tb == CUBLAS_OP_N ? fb[(size_t)j * lb.rows + kk] : fb[(size_t)kk * lb.rows + j];
            g[j] = (float)s;
        }
    }
    // A bf16 D (and its C and bias) is widened on the way in and rounded once on the way out.
    const bool half = ld.t == CUDA_R_16BF;
    auto get = [half](const void *p, size_t at) {
        return half ? __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[at]) : static_cast<const float *>(p)[at];
    };
    const bool gelu = d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dgelu = d.epilogue == CUBLASLT_EPILOGUE_DGELU;
    const void *bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS || gelu ? d.bias : nullptr;
    __nv_bfloat16 *aux = static_cast<__nv_bfloat16 *>(d.aux);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = a_ * prod[(size_t)j * m + i];
            if (b_ != 0.0f) v += b_ * get(C, (size_t)j * lc.ld + i);
            if (bias) v += get(bias, (size_t)i);
            const size_t ax = (size_t)j * (size_t)d.aux_ld + i;
            if (gelu) {  // the GELU input kept (rounded to the aux type), D = GELU of the fp32 value
                aux[ax] = __float2bfloat16(v);
                v = gelu_tanh(v);
            } else if (dgelu) {
                v *= gelu_tanh_grad(__bfloat162float(aux[ax]));
            }
            const size_t at = (size_t)j * ld.ld + i;
            if (half)
                static_cast<__nv_bfloat16 *>(D)[at] = __float2bfloat16(v);
            else
                static_cast<float *>(D)[at] = v;
        }
    return CUBLAS_STATUS_SUCCESS;
}
