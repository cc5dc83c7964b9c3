// defines: the linear layers through cuBLASLt with fused epilogues (bias, GELU), fp32 and bf16.
// Linear layers (ops.h linear_forward / linear_backward) through cuBLASLt with the bias fused
// into the GEMM: the forward's EPILOGUE_BIAS adds b while the product is written (no bias_add
// pass re-reading and re-writing y), the backward's EPILOGUE_BGRADB sums dy's columns while
// the weight gradient's GEMM reads dy anyway (no bias_backward pass over dy).
//
// Layouts: cuBLASLt is column-major, so a row-major [rows, cols] buffer is a cols x rows
// column-major matrix.  Forward, y [N, out] = x [N, in] Wᵀ + b:
//     D (out x N, ld out) = op(A = W: in x out, ld in, transposed) · (B = x: in x N, ld in),
//     the bias indexed by D's row (out), as EPILOGUE_BIAS wants.
// Backward, dW [out, in] += dyᵀ x:
//     D (in x out, ld in) = (A = x: in x N, ld in) · op(B = dy: out x N, ld out, transposed),
//     k = N, so BGRADB's sum over k of op(B)'s column j is Σ_r dy[r, j] = the bias gradient.
// BGRADB stores (does not add), so the gradient lands in a scratch vector that one small
// kernel adds into db (ops.h accumulates; in bf16 mode a deferred column sum's stage 2 does,
// cuda_act_linear_dw).  dx = dy W is the plain matmul op.
//
// Operands are bf16 in bf16 mode (the activations as they are, the weights from their bf16
// copies, cuda_weight_copy.cu), fp32 otherwise (CUBLAS_COMPUTE_32F, no TF32: fp32 mode stays
// within 1e-5 of the CPU backend).  BGRADB sums the operand as the GEMM sees it, i.e. the bf16
// values of dy in bf16 mode.  Plans (descriptors, layouts, the
// heuristic's algorithm) are cached per shape and pointer alignment; a shape cuBLASLt has no
// algorithm for falls back to matmul + bias_add / bias_backward.
#include <cstdint>
#include <map>
#include <tuple>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

static constexpr size_t LT_WORKSPACE = 32u << 20;  // NVIDIA's recommendation for Hopper

// (epilogue, trans_a, trans_b, m, n, k, lda, ldb, ldd, operand type, D type, alignments of A, B, D,
// bias, aux)
typedef std::tuple<int, int, int, int, int, int, int, int, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t,
                   uint32_t>
    LtPlanKey;

struct LtPlan {
    bool ok = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
};


struct LtState {
    cublasLtHandle_t handle = nullptr;
    void *workspace = nullptr;
    float *dbias = nullptr;  // BGRADB's output before it is added into db (grow-only)
    size_t dbias_n = 0;
    std::map<LtPlanKey, LtPlan> plans;
};

static LtState *lt_state(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->lt) {
        c->lt = new LtState();
        CUBLAS_CHECK(cublasLtCreate(&c->lt->handle));
        c->lt->workspace = cuda_device_alloc(LT_WORKSPACE, c->device);
    }
    return c->lt;
}

// The largest power of two (<= 256) dividing the address: what the heuristic may assume.
static uint32_t alignment(const void *p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    uint32_t al = 256;
    while (al > 1 && a % al) al >>= 1;
    return al;
}

// The plan for D (m x n) = op(A) op(B) with the epilogue; nullptr when cuBLASLt has none.  D and
// the bias vector are of type dt (fp32, or bf16 for a bf16 output: cuBLASLt wants them alike).
// The GELU epilogues take a bf16 aux matrix of D's shape with leading dimension ldd (the GELU
// input: written by GELU_AUX_BIAS, read by DGELU).
static const LtPlan *lt_plan(Backend *be, cublasLtEpilogue_t epi, bool ta, bool tb, int m, int n, int k, int lda,
                           int ldb, int ldd, const void *A, const void *B, const void *D, const void *bias,
                           cudaDataType dt = CUDA_R_32F, const void *aux = nullptr) {
    LtState *s = lt_state(be);
    const cudaDataType t = act16(be) ? CUDA_R_16BF : CUDA_R_32F;
    const uint32_t al[5] = {alignment(A), alignment(B), alignment(D), alignment(bias), alignment(aux)};
    LtPlanKey key{(int)epi, ta, tb, m, n, k, lda, ldb, ldd, (int)t, (int)dt, al[0], al[1], al[2], al[3], al[4]};
    auto it = s->plans.find(key);
    if (it != s->plans.end()) return it->second.ok ? &it->second : nullptr;
    LtPlan &p = s->plans[key];
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType bias_type = dt;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    // The heuristic reads the bias pointer's alignment from the descriptor.
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux) {
        const int64_t aux_ld = ldd;
        const cudaDataType aux_type = CUDA_R_16BF;
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type,
                                                    sizeof aux_type));
    }
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, t, ta ? k : m, ta ? m : k, lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, t, tb ? n : k, tb ? k : n, ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, dt, m, n, ldd));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = LT_WORKSPACE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const uint32_t want[4] = {al[0], al[1], al[2], al[2]};  // C is D
    for (int i = 0; i < 4; i++)
        CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &want[i], sizeof want[i]));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(s->handle, p.desc, p.a, p.b, p.d, p.d, pref, 1,
                                                             &result, &found);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p.ok) p.algo = result.algo;
    return p.ok ? &p : nullptr;
}

