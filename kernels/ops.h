// The backend-neutral op interface (DESIGN.md §3): the model is written once against a Backend,
// a table of function pointers plus a context pointer; kernels/cpu and kernels/cuda fill it.
//
// Making a backend:
//     Backend *be = backend_cpu_create(threads);   // threads <= 0: OpenMP default
//     float *x = be->alloc(be, n * sizeof(float));  // memory of the backend's space
//     be->upload(be, x, host, n * sizeof(float));
//     ...
//     be->free(be, x);
//     be->destroy(be);                              // frees the Backend itself
// The CUDA backend: backend_cuda_create_for(device, bf16) in kernels/backend_info.h.
//
// Conventions, for every op:
// - Pointers are in the backend's memory space (device pointers on CUDA), including the int32
//   index arrays (ids, labels, masks).  Scalars (sizes, alpha, p, seeds) are host values.
// - Two element types, and the type of every argument says which (DESIGN.md §3, "Typed
//   activations"): `float *` is fp32 memory — parameters, their gradients, optimizer moments,
//   LayerNorm statistics, the loss — and `Act *` is an activation or an activation's gradient,
//   whose elements are of the backend's Backend.act type: bf16 in a bf16 run, fp32 otherwise.
//   Act is incomplete, so an activation cannot be read as floats and a float * cannot be passed
//   where an activation is expected (or the reverse): that mismatch does not compile.  Every op
//   computes in fp32 inside and rounds once when it stores an Act.
// - Matrices are row-major.  "[N, C]" is N rows of C elements, contiguous unless an ld is given;
//   strides and sizes count elements, not bytes, except in the memory ops.
// - Parameter gradients ALWAYS accumulate (+=) so gradient accumulation over micro-batches is
//   free.  Activation gradients overwrite, unless the op has an `accumulate` flag set to 1.
// - The linear layers' backward ops take `dW_zero`: nonzero is the caller's promise that dW and
//   db hold zeros (their first write in a step, after the model's zero_grad), so a backend may
//   store the products instead of adding them — the same values without reading dW back, 4
//   bytes per weight per step.  The CUDA emulation checks the promise.
// - In-place use is allowed only where a comment says so.
// - Ops run in order on one stream; results returned to the host (sum_squares) synchronise.
// - `profile`, when non-NULL, receives per-class time and matmul flops; backends that cannot
//   time ops cheaply (asynchronous devices) may synchronise around each op when it is set.
#ifndef MHE_KERNELS_OPS_H
#define MHE_KERNELS_OPS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __CUDACC__
#define OPS_HD __host__ __device__
#else
#define OPS_HD
#endif

// Dropout randomness is a pure function of (seed, offset, element index) so forward and
// backward regenerate the same mask without storing it, and CPU and CUDA agree bit for bit.
// The constants are named so vector forms (kernels/cpu/cpu_attention_rows.c) share them.
#define OPS_MIX64_GOLDEN 0x9e3779b97f4a7c15ULL
#define OPS_MIX64_M1 0xbf58476d1ce4e5b9ULL
#define OPS_MIX64_M2 0x94d049bb133111ebULL
static inline OPS_HD uint64_t ops_mix64(uint64_t x) {
    x += OPS_MIX64_GOLDEN;
    x = (x ^ (x >> 30)) * OPS_MIX64_M1;
    x = (x ^ (x >> 27)) * OPS_MIX64_M2;
    return x ^ (x >> 31);
}
// Element i is kept iff its uniform draw in [0,1) (24 bits) is >= p.
static inline OPS_HD int ops_dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, float p) {
    uint64_t bits = ops_mix64(ops_mix64(seed ^ ops_mix64(offset)) + i);
    float u = (float)(bits >> 40) * (1.0f / 16777216.0f);
    return u >= p;
}
// The same decision split for loops: key once per (seed, offset), an integer threshold once
// per p; ops_dropout_keep_fast(key, i, thr) == ops_dropout_keep(seed, offset, i, p) exactly
// (u = k/2^24 with k an integer, so u >= p  <=>  k >= ceil(p 2^24)).
static inline OPS_HD uint64_t ops_dropout_key(uint64_t seed, uint64_t offset) {
    return ops_mix64(seed ^ ops_mix64(offset));
}
static inline OPS_HD uint32_t ops_dropout_threshold(float p) {
    float t = p * 16777216.0f;  // exact: scaling by a power of two
    uint32_t k = (uint32_t)t;
    return (float)k < t ? k + 1 : k;
}
// ops_mix64's last step, x ^ (x >> 31), leaves bits 40..63 unchanged (x >> 31 is 0 there), so
// the top 24 bits are taken before it: the same bits, two operations fewer per element.
static inline OPS_HD int ops_dropout_keep_fast(uint64_t key, uint64_t i, uint32_t threshold) {
    uint64_t x = key + i + OPS_MIX64_GOLDEN;
    x = (x ^ (x >> 30)) * OPS_MIX64_M1;
    x = (x ^ (x >> 27)) * OPS_MIX64_M2;
    return (uint32_t)(x >> 40) >= threshold;
}

