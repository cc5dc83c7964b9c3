// defines: the matmuls (ops.h matmul, matmul_batched) through cuBLAS, and the GEMM helpers the
// attention cores build on: cuda_gemm_batched (strided batches, fp32), cuda_gemm_heads (one cuBLAS
// call over every sequence and head, its pointer arrays made by gemm_pointers_kernel) and
// cuda_gemm_heads_bf16 (the same on bf16 tensor cores); in bf16 mode the matmul on bf16 operands
// (act_matmul), an fp32 operand read from its allocation's bf16 copy (cuda_weight_copy.cu).  The
// linear layers' cuBLASLt GEMMs with fused epilogues are cuda_linear.cu's.
// Row-major C = op(A) op(B) is computed as the column-major product Cᵀ = op(B)ᵀ op(A)ᵀ, which
// is the same memory: cuBLAS gets (B, A) swapped and M, N exchanged, no transposes copied.
#include "kernels/cuda/cuda_internal.h"

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

// The batched call both cuda_gemm_heads forms end in: the per-(sequence, head) pointers built on
// the device, then one cuBLAS call over them.  The caller has recorded the GEMM for the cost model.
static void gemm_heads_call(Backend *be, int ta, int tb, int M, int N, int K, float alpha, PtrSpec pa, int lda,
                            PtrSpec pb, int ldb, cudaDataType ab_type, float beta, PtrSpec pc, int ldc,
                            cudaDataType c_type, int count, int n_heads) {
    CudaCtx *c = cuda_ctx(be);
    cuda_grow(be, c->gemm_ptrs, c->gemm_ptrs_count, (size_t)count * 3);
    const void **ptrs = const_cast<const void **>(c->gemm_ptrs);
    MHE_LAUNCH(gemm_pointers_kernel, cuda_grid_for(count), MHE_BLOCK, 0, c->stream, mhe_cost(0, 24.0 * count))(pa, pb, pc, n_heads, count, ptrs);
    CUDA_CHECK_LAUNCH();
    // Row-major C = op(A) op(B) as column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B's array first.
    CUBLAS_CHECK(cublasGemmBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     N, M, K, &alpha, ptrs + count, ab_type, ldb, ptrs, ab_type, lda, &beta,
                                     c->gemm_ptrs + 2 * count, c_type, ldc, count,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_heads(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeads A,
                     GemmHeads B, float beta, GemmHeads C, int n_seq, int n_heads) {
    const int count = n_seq * n_heads;
    if (M == 0 || N == 0 || count == 0) return;
    if (C.ratio != 1) mhe_fatal("cuda_gemm_heads: the output must be per head");
    const long el = sizeof(float);  // fp32 operands (bf16 mode stages the attention core in fp32)
    cuda_fp32_wrote(be, C.base, heads_span(C, M, N, n_seq, n_heads) * sizeof(float));
    mhe_cost_record_gemm(M, N, K, count, 0, beta != 0.0f);
    PtrSpec pa{reinterpret_cast<const char *>(A.base), A.seq_stride * el, A.head_step * el, A.ratio};
    PtrSpec pb{reinterpret_cast<const char *>(B.base), B.seq_stride * el, B.head_step * el, B.ratio};
    PtrSpec pc{reinterpret_cast<const char *>(C.base), C.seq_stride * el, C.head_step * el, 1};
    gemm_heads_call(be, ta, tb, M, N, K, alpha, pa, A.ld, pb, B.ld, CUDA_R_32F, beta, pc, C.ld, CUDA_R_32F, count,
                    n_heads);
}

void cuda_gemm_heads_bf16(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeadsBf16 A,
                          GemmHeadsBf16 B, GemmHeadsBf16 C, int n_seq, int n_heads) {
    const int count = n_seq * n_heads;
    if (M == 0 || N == 0 || count == 0) return;
    if (C.ratio != 1) mhe_fatal("cuda_gemm_heads_bf16: the output must be per head");
    const long ec = C.bf16 ? 2 : 4;
    if (!C.bf16) {
        const GemmHeads span{static_cast<const float *>(C.base), C.ld, C.seq_stride, C.head_step, 1};
        cuda_fp32_wrote(be, C.base, heads_span(span, M, N, n_seq, n_heads) * sizeof(float));
    }
    mhe_cost_record_gemm_bf16_batched(M, N, K, count, C.bf16);
    PtrSpec pa{static_cast<const char *>(A.base), A.seq_stride * 2, A.head_step * 2, A.ratio};
    PtrSpec pb{static_cast<const char *>(B.base), B.seq_stride * 2, B.head_step * 2, B.ratio};
    PtrSpec pc{static_cast<const char *>(C.base), C.seq_stride * ec, C.head_step * ec, 1};
    gemm_heads_call(be, ta, tb, M, N, K, alpha, pa, A.ld, pb, B.ld, CUDA_R_16BF, 0.0f, pc, C.ld,
                    C.bf16 ? CUDA_R_16BF : CUDA_R_32F, count, n_heads);
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
// this op, act_matmul below).
static void cuda_matmul(Backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha, MatIn A, MatIn B,
                        float beta, MatOut C) {
    cuda_matmul_batched(be, trans_a, trans_b, M, N, K, alpha, static_cast<const float *>(A.p), A.ld, 0,
                        static_cast<const float *>(B.p), B.ld, 0, beta, static_cast<float *>(C.p), C.ld, 0, 1);
}

// Elements a row-major operand of `rows` rows of `cols` with leading dimension ld spans.
static size_t span(size_t rows, size_t cols, size_t ld) { return rows && cols ? (rows - 1) * ld + cols : 0; }

// The bf16 form of a matmul operand: an activation as it is, fp32 memory from its allocation's
// copy (rounded into `scratch` when it is not the backend's memory).
static const void *operand(Backend *be, MatIn m, size_t n, __nv_bfloat16 *scratch) {
    if (m.is_act) return m.p;
    if (const __nv_bfloat16 *w = cuda_weight_copy(be, static_cast<const float *>(m.p), n)) return w;
    cuda_round_bf16(be, static_cast<const float *>(m.p), scratch, n);
    return scratch;
}

static void act_matmul(Backend *be, int ta, int tb, int M, int N, int K, float alpha, MatIn A, MatIn B, float beta,
                       MatOut C) {
    if (M == 0 || N == 0) return;
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    const size_t na = A.is_act ? 0 : span(ta ? K : M, ta ? M : K, A.ld);
    const size_t nb = B.is_act ? 0 : span(tb ? N : K, tb ? K : N, B.ld);
    __nv_bfloat16 *scratch = cuda_grow(be, c->bf16_scratch, c->bf16_scratch_elems, na + nb);
    const void *pa = operand(be, A, na, scratch), *pb = operand(be, B, nb, scratch + na);
    if (!C.is_act) cuda_fp32_wrote_alloc(be, C.p);
    if (!C.is_act)
        mhe_cost_record_gemm(M, N, K, 1, 1, beta != 0.0f);
    else if (beta != 0.0f)
        mhe_cost_record_gemm_bf16_acc(M, N, K);
    else
        mhe_cost_record_gemm_bf16_out(M, N, K, nullptr, 0.0);
    // Row-major C = op(A) op(B) as column-major Cᵀ = op(B)ᵀ op(A)ᵀ (the top of this file).
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            N, M, K, &alpha, pb, CUDA_R_16BF, B.ld, 0, pa, CUDA_R_16BF, A.ld, 0,
                                            &beta, C.p, C.is_act ? CUDA_R_16BF : CUDA_R_32F, C.ld, 0, 1,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K);
}

void cuda_install_matmul(Backend *be) {
    be->matmul = cuda_matmul;
    be->matmul_batched = cuda_matmul_batched;
}
// bf16 mode: matmul on bf16 operands; matmul_batched takes fp32 memory in both modes (ops.h).
void cuda_install_matmul_bf16(Backend *be) { be->matmul = act_matmul; }