static void lt_run(Backend *be, const LtPlan *p, const void *A, const void *B, float beta, void *D, const void *bias,
                   const void *aux = nullptr) {
    LtState *s = lt_state(be);
    const float one = 1.0f;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    if (aux)
        CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof aux));
    CUBLAS_CHECK(cublasLtMatmul(s->handle, p->desc, &one, A, p->a, B, p->b, &beta, D, p->d, D, p->d, &p->algo,
                                s->workspace, LT_WORKSPACE, cuda_stream(be)));
}

void cuda_check_dw_zero(Backend *be, const float *dW, size_t n, const float *db, size_t nb, const char *op) {
#if defined(MHE_CUDA_EMU)
    if (mhe_cost_dry_run()) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    for (size_t i = 0; i < n + nb; i++) {
        const float v = i < n ? dW[i] : db[i - n];
        if (v != 0.0f)
            mhe_fatal("%s: dW_zero promised zero gradients, but %s[%zu] holds %g", op, i < n ? "dW" : "db",
                      i < n ? i : i - n, (double)v);
    }
#else
    (void)be, (void)dW, (void)n, (void)db, (void)nb, (void)op;
#endif
}

__global__ void bias_grad_accumulate_kernel(float *__restrict__ db, const float *__restrict__ g, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) db[i] += g[i];
}

// fp32 mode: y = x Wᵀ + b in one BIAS GEMM (bf16 mode: cuda_act_linear_forward below).
static void cuda_linear_forward(Backend *be, const float *x, const float *W, const float *b, int N, int in,
                                int out, float *y) {
    double t0 = cuda_prof_begin(be);
    const LtPlan *p = b && N > 0 && out > 0 && in > 0
                        ? lt_plan(be, CUBLASLT_EPILOGUE_BIAS, true, false, out, N, in, in, in, out, W, x, y, b)
                        : nullptr;
    if (!p) {  // no bias, nothing to do, or no fused algorithm: the two-op form
        be->matmul(be, 0, 1, N, out, in, 1.0f, mat_act(fa(x), in), mat_f32(W, in), 0.0f, out_act(fa(y), out));
        if (b) be->bias_add(be, fa(y), b, N, out);
        return;
    }
    cuda_fp32_wrote(be, y, (size_t)N * out * sizeof(float));
    mhe_cost_record_gemm_epilogue(N, out, in, 0, 0, "+bias", 4.0 * out);
    lt_run(be, p, W, x, 0.0f, y, b);
    cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
}

