// Shared by the CUDA backend's .cu files: the backend context, profiling and the op tables
// each file installs.
#ifndef MHE_KERNELS_CUDA_INTERNAL_H
#define MHE_KERNELS_CUDA_INTERNAL_H

#include <chrono>

#include "kernels/cuda/cuda_compat.h"
#include "kernels/ops.h"

// fp32 staging buffers of one op's activations in bf16-activation mode (cuda_act.cu).
#define ACT_STAGE_SLOTS 10

struct CudaCtx {
    int device;
    int bf16;                     // bf16 matmuls on fp32 activations with bf16 twins (cuda_mirror.cu)
    int act_bf16;                 // activations stored as bf16 (be->act DT_BF16, cuda_act.cu; bf16 is 0)
    Backend *f32;                 // act_bf16: the fp32 op table the staged ops run (cuda_act.cu)
    float *stage[ACT_STAGE_SLOTS];  // act_bf16: fp32 staging of activations (grow-only)
    size_t stage_cap[ACT_STAGE_SLOTS];
    struct ActWeights *weights;   // act_bf16: bf16 copies of fp32 matmul operands (cuda_act.cu)
    int attention_mode;           // CUDA_ATTN_FLASH (default), _GEMM, _PLAIN: MHE_CUDA_ATTENTION
    cudaStream_t stream;
    cublasHandle_t blas;
    __nv_bfloat16 *bf16_scratch;  // matmul operands rounded to bf16 (grow-only)
    size_t bf16_scratch_elems;
    void **gemm_ptrs;             // pointer arrays of cuda_gemm_heads (grow-only)
    size_t gemm_ptrs_count;
    double *partials;             // per-block partial sums of sum_squares
    double *host_partials;
    struct MirrorSet *mirrors;    // bf16 twins of matmul operands (cuda_mirror.cu; bf16 mode)
    Backend *inner;               // the op table under cuda_lean.cu's wrappers (NULL: none)
    int lean;                     // bf16 mode: twins may hold values whose fp32 copy is skipped
                                  // (cuda_mirror.cu, cuda_lean.cu; MHE_CUDA_LEAN=0: off)
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

// Activation memory as fp32: while be->act is DT_F32 an Act holds floats (a bf16 run keeps its
// activations in fp32 with bf16 twins, cuda_mirror.cu).
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

// Row-major batched C = alpha op(A) op(B) + beta C through cuBLAS (bf16 operands in bf16 mode),
// without profiling: the building block of matmul_batched and of the attention GEMMs.
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
// in ONE cuBLAS call (pointer arrays built by a kernel), bf16 operands in bf16 mode.  C must be
// per head (C.ratio == 1): shared-head gradients are summed by the caller.
void cuda_gemm_heads(Backend *be, int ta, int tb, int M, int N, int K, float alpha, GemmHeads A,
                     GemmHeads B, float beta, GemmHeads C, int n_seq, int n_heads);

enum { CUDA_ATTN_FLASH, CUDA_ATTN_GEMM, CUDA_ATTN_PLAIN };

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
// Whether attention_forward/backward take Q, K, V from their bf16 twins (the tensor-core flash
// path) rather than reading the fp32 data.
int cuda_attention_reads_twins(Backend *be, const AttnShape *s);
void cuda_flash_tc_forward(Backend *be, const AttnShape *s, const float *q, const float *k,
                           const float *v, float *out, float *saved);
// gs: G = bf16(dout · out_scale) as the row dots stored it (with out_scale; else nullptr).
void cuda_flash_tc_backward(Backend *be, const AttnShape *s, const float *q, const float *k,
                            const float *v, const float *saved, const float *dout, const float *D,
                            const __nv_bfloat16 *gs, float *dq, float *dk, float *dv, float *dkey_bias);

// bf16 twins (cuda_mirror.cu).  An op about to write n contiguous floats at p asks for the twin
// to store bf16(value) into as well (nullptr: none; the range is then invalidated); any other
// write reports itself through cuda_mirror_wrote (or _alloc when its extent is unknown: the
// whole allocation holding p).  A matmul takes its operand's twin with cuda_mirror_operand.
__nv_bfloat16 *cuda_mirror_out(Backend *be, const float *p, size_t n);
__nv_bfloat16 *cuda_mirror_out2d(Backend *be, const float *p, size_t rows, size_t cols, size_t ld);
void cuda_mirror_wrote(Backend *be, const void *p, size_t bytes);
// The same for a write of EVERY float of the range (a GEMM's C with beta = 0): values held only
// by a lean twin there are dead, so they are not widened first (cuda_mirror.cu).
void cuda_mirror_overwrote(Backend *be, const void *p, size_t bytes);
// Lean twins (cuda_mirror.cu's header): an op that can skip its fp32 store asks for the twin
// with cuda_mirror_out_lean; *fp32 is then p, or nullptr when the segment is lean (store the
// twin only).  Every op declares the fp32 data it reads with cuda_mirror_read (stale ranges are
// widened first); cuda_mirror_epoch, once per optimizer step, turns segments lean.
// Lean-capable writers by kind: each kind is judged separately per segment (cuda_mirror.cu).
// LEAN_NORM: what the LayerNorm ops store (the residual step's sum and output, the backward's
// dx) — apart from GELU/dropout, since the same scratch buffer may hold a LayerNorm gradient one
// reader wants in fp32 (the embeddings') and dropped-out branch gradients only matmuls read.
typedef enum { LEAN_ELEMENTWISE, LEAN_ATTENTION, LEAN_LINEAR, LEAN_GEMM, LEAN_LOSS, LEAN_NORM, LEAN_SITES } LeanSite;
__nv_bfloat16 *cuda_mirror_out_lean(Backend *be, float *p, size_t n, float **fp32, LeanSite site);
__nv_bfloat16 *cuda_mirror_out2d_lean(Backend *be, float *p, size_t rows, size_t cols, size_t ld, float **fp32,
                                      LeanSite site);
void cuda_mirror_read(Backend *be, const void *p, size_t bytes);
void cuda_mirror_read_alloc(Backend *be, const void *p);  // the whole allocation holding p
// For ops whose lean form is another call (a GEMM writing bf16): the twin of [p, p + n) when its
// segment is lean (nothing marked: follow with cuda_mirror_out_lean), else nullptr; and, for the
// fp32 form, telling a dual segment that a lean-capable op wrote it.
__nv_bfloat16 *cuda_mirror_peek_lean(Backend *be, const float *p, size_t n, LeanSite site);
void cuda_mirror_note_lean(Backend *be, const float *p, size_t n, LeanSite site);
// For ops that can read a twin instead (the cross-entropy's logits): the twin of [p, p + n) when
// all of its fp32 data is stale (read that), else nullptr (read the fp32 data).  The declaration
// such an op makes is cuda_mirror_read_or_twin: it widens a partly stale range, and does not
// count as an fp32 read for the lean decision.
const __nv_bfloat16 *cuda_mirror_stale_twin(Backend *be, const float *p, size_t n);
// A twin segment for [p, p + n) without rounding anything into it (bf16 mode): so its producer
// can learn to write it lean for a reader that takes a stale twin (GELU's input).
void cuda_mirror_track(Backend *be, const float *p, size_t n);
void cuda_mirror_read_or_twin(Backend *be, const float *p, size_t n);
// A matmul added into the twin of the stale range [p, p + n) (beta != 0 on a lean C): it stays
// stale, its twin current.
void cuda_mirror_accumulated_twin(Backend *be, const float *p, size_t n);
void cuda_mirror_epoch(Backend *be);
// Known zeros (bf16 mode): cuda_memset marks its range; any reported write unmarks what it covers.
void cuda_mirror_zeroed(Backend *be, const void *p, size_t bytes);
bool cuda_mirror_known_zero(Backend *be, const void *p, size_t bytes);
// The op wrappers declaring every op's fp32 reads (cuda_lean.cu), installed last in bf16 mode.
void cuda_install_lean(Backend *be);
void cuda_mirror_wrote_alloc(Backend *be, const void *p);
const __nv_bfloat16 *cuda_mirror_operand(Backend *be, const float *p, size_t n);
void cuda_mirror_track_alloc(Backend *be, const void *p, size_t bytes);
void cuda_mirror_release(Backend *be, const void *p);
void cuda_mirror_destroy(Backend *be);
// y = bf16(x) for n elements on the backend's stream (the to_bf16 kernel).
void cuda_round_bf16(Backend *be, const float *x, __nv_bfloat16 *y, size_t n);

// p[i] as a float, from fp32 data or from a twin (kernels templated on where an input comes from).
__device__ __forceinline__ float ld_float(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float ld_float(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
// An output's old value, for an op accumulating into it: fp32, or (y null: a lean twin or a bf16
// activation) the bf16 value.
__device__ __forceinline__ float ld_old(const float *y, const __nv_bfloat16 *yb, size_t i) {
    return y ? y[i] : __bfloat162float(yb[i]);
}
// Stores v at y[i] (unless the op writes lean: y null) and, when the op has a twin, bf16(v) at yb[i].
__device__ __forceinline__ void store_twin(float *y, __nv_bfloat16 *yb, size_t i, float v) {
    if (y) y[i] = v;
    if (yb) yb[i] = __float2bfloat16(v);
}
// A bf16 activation: one rounding of v (no twin).
__device__ __forceinline__ void store_twin(__nv_bfloat16 *y, __nv_bfloat16 *, size_t i, float v) {
    y[i] = __float2bfloat16(v);
}
// The cost of an op plus its twin stores (2 bytes per element written).
static inline MheCost with_twin(MheCost c, const void *twin, double n) {
    if (twin) c.bytes += 2.0 * n;
    return c;
}
// The same for a lean-capable op: without its fp32 store (fp32 null) 4 bytes per element less.
static inline MheCost with_lean_twin(MheCost c, const void *twin, const float *fp32, double n) {
    c = with_twin(c, twin, n);
    if (!fp32) c.bytes -= 4.0 * n;
    return c;
}

void cuda_install_elementwise(Backend *be);
// bf16 activations (cuda_act.cu): the Act ops over bf16 storage, installed last.
void cuda_install_act_bf16(Backend *be);
// Their bf16 copies of fp32 matmul operands, one per backend allocation: its registration and
// release, an fp32 write into it (the copy goes stale), the copy to store bf16(value) into for
// an op updating fp32 data in place while the copy is current (the optimizer; nullptr: none),
// and the current copy of [p, p + n) (nullptr: p is not the backend's memory).
void cuda_act_track_alloc(Backend *be, const void *p, size_t bytes);
void cuda_act_release(Backend *be, const void *p);
void cuda_act_wrote(Backend *be, const void *p);
__nv_bfloat16 *cuda_act_store_copy(Backend *be, const float *p);
const __nv_bfloat16 *cuda_act_weight(Backend *be, const float *p, size_t n);
void cuda_act_weights_destroy(Backend *be);
// Their linear layers through cuBLASLt with the bias fused (cuda_linear.cu); false: no plan.
// With g: the FFN's GELU_TANH up projection, g = GELU(y) and y stored in one GEMM.
bool cuda_act_linear_forward(Backend *be, const __nv_bfloat16 *x, const float *W, const float *b, int N, int in,
                             int out, __nv_bfloat16 *y, __nv_bfloat16 *g = nullptr);
// dx = (dy W) ⊙ gelu'(u), GELU_TANH, one GEMM.
bool cuda_act_linear_dgelu(Backend *be, const __nv_bfloat16 *dy, const float *W, const __nv_bfloat16 *u, int N,
                           int in, int out, __nv_bfloat16 *dx);
bool cuda_act_linear_dw(Backend *be, const __nv_bfloat16 *dy, const __nv_bfloat16 *x, int N, int in, int out,
                        float *dW, float *db);
void cuda_install_norm_loss(Backend *be);
void cuda_install_loss(Backend *be);
void cuda_install_attention(Backend *be);
void cuda_install_linear(Backend *be);
void cuda_install_optim(Backend *be);
void cuda_optim_destroy(Backend *be);
void cuda_linear_destroy(Backend *be);

#endif