// Element types of backend memory.
typedef enum { DT_F32 = 0, DT_BF16 = 1 } DType;
static inline OPS_HD size_t dtype_size(DType t) { return t == DT_BF16 ? 2 : 4; }
static inline const char *dtype_name(DType t) { return t == DT_BF16 ? "bf16" : "fp32"; }
// The row stride of the vocabulary head's logits [N, V] (linear_forward_ld, cross_entropy_*):
// in bf16, V rounded up to 64 elements (128 bytes: whole cache lines and the GEMMs' 64- and
// 128-wide tiles, GPT-2's 50257 -> 50304 = 393 x 128; BERT's 30522 -> 30528).  An odd V (BERT's 30522, GPT-2's 50257) as a
// leading dimension or a product's side keeps both backends off their fast kernels: cuBLAS fell to
// alignment-1 kernels on the H200 (kernels/cuda/CALIBRATION.md run 4), oneDNN's bf16 matmul on an
// AMX Xeon ran the head's three products 27% slower (kernels/cpu/README.md).  fp32 keeps V: its
// results stay those of the unpadded layout, bit for bit.
static inline OPS_HD int ops_head_ld(DType act, int V) { return act == DT_BF16 ? (V + 63) / 64 * 64 : V; }

// An element of an activation buffer (see the conventions above).  Never defined.
typedef struct Act Act;

// A matmul operand or result: fp32 memory (is_act 0) or an activation (is_act 1, of the
// backend's Act type), with its leading dimension in elements.  Made with mat_f32 / mat_act and
// out_f32 / out_act, so each operand's kind is checked where the call is written.
typedef struct {
    const void *p;
    int ld;
    int is_act;
} MatIn;
typedef struct {
    void *p;
    int ld;
    int is_act;
} MatOut;
static inline MatIn mat_f32(const float *p, int ld) { MatIn m = {p, ld, 0}; return m; }
static inline MatIn mat_act(const Act *p, int ld) { MatIn m = {p, ld, 1}; return m; }
static inline MatOut out_f32(float *p, int ld) { MatOut m = {p, ld, 0}; return m; }
static inline MatOut out_act(Act *p, int ld) { MatOut m = {p, ld, 1}; return m; }

typedef enum {
    OPC_MATMUL,      // matmul, matmul_batched (the model's projections and heads)
    OPC_ATTENTION,   // attention_forward/backward (scores, softmax, weighted sum)
    OPC_NORM_ACT,    // layernorm, gelu, dropout, bias, residual adds, head_expand
    OPC_LOSS,        // cross_entropy_*
    OPC_OTHER,       // embeddings, memory, optimizer, reductions
    OPC_COUNT
} OpClass;

typedef struct {
    double seconds[OPC_COUNT];
    double flops[OPC_COUNT];   // multiply-add = 2 flops; matmul and attention products counted
    long calls[OPC_COUNT];
} OpProfile;