// fp32 mode: dx by the matmul op, dW += dyᵀ x and db += Σ dy from one BGRADB GEMM (its sum into
// the scratch vector, added into db by a small kernel); dW_zero: beta 0, dW not read.
static void cuda_linear_backward(Backend *be, const float *dy, const float *x, const float *W, int N, int in,
                                 int out, float *dx, int accumulate, float *dW, float *db, int dW_zero) {
    if (dW_zero) cuda_check_dw_zero(be, dW, (size_t)out * in, db, db ? (size_t)out : 0, "linear_backward");
    const float beta = dW_zero ? 0.0f : 1.0f;
    if (dx)
        be->matmul(be, 0, 0, N, in, out, 1.0f, mat_act(fa(dy), out), mat_f32(W, in), accumulate ? 1.0f : 0.0f,
                   out_act(fa(dx), in));
    const LtPlan *p = nullptr;
    LtState *s = nullptr;
    if (db && N > 0 && out > 0 && in > 0) {
        s = lt_state(be);
        cuda_grow(be, s->dbias, s->dbias_n, (size_t)out);
        p = lt_plan(be, CUBLASLT_EPILOGUE_BGRADB, false, true, in, out, N, in, out, in, x, dy, dW, s->dbias);
    }
    if (!p) {  // no bias gradient, nothing to do, or no fused algorithm: the two-op form
        be->matmul(be, 1, 0, out, in, N, 1.0f, mat_act(fa(dy), out), mat_act(fa(x), in), beta, out_f32(dW, in));
        if (db) be->bias_backward(be, fa(dy), N, out, db);
        return;
    }
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote(be, dW, (size_t)out * in * sizeof(float));
    cuda_fp32_wrote(be, db, (size_t)out * sizeof(float));
    mhe_cost_record_gemm_epilogue(out, in, N, 0, !dW_zero, "+bgrad", 4.0 * out);
    lt_run(be, p, x, dy, beta, dW, s->dbias);
    MHE_LAUNCH(bias_grad_accumulate_kernel, cuda_grid_for((size_t)out), MHE_BLOCK, 0, cuda_stream(be),
               mhe_cost(out, 12.0 * out))(db, s->dbias, out);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * in * out);
}

// fp32 mode: the FFN's up projection and its GELU as the two ops (cuBLASLt's GELU epilogues keep
// their aux matrix in bf16: bf16 mode only, cuda_act_linear_forward).
static void cuda_linear_gelu_forward(Backend *be, GeluKind kind, const float *x, const float *W, const float *b,
                                     int N, int in, int out, float *u, float *g) {
    be->linear_forward(be, fa(x), W, b, N, in, out, fa(u));
    be->gelu_forward(be, kind, fa(u), fa(g), (size_t)N * out);
}
static void cuda_linear_backward_gelu(Backend *be, GeluKind kind, const float *dy, const float *x, const float *W,
                                      int N, int in, int out, const float *u, float *dx, float *dW, float *db,
                                      int dW_zero) {
    be->linear_backward(be, fa(dy), fa(x), W, N, in, out, fa(dx), 0, dW, db, dW_zero);
    be->gelu_backward(be, kind, fa(u), fa(dx), fa(dx), (size_t)N * in);
}

void cuda_linear_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    LtState *s = c->lt;
    if (!s) return;
    for (auto &kv : s->plans) {
        LtPlan &p = kv.second;
        if (p.a) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.a));
        if (p.b) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.b));
        if (p.d) CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(p.d));
        if (p.desc) CUBLAS_CHECK(cublasLtMatmulDescDestroy(p.desc));
    }
    cuda_device_free(s->workspace);
    cuda_device_free(s->dbias);
    CUBLAS_CHECK(cublasLtDestroy(s->handle));
    delete s;
    c->lt = nullptr;
}

