// defines: what the CUDA backend's .cu files share: CudaCtx, profiling, buffers, install functions.
// Shared by the CUDA backend's .cu files: the backend context, profiling and the op tables
// each file installs.
#ifndef MHE_KERNELS_CUDA_INTERNAL_H
#define MHE_KERNELS_CUDA_INTERNAL_H

#include <chrono>

#include "kernels/cuda/cuda_compat.h"
#include "kernels/ops.h"

// fp32 staging buffers of one op's activations in bf16-activation mode (cuda_act_stage.h).
#define ACT_STAGE_SLOTS 10

struct CudaCtx {
    int device;
    int act_bf16;                 // activations stored as bf16 (be->act DT_BF16, cuda_act_stage.cu): bf16 mode
    Backend *f32;                 // act_bf16: the fp32 op table the staged ops run (cuda_act_stage.h)
    float *stage[ACT_STAGE_SLOTS];  // act_bf16: fp32 staging of activations (grow-only)
    size_t stage_cap[ACT_STAGE_SLOTS];
    struct WeightCopies *weights;   // act_bf16: bf16 copies of fp32 matmul operands (cuda_weight_copy.cu)
    struct AttnDispatch *attn;    // the attention-core registry's choices (cuda_attn_dispatch.cu)
    unsigned char *cudnn_ws;      // the cuDNN core's workspace, as its largest graph needs (grow-only)
    size_t cudnn_ws_cap;
    cudaStream_t stream;
    cublasHandle_t blas;
    __nv_bfloat16 *bf16_scratch;  // matmul operands rounded to bf16 (grow-only)
    size_t bf16_scratch_elems;
    __nv_bfloat16 *pad_weight;    // the head's weight and bias, bf16 with zeros to the padded width (grow-only)
    size_t pad_weight_elems;
    const float *pad_of[2];       // what pad_weight holds: W and b (nullptr: none), ...
    int pad_shape[3];             // ... out, in, ldy, ...
    uint64_t pad_version[2];      // ... from these versions of their copies (cuda_weight_copy_version)
    void **gemm_ptrs;             // pointer arrays of cuda_gemm_heads (grow-only)
    size_t gemm_ptrs_count;
    double *partials;             // per-block partial sums of sum_squares
    double *host_partials;
    struct LtState *lt;           // cuBLASLt handle, plans, workspace (cuda_linear.cu)
    struct AdamTable *adam;       // the range table of the multi-tensor AdamW (cuda_optim.cu)
    struct LambState *lamb;       // the chunk / range tables of the multi-tensor LAMB (cuda_optim.cu)
    float *colsum;                // partials of the two-stage column sums (cuda_colsum.h; grow-only)
    size_t colsum_cap;
    struct ColsumDefer *defer;    // stage 2s waiting for one launch (cuda_colsum.cu; NULL: at once)
    float *flash_part;            // partial dK/dV of split head groups (cuda_flash_tc_bwd.cu; grow-only)
    size_t flash_part_cap;
    __nv_bfloat16 *flash_g;       // G = bf16(dout * out_scale) of the tensor-core backward (cuda_flash.cu; grow-only)
    size_t flash_g_cap;
    int dkv_heads;                // MHE_CUDA_DKV_HEADS: heads per tensor-core dK/dV block (0: automatic)
    struct UploadStaging *staging;  // pinned slots of asynchronous uploads (cuda_staging.cu)
};

// cuda_staging.cu: uploads without draining the stream.
void cuda_staging_create(CudaCtx *c);
void cuda_staging_destroy(CudaCtx *c);
void cuda_staged_upload(Backend *be, void *dst, const void *src, size_t bytes);

// Activation memory as fp32: while be->act is DT_F32 (an fp32 run) an Act holds floats.
static inline float *af(Act *p) { return reinterpret_cast<float *>(p); }
static inline const float *af(const Act *p) { return reinterpret_cast<const float *>(p); }
static inline Act *fa(float *p) { return reinterpret_cast<Act *>(p); }
static inline const Act *fa(const float *p) { return reinterpret_cast<const Act *>(p); }