typedef enum { GELU_ERF, GELU_TANH } GeluKind;

// The attention core of DESIGN.md §1, for B sequences of T tokens and n query heads.
// Query head h uses Q head h / (n / q_heads), K head h / (n / k_heads) and V head
// h / (n / v_heads); q_heads, k_heads, v_heads each divide n (1 = shared, n = per head).
//   S_h   = scale * Q_h K_hᵀ + key_bias[:, h] (per key, not scaled) + mask
//   P_h   = softmax over keys of S_h (masked keys get probability exactly 0; a row with no
//           visible key gets all-zero probabilities and outputs out_shift only)
//   O_h   = (dropout(P_h) V_h) ⊙ out_scale[h] + out_shift[h]     (broadcast over tokens)
// Masks: causal hides keys j > i; key_mask[b, j] == 0 hides key j of sequence b.
typedef struct {
    int B, T;
    int n_heads;                  // query heads n (= output heads)
    int q_heads, k_heads, v_heads;
    int qk_dim;                   // per-head dim of Q and K
    int v_dim;                    // per-head dim of V and of the output
    int ldq, ldk, ldv;            // row strides (elements) of q, k, v: row (b*T+t), head g at
                                  // column g*qk_dim (q, k) or g*v_dim (v); >= heads*dim
    float scale;                  // usually 1/sqrt(d)
    int causal;
    const int32_t *key_mask;      // [B, T], 1 real / 0 padding; NULL: all real
    // Every row of key_mask is 1s then 0s with at least one 1 (trailing padding, what the loaders
    // make): a core may then take the mask as per-sequence key counts (cuDNN's padding mask).
    int key_mask_trailing;
    const Act *key_bias;          // [B, T, n_heads]: bias of key j for head h; NULL: none
    const float *out_scale;       // [n_heads, v_dim]; NULL: 1
    const float *out_shift;       // [n_heads, v_dim]; NULL: 0
    float dropout;                // on P; 0 or training off: none
    uint64_t seed, offset;        // dropout element index: ((b*n + h)*T + i)*T + j
    // [n_heads, qk_dim]: query head h's Q is its q head ⊙ q_scale[h] (mhe_mul's per-head query
    // scale, applied by the core instead of a materialised head_expand); NULL: none.  Set only
    // when the backend's attention_q_scale accepts the shape.  The backward then writes dq as the
    // gradient of the scaled per-head queries, [B*T, n_heads*qk_dim] contiguous (not summed over
    // the heads sharing a q head): the caller's head_expand_backward applies the chain rule.
    const float *q_scale;
} AttnShape;

typedef struct Backend Backend;
struct Backend {
    void *ctx;
    const char *name;             // "cpu", "cuda"
    DType act;                    // the element type of every Act buffer, fixed at creation
    OpProfile *profile;           // NULL: no profiling
    void (*destroy)(Backend *be);