// bf16 activations (cuda_act_stage.cu): x and y are bf16, W and b the fp32 masters, read from their
// allocation's bf16 copy (a bf16 D takes a bf16 bias).  One BIAS GEMM;
// false (nothing done) when cuBLASLt has no algorithm for the shape.
// With g (the FFN's up projection, GELU_TANH): one GELU_AUX_BIAS GEMM writes g = GELU(x Wᵀ + b)
// as D and y = x Wᵀ + b (GELU's input u) as the aux matrix; g is GELU of the fp32 sum.
bool cuda_act_linear_forward(Backend *be, const __nv_bfloat16 *x, const float *W, const float *b, int N, int in,
                             int out, __nv_bfloat16 *y, __nv_bfloat16 *g) {
    if (!b || N <= 0 || out <= 0 || in <= 0) return false;
    if (g && (out % 8 || reinterpret_cast<uintptr_t>(y) % 16)) return false;  // the aux matrix's ld and alignment
    CudaCtx *c = cuda_ctx(be);
    // The bias after W, at a 16-element boundary so its alignment does not vary with the shape.
    const size_t nw = (size_t)out * in, at = (nw + 15) / 16 * 16;
    __nv_bfloat16 *wb = cuda_grow(be, c->bf16_scratch, c->bf16_scratch_elems, at + (size_t)out), *bb = wb + at;
    // The copies of W's and b's allocations (cuda_weight_copy.cu), else rounded into the scratch.
    const __nv_bfloat16 *wc = cuda_weight_copy(be, W, nw), *bc = cuda_weight_copy(be, b, (size_t)out);
    const void *A = wc ? static_cast<const void *>(wc) : wb, *bias = bc ? static_cast<const void *>(bc) : bb;
    const LtPlan *p = g ? lt_plan(be, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, true, false, out, N, in, in, in, out, A, x, g,
                                  bias, CUDA_R_16BF, y)
                        : lt_plan(be, CUBLASLT_EPILOGUE_BIAS, true, false, out, N, in, in, in, out, A, x, y, bias,
                                  CUDA_R_16BF);
    if (!p) return false;
    if (!wc) cuda_round_bf16(be, W, wb, nw);
    if (!bc) cuda_round_bf16(be, b, bb, (size_t)out);
    if (g) {
        mhe_cost_record_gemm_bf16_out(N, out, in, "+bias+gelu", 2.0 * out + 2.0 * N * out);  // + the aux store
        lt_run(be, p, A, x, 0.0f, g, bias, y);
    } else {
        mhe_cost_record_gemm_bf16_out(N, out, in, "+bias", 2.0 * out);
        lt_run(be, p, A, x, 0.0f, y, bias);
    }
    return true;
}
bool cuda_act_linear_forward_padded(Backend *be, const __nv_bfloat16 *x, const __nv_bfloat16 *W,
                                    const __nv_bfloat16 *b, int N, int in, int out, __nv_bfloat16 *y) {
    if (N <= 0 || out <= 0 || in <= 0) return false;
    const LtPlan *p = lt_plan(be, CUBLASLT_EPILOGUE_BIAS, true, false, out, N, in, in, in, out, W, x, y, b, CUDA_R_16BF);
    if (!p) return false;
    mhe_cost_record_gemm_bf16_out(N, out, in, "+bias", 2.0 * out);
    lt_run(be, p, W, x, 0.0f, y, b);
    return true;
}
// dx = (dy W) ⊙ gelu'(u) in one DGELU GEMM reading u as the aux matrix (GELU_TANH); false (nothing
// done) without a plan.
bool cuda_act_linear_dgelu(Backend *be, const __nv_bfloat16 *dy, const float *W, const __nv_bfloat16 *u, int N,
                           int in, int out, __nv_bfloat16 *dx) {
    if (N <= 0 || out <= 0 || in <= 0 || in % 8 || reinterpret_cast<uintptr_t>(u) % 16) return false;
    CudaCtx *c = cuda_ctx(be);
    const size_t nw = (size_t)out * in;
    const __nv_bfloat16 *wc = cuda_weight_copy(be, W, nw);
    __nv_bfloat16 *wb = wc ? nullptr : cuda_grow(be, c->bf16_scratch, c->bf16_scratch_elems, nw);
    const void *A = wc ? static_cast<const void *>(wc) : wb;
    const LtPlan *p = lt_plan(be, CUBLASLT_EPILOGUE_DGELU, false, false, in, N, out, in, out, in, A, dy, dx, nullptr,
                              CUDA_R_16BF, u);
    if (!p) return false;
    if (!wc) cuda_round_bf16(be, W, wb, nw);
    mhe_cost_record_gemm_bf16_out(N, in, out, "+dgelu", 2.0 * N * in);  // the aux read
    lt_run(be, p, A, dy, 0.0f, dx, nullptr, u);
    return true;
}
// dW += dyᵀ x with db += Σ dy from the same GEMM: bf16 operands as they are, fp32 dW.  BGRADB
// stores, ops.h accumulates: the epilogue writes Σ dy as a column sum's single partial
// (cuda_colsum_space) and its add into db is a deferred stage 2 (cuda_colsum.cu) — finished with
// the other parameter gradients' sums in one launch, not one small kernel per layer.  false
// (nothing done) without a plan.
bool cuda_act_linear_dw(Backend *be, const __nv_bfloat16 *dy, const __nv_bfloat16 *x, int N, int in, int out,
                        float *dW, float *db, bool store, int ldy) {
    if (!db || N <= 0 || out <= 0 || in <= 0) return false;
    if (!ldy) ldy = out;
    float *sum = cuda_colsum_space(be, (size_t)out);
    const LtPlan *p = lt_plan(be, CUBLASLT_EPILOGUE_BGRADB, false, true, in, out, N, in, ldy, in, x, dy, dW, sum);
    if (!p) return false;
    cuda_fp32_wrote_alloc(be, dW);
    cuda_fp32_wrote_alloc(be, db);
    mhe_cost_record_gemm_epilogue(out, in, N, 1, !store, "+bgrad", 4.0 * out);
    lt_run(be, p, x, dy, store ? 0.0f : 1.0f, dW, sum);
    cuda_colsum2_finish(be, sum, nullptr, 1, out, db, nullptr);
    return true;
}

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                               Act *y) {
    cuda_linear_forward(be, af(x), W, b, N, in, out, af(y));
}
static void act_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
                                Act *dx, int accumulate, float *dW, float *db, int dW_zero) {
    cuda_linear_backward(be, af(dy), af(x), W, N, in, out, af(dx), accumulate, dW, db, dW_zero);
}
static void act_linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N,
                                    int in, int out, Act *u, Act *g) {
    cuda_linear_gelu_forward(be, kind, af(x), W, b, N, in, out, af(u), af(g));
}
static void act_linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N,
                                     int in, int out, const Act *u, Act *dx, float *dW, float *db, int dW_zero) {
    cuda_linear_backward_gelu(be, kind, af(dy), af(x), W, N, in, out, af(u), af(dx), dW, db, dW_zero);
}