// Activation memory as bf16 (be->act DT_BF16).
static inline __nv_bfloat16 *ab(Act *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }
static inline const __nv_bfloat16 *ab(const Act *p) { return reinterpret_cast<const __nv_bfloat16 *>(p); }
static inline bool act16(Backend *be) { return be->act == DT_BF16; }

static inline CudaCtx *cuda_ctx(Backend *be) { return static_cast<CudaCtx *>(be->ctx); }
static inline cudaStream_t cuda_stream(Backend *be) { return cuda_ctx(be)->stream; }

// The cost model's FLOPs per element of the AdamW / LAMB kernels (sqrt and division count as one
// each).
#define ADAM_FLOPS 16.0

// Blocks of sum_squares (partials summed on the host in double): two per H100 SM (132), more
// than an A100 has SMs (108) — 64 left half an H100 idle on the gradient norm, a pass over
// every gradient each step.
#define CUDA_SUM_BLOCKS 264

// Every host wait for the stream outside the profiler goes through here, so the cost model counts
// and prices it (a drained GPU idles until the host's next launch).
static inline void cuda_stream_sync(Backend *be, const char *why) {
    mhe_cost_record_sync(why);
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
}

// With a profile attached, each op is bracketed by stream synchronisations so its host-clock
// time is the device time (ops.h allows this).
static inline double cuda_prof_begin(Backend *be) {
    if (!be->profile) return 0.0;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
static inline void cuda_prof_end(Backend *be, OpClass c, double t0, double flops) {
    mhe_cost_close_op(c);  // the cost model's records of this op get its class
    if (!be->profile) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    double t1 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    be->profile->seconds[c] += t1 - t0;
    be->profile->flops[c] += flops;
    be->profile->calls[c]++;
}

// Row-major batched C = alpha op(A) op(B) + beta C through cuBLAS on fp32 memory (bf16 mode runs
// it on the staged fp32 copies of cuda_act_stage.h), without profiling: the building block of matmul_batched and of the attention GEMMs
// (cuda_matmul.cu, with cuda_gemm_heads and cuda_gemm_heads_bf16 below).
void cuda_gemm_batched(Backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, long stride_a, const float *B, int ldb,
                       long stride_b, float beta, float *C, int ldc, long stride_c, int batch);

// Device memory the cost model counts towards the peak (every backend allocation goes here).
void *cuda_device_alloc(size_t bytes, int device);
void cuda_device_free(void *p);
// Grow-only device buffers (scratch, tables): buf holds at least `elems` T's afterwards, cap
// counts them; contents are not kept.  The old buffer may still be read by queued kernels, so
// the stream is drained before it is freed.  Steady-state steps never reallocate.
template <typename T> static inline T *cuda_grow(Backend *be, T *&buf, size_t &cap, size_t elems) {
    if (elems > cap) {
        CudaCtx *c = cuda_ctx(be);
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        cuda_device_free(buf);
        buf = static_cast<T *>(cuda_device_alloc(elems * sizeof(T), c->device));
        cap = elems;
    }
    return buf;
}
// Memset / device-to-device copy on the backend's stream, recorded as calls of the cost model.
void cuda_memset(Backend *be, void *p, size_t bytes);
void cuda_memcpy_d2d(Backend *be, void *dst, const void *src, size_t bytes);

// One operand of a GEMM batched over sequences and heads: the matrix of sequence b, head h
// starts at base + b*seq_stride + (h / ratio)*head_step (floats), rows ld apart.
struct GemmHeads {
    const float *base;
    int ld;
    long seq_stride, head_step;
    int ratio;
};
// C_bh = alpha op(A_bh) op(B_bh) + beta C_bh for every sequence b < n_seq and head h < n_heads
// in ONE cuBLAS call (pointer arrays built by a kernel), fp32 memory.  C must be
// per head (C.ratio == 1): shared-head gradients are summed by the caller.
void cuda_gemm_heads(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeads A,
                     GemmHeads B, float beta, GemmHeads C, int n_seq, int n_heads);
// The same over bf16 operands A and B (tensor cores, fp32 accumulation) into a C of either type,
// beta 0: the gemm_bf16 attention core.  Strides in elements of each operand's own type.
struct GemmHeadsBf16 {
    const void *base;
    bool bf16;  // C only: bf16 (else fp32); A and B are always bf16
    int ld;
    long seq_stride, head_step;
    int ratio;
};
void cuda_gemm_heads_bf16(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeadsBf16 A,
                          GemmHeadsBf16 B, GemmHeadsBf16 C, int n_seq, int n_heads);

// Fused attention (cuda_flash.cu): shapes whose tiles fit in shared memory; saved = L and
// Opre, scratch = D (floats).  The backward accumulates the out_scale/out_shift gradients (when
// not NULL) from Opre (the second part of `saved`, [B, T, n, v_dim]) in its row-dot pass.
int cuda_flash_supported(const AttnShape *s);
void cuda_flash_sizes(const AttnShape *s, size_t *saved, size_t *scratch);
void cuda_flash_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                        const float *v, float *out, float *saved);
void cuda_flash_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                         const float *v, const float *saved, const float *dout, float *dq,
                         float *dk, float *dv, float *dkey_bias, float *dout_scale, float *dout_shift,
                         float *scratch);