    // ---- memory (bytes) ----
    void *(*alloc)(Backend *be, size_t bytes);   // zero-filled; aborts on failure
    void (*free)(Backend *be, void *p);          // NULL ok
    void (*upload)(Backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(Backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(Backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(Backend *be, void *dst, size_t bytes);
    void (*synchronize)(Backend *be);
    // n activation elements to or from fp32 host memory, converted (rounded to nearest even on
    // the way in): what the host reads of logits and task outputs, or writes as a gradient.
    void (*upload_act)(Backend *be, Act *dst, const float *host_src, size_t n);
    void (*download_act)(Backend *be, float *host_dst, const Act *src, size_t n);
    // Optional (NULL: nothing to keep): the fp32 memory p[0, n) — the model's parameters — will
    // not change until the next call, by any writer (host code included); p NULL ends the promise.
    // Meanwhile the backend may reuse values derived from it (the CPU backend's bf16 copies of the
    // weights in bf16 products); every call drops them.  The model makes the promise for a
    // training forward up to the end of its backward.
    void (*weights_steady)(Backend *be, const float *p, size_t n);
    // Free and total bytes of the backend's own memory (a device's); NULL when the backend's
    // memory is the host's (the caller asks the operating system).
    void (*memory_info)(Backend *be, size_t *free_bytes, size_t *total_bytes);

    // ---- dense algebra ----
    // C[M,N] = alpha * op(A) op(B) + beta * C, row-major; op(A) is [M,K]: A is [M,K] (A.ld >= K)
    // or, with trans_a, [K,M] (A.ld >= M); likewise B.  beta = 0 ignores C's old contents.  Each
    // of A, B, C is fp32 or an activation (MatIn, MatOut); the products accumulate in fp32.
    void (*matmul)(Backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   MatIn A, MatIn B, float beta, MatOut C);
    // The same for `batch` independent fp32 products, operand i at A + i*stride_a (floats) etc.
    void (*matmul_batched)(Backend *be, int trans_a, int trans_b, int M, int N, int K,
                           float alpha, const float *A, int lda, long stride_a, const float *B,
                           int ldb, long stride_b, float beta, float *C, int ldc, long stride_c,
                           int batch);
    // A linear layer, y [N, out] = x [N, in] Wᵀ (W [out, in]) + b (b may be NULL), and its
    // backward, dx = dy W (dx may be NULL; accumulate adds to it), dW += dyᵀ x, db += Σ_rows dy
    // (db may be NULL; dW_zero: see the conventions above).
    void (*linear_forward)(Backend *be, const Act *x, const float *W, const float *b, int N,
                           int in, int out, Act *y);
    void (*linear_backward)(Backend *be, const Act *dy, const Act *x, const float *W, int N,
                            int in, int out, Act *dx, int accumulate, float *dW, float *db,
                            int dW_zero);
    // The same layer with y's (dy's) rows ldy >= out elements apart: the vocabulary head, whose
    // ldy is ops_head_ld.  The forward writes zeros in columns [out, ldy); the backward expects
    // zeros there (cross_entropy_backward leaves them so).  ldy == out is the pair above.
    void (*linear_forward_ld)(Backend *be, const Act *x, const float *W, const float *b, int N,
                              int in, int out, int ldy, Act *y);
    void (*linear_backward_ld)(Backend *be, const Act *dy, const Act *x, const float *W, int N,
                               int in, int out, int ldy, Act *dx, int accumulate, float *dW,
                               float *db, int dW_zero);
    // y[r, c] += bias[c] for y [N, C].
    void (*bias_add)(Backend *be, Act *y, const float *bias, int N, int C);
    // dbias[c] += sum_r dy[r, c].
    void (*bias_backward)(Backend *be, const Act *dy, int N, int C, float *dbias);

    // ---- elementwise (n elements) ----
    void (*add)(Backend *be, const Act *a, const Act *b, Act *out, size_t n);        // out = a+b, in-place ok
    // fp32 (parameters, gradients, optimizer state):
    void (*axpy)(Backend *be, float alpha, const float *x, float *y, size_t n);      // y += alpha x
    void (*scale)(Backend *be, float *x, float alpha, size_t n);                     // x *= alpha
    void (*add_scalar)(Backend *be, const float *x, float c, float *out, size_t n);  // out = x + c, in-place ok
    void (*mul)(Backend *be, const float *a, const float *b, float *out, size_t n);  // out = a*b, in-place ok
    void (*mul_acc)(Backend *be, const float *a, const float *b, float *out, size_t n); // out += a*b

    // ---- per-head broadcast (head embeddings, collab mixing, mhe_mul query scale) ----
    // out[r, h, :] = x[r, :] * (mul ? mul[h, :] : 1) + (add ? add[h, :] : 0)
    // x [N, d] with row stride ldx; mul, add [n, d]; out [N, n*d] contiguous.
    void (*head_expand)(Backend *be, const Act *x, int ldx, const float *mul, const float *add,
                        int N, int n, int d, Act *out);
    // dx[r, :] (=, or += with accumulate) sum_h dout[r, h, :] * (mul ? mul[h, :] : 1)  (dx row stride ldx)
    // dmul[h, :] += sum_r dout[r, h, :] * x[r, :]     (skipped when dmul is NULL)
    // dadd[h, :] += sum_r dout[r, h, :]                (skipped when dadd is NULL)
    void (*head_expand_backward)(Backend *be, const Act *dout, const Act *x, int ldx,
                                 const float *mul, int N, int n, int d, Act *dx, int accumulate,
                                 float *dmul, float *dadd);
    // Optional (NULL: add_scalar and mul per row): mhe_mul's per-head scales of `rows` layers in
    // one call, for parameters that sit at a fixed stride.  Row r reads e_r = e + r*lde (3w
    // floats: e^Q, e^K, e^V) and writes s_r = s + r*lds: s_r[0, 3w) = 1 + e_r and, with prod,
    // s_r[3w, 4w) = s_r[0, w) ⊙ s_r[w, 2w) — the values add_scalar and mul give (fp32, one
    // rounding each).
    void (*head_scales)(Backend *be, const float *e, size_t lde, int rows, int w, int prod, float *s,
                        size_t lds);
    // Optional (NULL: head_expand_backward into a zeroed dm, then two mul_acc): the backward of
    // head_expand with mul = f ⊙ g (mhe_mul's query scale, `mul` its precomputed value): dx as
    // head_expand_backward, and the scale's gradient dm[h, :] = sum_r dout[r, h, :] * x[r, :]
    // split by the product rule, df += dm ⊙ g, dg += dm ⊙ f (f, g, df, dg [n, d]; df or dg may be
    // NULL).  dm is never stored.
    void (*head_expand_backward_prod)(Backend *be, const Act *dout, const Act *x, int ldx,
                                      const float *mul, const float *f, const float *g, int N, int n,
                                      int d, Act *dx, int accumulate, float *df, float *dg);

    // ---- row gather / scatter (the MLM head runs on the selected positions only) ----
    // dst[i, :] = src[rows[i], :] for i < M; rows [M] int32, each < src_rows, the rows of src;
    // src, dst have C columns.
    void (*gather_rows)(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst,
                        int src_rows);
    // dst[rows[i], :] = src[i, :] for i < M (rows distinct, each < dst_rows, the rows of dst);
    // other rows of dst untouched.
    void (*scatter_rows)(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst,
                         int dst_rows);

    // ---- normalisation and activations ----
    // y = (x - mean) * rstd * gamma + beta per row of [N, C]; saves mean[N], rstd[N].
    // rstd = 1/sqrt(var + eps) with the biased variance (as torch).  y may alias x.
    void (*layernorm_forward)(Backend *be, const Act *x, const float *gamma, const float *beta,
                              int N, int C, float eps, Act *y, float *mean, float *rstd);
    // Optional (NULL: dropout, add, layernorm_forward): a layer's residual step in one pass,
    // s = x + dropout(r) (dropout exactly as the dropout op with p, seed, offset over the N*C
    // elements; s may alias r), then y = LayerNorm(s) as layernorm_forward (y may alias s).
    void (*residual_layernorm_forward)(Backend *be, const Act *x, const Act *r, float p,
                                       uint64_t seed, uint64_t offset, const float *gamma,
                                       const float *beta, int N, int C, float eps, Act *s,
                                       Act *y, float *mean, float *rstd);
    // xhat = (x - mean) * rstd;  dgamma += sum_r dy*xhat;  dbeta += sum_r dy;
    // dx (=, or += with accumulate) = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)), g = dy*gamma.
    // dx may alias dy only when accumulate == 0.
    void (*layernorm_backward)(Backend *be, const Act *dy, const Act *x, const float *gamma,
                               const float *mean, const float *rstd, int N, int C, Act *dx,
                               int accumulate, float *dgamma, float *dbeta);
    // Optional (NULL: layernorm_backward, then dropout): the same, and dr = dropout(dx) of the
    // values dx now holds (the dropout op with p, seed, offset over the N*C elements) — the
    // gradient of the dropped-out branch under a residual, in the pass that makes dx.  dx and dr
    // are not NULL; dr does not alias dy, x or dx.
    void (*layernorm_backward_dropout)(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                       const float *mean, const float *rstd, int N, int C, Act *dx,
                                       int accumulate, float *dgamma, float *dbeta, float p, uint64_t seed,
                                       uint64_t offset, Act *dr);
    // GELU_ERF: x/2 (1 + erf(x/√2));  GELU_TANH: x/2 (1 + tanh(√(2/π)(x + 0.044715 x³))).
    void (*gelu_forward)(Backend *be, GeluKind kind, const Act *x, Act *y, size_t n);
    // dx = dy * gelu'(x); dx may alias dy.
    void (*gelu_backward)(Backend *be, GeluKind kind, const Act *x, const Act *dy, Act *dx,
                          size_t n);
    // Optional (NULL: linear_forward, then gelu_forward): the FFN's up projection and its GELU,
    // u = x Wᵀ + b (b not NULL) and g = GELU(u), as those two ops — a backend may fuse them
    // (cuBLASLt's GELU epilogue, GELU_TANH only; values within its precision of the two ops).
    void (*linear_gelu_forward)(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b,
                                int N, int in, int out, Act *u, Act *g);
    // Optional (NULL: linear_backward with accumulate 0, then gelu_backward on dx): the down
    // projection's backward into the GELU's input gradient, dx = (dy W) * gelu'(u) (u [N, in]
    // as linear_gelu_forward wrote it), dW += dyᵀ x, db += Σ dy (dW_zero as linear_backward); dx
    // not NULL.
    void (*linear_backward_gelu)(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W,
                                 int N, int in, int out, const Act *u, Act *dx, float *dW, float *db,
                                 int dW_zero);
    // y = tanh(x) (the BERT pooler of the fine-tuning heads); y may alias x.
    void (*tanh_forward)(Backend *be, const Act *x, Act *y, size_t n);
    // dx = dy * (1 - y²) from the forward's output y; dx may alias dy.
    void (*tanh_backward)(Backend *be, const Act *y, const Act *dy, Act *dx, size_t n);
    // y[i] = keep(i) ? x[i] / (1 - p) : 0 with keep = ops_dropout_keep(seed, offset, i, p).
    // The backward is the same call on dy.  In-place ok.  p = 0 copies.
    void (*dropout)(Backend *be, const Act *x, Act *y, size_t n, float p, uint64_t seed,
                    uint64_t offset);

    // ---- embeddings ----
    // out[b, t, :] = word[ids[b,t]] + pos[t] + (type ? type[type_ids ? type_ids[b,t] : 0] : 0)
    void (*embedding_forward)(Backend *be, const int32_t *ids, const int32_t *type_ids,
                              const float *word, const float *pos, const float *type, int B,
                              int T, int D, Act *out);
    // Optional (NULL: embedding_forward into e, layernorm_forward of e into y, dropout of y in
    // place): BERT's embedding block in one pass — e as embedding_forward, y = dropout(LayerNorm(e))
    // with mean, rstd as layernorm_forward and the dropout op's mask (p, seed, offset over the
    // B*T*D elements).
    void (*embedding_layernorm_forward)(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                        const float *word, const float *pos, const float *type,
                                        const float *gamma, const float *beta, int B, int T, int D,
                                        float eps, float p, uint64_t seed, uint64_t offset, Act *e,
                                        Act *y, float *mean, float *rstd);
    // Scatter-add of dout into dword, dpos (rows 0..T-1) and dtype (when non-NULL).
    void (*embedding_backward)(Backend *be, const Act *dout, const int32_t *ids,
                               const int32_t *type_ids, int B, int T, int D, float *dword,
                               float *dpos, float *dtype);

    // ---- loss: softmax cross-entropy over rows of logits [N, V], rows ld >= V apart ----
    // Rows with label < 0 are skipped: loss[r] = 0.  Otherwise loss[r] = lse[r] - logits[r, label],
    // lse[r] = log sum_v exp(logits[r, v]), reduced in fp32.  Writes loss[N] and lse[N] (fp32).
    // Columns [V, ld) are not read.
    void (*cross_entropy_forward)(Backend *be, const Act *logits, const int32_t *labels, int N,
                                  int V, int ld, float *loss, float *lse);
    // dlogits[r, :V] = grad_scale * (softmax(logits[r]) - onehot(label)), or 0 when label < 0;
    // columns [V, ld) are set to 0 (what linear_backward_ld expects).  grad_scale is 1/count for
    // a mean; dlogits may alias logits (the loss backward then overwrites the logits).
    void (*cross_entropy_backward)(Backend *be, const Act *logits, const float *lse,
                                   const int32_t *labels, int N, int V, int ld, float grad_scale,
                                   Act *dlogits);

    // ---- attention core (see AttnShape) ----
    // Sizes of the two work buffers, fp32 memory whose contents only the backend reads: `saved`
    // lives from forward to backward (per layer), `scratch` is only used during one call (may be
    // shared across layers).
    void (*attention_sizes)(Backend *be, const AttnShape *s, size_t *saved_floats,
                            size_t *scratch_floats);
    // out [B, T, n_heads*v_dim] contiguous.
    void (*attention_forward)(Backend *be, const AttnShape *s, const Act *q, const Act *k,
                              const Act *v, Act *out, float *saved, float *scratch);
    // Given dout [B, T, n_heads*v_dim]: writes (overwrites) dq, dk, dv with the layouts (row
    // strides) of q, k, v (dq: see q_scale), gradients summed over the query heads sharing a K/V
    // head; writes dkey_bias [B, T, n_heads] when non-NULL; accumulates dout_scale, dout_shift
    // [n, v_dim] when non-NULL.
    void (*attention_backward)(Backend *be, const AttnShape *s, const Act *q, const Act *k,
                               const Act *v, const float *saved, const Act *dout,
                               Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                               float *dout_scale, float *dout_shift, float *scratch);
    // Optional (NULL: never): nonzero when attention_forward/backward honour s->q_scale for a
    // shape like s (q_scale itself not yet set).
    int (*attention_q_scale)(Backend *be, const AttnShape *s);
    // Optional (NULL: yes): nonzero when the core that runs s (a key bias set) is the one that
    // would run it without the key bias.  0: a faster core serves the shape only without it (the
    // cuDNN core), so a variant that can express its key bias another way should (mhe_add: the
    // per-head queries q + e^Q).
    int (*attention_key_bias)(Backend *be, const AttnShape *s);

    // ---- optimizer side ----
    // sum_i x[i]^2 accumulated in double; returned to the host (synchronises).
    double (*sum_squares)(Backend *be, const float *x, size_t n);
    // AdamW (decoupled decay) in PyTorch's form, element by element through kernels/optim_math.h
    // (the host optimizer uses the same functions), with g = grad_scale * grad:
    //   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g²;
    //   p = p * decay - step_size * m / (sqrt(v) / bc2_sqrt + eps)
    // The caller precomputes decay = 1 - lr wd, step_size = lr / bc1 and bc2_sqrt = sqrt(bc2)
    // (optim_math.h's optim_bias and adamw_scalars), bc1 = 1 - b1^t, bc2 = 1 - b2^t.
    void (*adamw_update)(Backend *be, float *p, const float *grad, float *m, float *v, size_t n,
                         float b1, float b2, float eps, float step_size, float decay, float bc2_sqrt,
                         float grad_scale);
    // Optional (NULL: one adamw_update per range): adamw_update over `count` ranges at once (one
    // launch for a whole model).  Range r is p/grad[start[r] .. start[r] + len[r]) with its
    // moments at m/v[start[r] - m_base ..]; it uses `decay` when decays[r] != 0, else 1 (a
    // tensor without weight decay).  start, len, decays are host arrays; ranges are disjoint.
    void (*adamw_update_ranges)(Backend *be, float *p, const float *grad, float *m, float *v,
                                size_t m_base, int count, const size_t *start, const size_t *len,
                                const unsigned char *decays, float b1, float b2, float eps,
                                float step_size, float decay, float bc2_sqrt, float grad_scale);
    // LAMB direction, same moment updates as adamw_update, then (optim_math.h's lamb_direction_of)
    //   u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p   (p unchanged)
    // The caller computes the trust ratio ‖p‖/‖u‖ with sum_squares and applies axpy(-lr*ratio, u, p).
    void (*lamb_direction)(Backend *be, const float *p, const float *grad, float *m, float *v,
                           float *u, size_t n, float b1, float b2, float eps, float wd, float bc1,
                           float bc2, float grad_scale);
    // Optional (NULL: lamb_direction and two sum_squares per range): lamb_direction over `count`
    // ranges at once (ranges as adamw_update_ranges; u beside the moments, u[start[r] - m_base ..];
    // weight decay wds[r]), and into the host array sq: sq[r] = Σ p², sq[count + r] = Σ u² over
    // range r, in double (synchronises once).
    void (*lamb_direction_ranges)(Backend *be, const float *p, const float *grad, float *m, float *v,
                                  float *u, size_t m_base, int count, const size_t *start,
                                  const size_t *len, const float *wds, float b1, float b2, float eps,
                                  float bc1, float bc2, float grad_scale, double *sq);
    // Optional (NULL: one axpy per range): p[start[r] + k] += coef[r] * u[start[r] - m_base + k]
    // for every range r (LAMB's trust-ratio step in one launch).  Host arrays.
    void (*axpy_ranges)(Backend *be, float *p, const float *u, size_t m_base, int count,
                        const size_t *start, const size_t *len, const float *coef);
};

// p + i elements of an activation buffer of be (NULL stays NULL).
static inline Act *act_at(const Backend *be, Act *p, size_t i) {
    return p ? (Act *)((char *)p + i * dtype_size(be->act)) : NULL;
}
static inline const Act *act_cat(const Backend *be, const Act *p, size_t i) {
    return p ? (const Act *)((const char *)p + i * dtype_size(be->act)) : NULL;
}

// The CPU backend (C + OpenMP, matmuls through oneDNN).  threads <= 0: the OpenMP default.
Backend *backend_cpu_create(int threads);
// The same; bf16 != 0 (runtime.precision: bf16) stores activations in bf16 (Backend.act =
// DT_BF16) and runs every product (the attention core's too) on bf16 operands with fp32
// accumulation; weights, moments, LayerNorm and softmax statistics and the loss stay fp32.
// Without native bf16 instructions it says so once.
Backend *backend_cpu_create_for(int threads, int bf16);
// The CPU backend's element code is compiled for several x86-64 levels and one is chosen per
// backend (kernels/cpu/cpu_isa.h): "avx512" (x86-64-v4), "avx2" (x86-64-v3, with FMA) or
// "baseline" (x86-64-v2); the highest this CPU supports unless the environment's MHE_CPU_ISA
// names a lower one.  backend_cpu_isa: the level a CPU backend runs.
const char *backend_cpu_isa(const Backend *be);
// 1 when this CPU and build can run the named level, 0 otherwise (unknown names too).
int backend_cpu_isa_supported(const char *name);
// 1 when the CPU backend's products run on native bf16 instructions (AVX-512 bf16 or AMX, as
// oneDNN sees them: ONEDNN_MAX_CPU_ISA lowers it), 0 when bf16 is emulated.
int backend_cpu_native_bf16(const Backend *be);
// The matmul library and the instruction set it runs, e.g. "oneDNN 2.6.3 avx512_core_bf16", into
// buf: what a measured matmul rate depends on besides the CPU and the thread count.
void backend_cpu_library(char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