void cuda_install_linear(Backend *be) {
    be->linear_forward = act_linear_forward;
    be->linear_backward = act_linear_backward;
    be->linear_gelu_forward = act_linear_gelu_forward;
    be->linear_backward_gelu = act_linear_backward_gelu;
}

// bf16 activations (bf16 mode): the cuBLASLt GEMMs above, or where no plan exists the matmul
// (cuda_matmul.cu) and the bias kernels (cuda_bias.cu).
static void bf16_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                                Act *y) {
    double t0 = cuda_prof_begin(be);
    if (cuda_act_linear_forward(be, ab(x), W, b, N, in, out, ab(y))) {
        cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
        return;
    }
    be->matmul(be, 0, 1, N, out, in, 1.0f, mat_act(x, in), mat_f32(W, in), 0.0f, out_act(y, out));
    if (b) be->bias_add(be, y, b, N, out);
}
static void bf16_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
                                 Act *dx, int accumulate, float *dW, float *db, int dW_zero) {
    if (dW_zero) cuda_check_dw_zero(be, dW, (size_t)out * in, db, db ? (size_t)out : 0, "linear_backward");
    if (dx)
        be->matmul(be, 0, 0, N, in, out, 1.0f, mat_act(dy, out), mat_f32(W, in), accumulate ? 1.0f : 0.0f,
                   out_act(dx, in));
    double t0 = cuda_prof_begin(be);
    if (cuda_act_linear_dw(be, ab(dy), ab(x), N, in, out, dW, db, dW_zero != 0)) {
        cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * in * out);
        return;
    }
    be->matmul(be, 1, 0, out, in, N, 1.0f, mat_act(dy, out), mat_act(x, in), dW_zero ? 0.0f : 1.0f,
               out_f32(dW, in));
    if (db) be->bias_backward(be, dy, N, out, db);
}
// The FFN's GELU_TANH projections through cuBLASLt's GELU epilogues (above): g is GELU
// of the fp32 sum and dx multiplies the fp32 product (one bf16 rounding fewer than the two ops).
static void bf16_linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N,
                                     int in, int out, Act *u, Act *g) {
    if (kind == GELU_TANH) {
        double t0 = cuda_prof_begin(be);
        if (cuda_act_linear_forward(be, ab(x), W, b, N, in, out, ab(u), ab(g))) {
            cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
            return;
        }
    }
    be->linear_forward(be, x, W, b, N, in, out, u);
    be->gelu_forward(be, kind, u, g, (size_t)N * out);
}
static void bf16_linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N,
                                      int in, int out, const Act *u, Act *dx, float *dW, float *db, int dW_zero) {
    if (kind == GELU_TANH) {
        double t0 = cuda_prof_begin(be);
        if (cuda_act_linear_dgelu(be, ab(dy), W, ab(u), N, in, out, ab(dx))) {
            cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
            be->linear_backward(be, dy, x, W, N, in, out, nullptr, 0, dW, db, dW_zero);
            return;
        }
    }
    be->linear_backward(be, dy, x, W, N, in, out, dx, 0, dW, db, dW_zero);
    be->gelu_backward(be, kind, u, dx, dx, (size_t)N * in);
}

void cuda_install_linear_bf16(Backend *be) {
    be->linear_forward = bf16_linear_forward;
    be->linear_backward = bf16_linear_backward;
    be->linear_gelu_forward = bf16_linear_gelu_forward;
    be->linear_backward_gelu = bf16_linear_backward_gelu;
}