// The same on tensor cores (cuda_flash_tc.cu), bf16 mode with qk_dim == v_dim in {16, 32, 64};
// cuda_flash_forward/backward dispatch to it.  D: the backward's row dots (scratch).
int cuda_flash_tc_supported(Backend *be, const AttnShape *s);
// Whether attention_forward/backward run the tensor-core flash kernels, which read and store the
// bf16 activations themselves (else cuda_attention.cu stages them in fp32, cuda_act_stage.h).
int cuda_attention_tc(Backend *be, const AttnShape *s);
void cuda_flash_tc_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                           const float *v, float *out, float *saved);
// gs: G = bf16(dout · out_scale) as the row dots stored it (with out_scale; else nullptr).
void cuda_flash_tc_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                            const float *v, const float *saved, const float *dout, const float *D,
                            const __nv_bfloat16 *gs, float *dq, float *dk, float *dv, float *dkey_bias);

// fp32 writes (cuda_weight_copy.cu).  Every write of fp32 device memory reports itself, for two
// readers: a column sum waiting to add into [p, p + bytes) goes first (cuda_colsum.h), and in bf16
// mode the bf16 copy of the allocation holding p (a matmul's fp32 operand: a weight) goes stale.
// _alloc: the whole allocation holding p (a write whose extent is unknown: a row scatter).
void cuda_fp32_wrote(Backend *be, const void *p, size_t bytes);
void cuda_fp32_wrote_alloc(Backend *be, const void *p);
// An op updating n floats at p in place stores bf16(value) into the returned current copy as it
// stores the value (AdamW, LAMB's step, the fp32 elementwise ops: the copy stays current across
// optimizer steps); nullptr: none (fp32 mode, no copy yet, or p not the backend's memory).
__nv_bfloat16 *cuda_fp32_copy_out(Backend *be, const float *p, size_t n);
// y = bf16(x) for n elements on the backend's stream (the to_bf16 kernel, cuda_weight_copy.cu).
void cuda_round_bf16(Backend *be, const float *x, __nv_bfloat16 *y, size_t n);

// An activation in bf16 mode (nullptr in fp32 mode): the kernels shared by both modes take an
// fp32 pointer and a bf16 one, one of them null, and are templated on where an input comes from.
static inline const __nv_bfloat16 *act_in(Backend *be, const float *p) {
    return act16(be) ? reinterpret_cast<const __nv_bfloat16 *>(p) : nullptr;
}
static inline __nv_bfloat16 *act_bf(Backend *be, float *p) {
    return act16(be) ? reinterpret_cast<__nv_bfloat16 *>(p) : nullptr;
}
// An output: *fp32 is p in fp32 mode (nullptr in bf16 mode), the result its bf16 storage in bf16
// mode (nullptr in fp32 mode).
static inline __nv_bfloat16 *act_out(Backend *be, float *p, float **fp32) {
    *fp32 = act16(be) ? nullptr : p;
    return act_bf(be, p);
}

// p[i] as a float, from fp32 data or from bf16 storage (kernels templated on an input's type).
__device__ __forceinline__ float ld_float(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld_float(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
// An output's old value, for an op accumulating into it: fp32, or (y null) the bf16 value.
__device__ __forceinline__ float ld_old(const float *y, const __nv_bfloat16 *yb, size_t i) {
    return y ? y[i] : __bfloat162float(yb[i]);
}
// Stores v at y[i] (fp32; y null in bf16 mode) and bf16(v) at yb[i] when yb is set: the bf16
// activation, or the current weight copy of y (cuda_fp32_copy_out).
__device__ __forceinline__ void store_dual(float *y, __nv_bfloat16 *yb, size_t i, float v) {
    if (y) y[i] = v;
    if (yb) yb[i] = __float2bfloat16(v);
}
// A bf16 activation: one rounding of v.
__device__ __forceinline__ void store_dual(__nv_bfloat16 *y, __nv_bfloat16 *, size_t i, float v) {
    y[i] = __float2bfloat16(v);
}
// The cost of an op plus its bf16 stores (2 bytes per element written).
static inline MheCost with_bf16_store(MheCost c, const void *bf, double n) {
    if (bf) c.bytes += 2.0 * n;
    return c;
}
// The same for an op whose output is an activation: without its fp32 store (fp32 null: bf16
// mode) 4 bytes per element less.
static inline MheCost with_act_store(MheCost c, const void *bf, const float *fp32, double n) {
    c = with_bf16_store(c, bf, n);
    if (!fp32) c.bytes -= 4.0 * n;
    return c;
}

// Grid-stride loop over [0, n), and the grid of one thread per column.
#define GRID_STRIDE(i, n)                                                               \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);            \
         i += (size_t)blockDim.x * gridDim.x)
static inline unsigned cols_grid(size_t cols) { return (unsigned)((cols + MHE_BLOCK - 1) / MHE_BLOCK); }

// Each file's ops into the table (one file per layer family; the file's first line says what
// it defines).
void cuda_install_matmul(Backend *be);
void cuda_install_bias(Backend *be);
void cuda_install_elementwise(Backend *be);
void cuda_install_rows(Backend *be);
void cuda_install_heads(Backend *be);
void cuda_install_activation(Backend *be);
void cuda_install_embedding(Backend *be);
void cuda_install_reduce(Backend *be);
// bf16 activations (cuda_act_stage.cu): Backend.act and the conversions at the host boundary,
// installed after every family's fp32 ops.
void cuda_install_act_bf16(Backend *be);
// Each family's ops on bf16 activations, installed after cuda_install_act_bf16 (which keeps the
// fp32 table they replace, for the staged ops).
void cuda_install_matmul_bf16(Backend *be);
void cuda_install_bias_bf16(Backend *be);
void cuda_install_linear_bf16(Backend *be);
void cuda_install_elementwise_bf16(Backend *be);
void cuda_install_layernorm_bf16(Backend *be);
void cuda_install_attention_bf16(Backend *be);
// Their bf16 copies of fp32 matmul operands, one per backend allocation (cuda_weight_copy.cu):
// its registration and release (bf16 mode), and the current copy of [p, p + n) (nullptr: p is
// not the backend's memory).
void cuda_weight_copy_track(Backend *be, const void *p, size_t bytes);
void cuda_weight_copy_release(Backend *be, const void *p);
const __nv_bfloat16 *cuda_weight_copy(Backend *be, const float *p, size_t n);
// A number that changes whenever the copy of the allocation holding p may change (a write
// reported, a re-rounding, a dual store handed out); 0: no copy tracked.  What is derived from a
// copy (the padded head weight, cuda_pad_ld.cu) is kept while the number stays.
uint64_t cuda_weight_copy_version(Backend *be, const float *p);
void cuda_weight_copies_destroy(Backend *be);
// GELU on bf16 activations 8 elements a thread through 16-byte accesses (cuda_gelu.cu): false
// (nothing done) when a pointer is off 16 bytes or n off 8 elements.
bool cuda_gelu_forward_vec(Backend *be, GeluKind kind, const __nv_bfloat16 *x, __nv_bfloat16 *y, size_t n);
bool cuda_gelu_backward_vec(Backend *be, GeluKind kind, const __nv_bfloat16 *x, const __nv_bfloat16 *dy,
                            __nv_bfloat16 *dx, size_t n);
// Their linear layers through cuBLASLt with the bias fused (cuda_linear.cu); false: no plan.
// With g: the FFN's GELU_TANH up projection, g = GELU(y) and y stored in one GEMM.
bool cuda_act_linear_forward(Backend *be, const __nv_bfloat16 *x, const float *W, const float *b, int N, int in,
                             int out, __nv_bfloat16 *y, __nv_bfloat16 *g = nullptr);
// dx = (dy W) ⊙ gelu'(u), GELU_TANH, one GEMM.
bool cuda_act_linear_dgelu(Backend *be, const __nv_bfloat16 *dy, const float *W, const __nv_bfloat16 *u, int N,
                           int in, int out, __nv_bfloat16 *dx);
// dW (+)= dyᵀ x, db += Σ dy in one BGRADB GEMM; store: dW holds zeros (ops.h dW_zero), beta 0.
bool cuda_act_linear_dw(Backend *be, const __nv_bfloat16 *dy, const __nv_bfloat16 *x, int N, int in, int out,
                        float *dW, float *db, bool store, int ldy = 0);  // ldy: dy's leading dimension (0: out)
// ops.h's dW_zero promise: the emulation checks dW [n] and db [nb] hold zeros (fatal otherwise);
// a no-op on a device and in the cost model's record-only runs.
void cuda_check_dw_zero(Backend *be, const float *dW, size_t n, const float *db, size_t nb, const char *op);
// y [N, out] = x Wᵀ + b in one BIAS GEMM from W's and b's bf16 copies as given (the padded head's,
// cuda_pad_ld.cu, grown by zeros to out); false (nothing done) without a plan.
bool cuda_act_linear_forward_padded(Backend *be, const __nv_bfloat16 *x, const __nv_bfloat16 *W,
                                    const __nv_bfloat16 *b, int N, int in, int out, __nv_bfloat16 *y);
void cuda_install_linear_ld(Backend *be);
// dbias[c] += Σ_r dy[r, c] with dy's rows ld apart (cuda_bias.cu): fp32 dy and bf16;
// bias_backward is each with ld = C.
void cuda_bias_backward_ld(Backend *be, const float *dy, int N, int C, int ld, float *dbias);
void cuda_act_bias_backward_ld(Backend *be, const Act *dy, int N, int C, int ld, float *dbias);
void cuda_install_layernorm(Backend *be);
void cuda_install_loss(Backend *be);
void cuda_install_attention(Backend *be);
void cuda_install_linear(Backend *be);
void cuda_install_optim(Backend *be);
void cuda_optim_destroy(Backend *be);
void cuda_linear_destroy(Backend *be);

#endif
