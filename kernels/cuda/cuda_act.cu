// bf16 activations (be->act == DT_BF16, a bf16 run): every Act buffer holds __nv_bfloat16, with
// fp32 arithmetic inside each op and one rounding when it stores.  The element type of a buffer
// is ops.h's Act, fixed for the backend's life, so nothing tracks which copy is current.
//
// The matmuls read bf16 activations directly (cuBLAS with bf16 A/B, a bf16 C for an Act result
// and an fp32 C for an fp32 one such as dW; the linear layers through cuBLASLt with the bias
// fused, cuda_linear.cu).  An fp32 operand (a weight: the model's are parameters) is read from a
// bf16 copy of the whole backend allocation holding it (cuda_weight_copy.cu).
//
// add and layernorm_forward (the pre-LN residual stream) have bf16 kernels here.  The ops whose
// kernels read and store bf16 (GELU, dropout, the residual step, BERT's embedding block,
// LayerNorm's backwards, the per-head broadcast and its backwards, the cross-entropy, the
// tensor-core attention) run on the bf16 buffers themselves (cuda_internal.h's act_in/act_out
// name the buffer in this mode); tanh, the row gather and scatter
// and the embeddings' two ops have kernels templated on the element type (cuda_activation.cu,
// cuda_rows.cu, cuda_embedding.cu).
// The attention core off the tensor-core path runs the fp32 kernels on widened copies: each Act input is widened into an fp32 staging buffer (a
// compact [rows, cols] for strided ones), the fp32 op runs there, and each Act output is rounded
// back (a strided one only over its own columns, so the slices of one fused buffer stay each
// other's).  An output that is the same buffer as an input shares its staging buffer, which
// keeps the in-place contracts of ops.h.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>

#include "kernels/cuda/cuda_internal.h"

static Backend *f32(Backend *be) { return cuda_ctx(be)->f32; }

// y[r * ldy + c] = T(x[r * ldx + c]) for a [rows, cols] matrix: widening and rounding (round to
// nearest even) between bf16 storage and fp32 staging.
__global__ void act_widen_kernel(const __nv_bfloat16 *__restrict__ x, size_t ldx, float *__restrict__ y, size_t ldy,
                                 size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (size_t)blockDim.x * gridDim.x)
        y[(i / cols) * ldy + i % cols] = __bfloat162float(x[(i / cols) * ldx + i % cols]);
}
__global__ void act_round_kernel(const float *__restrict__ x, size_t ldx, __nv_bfloat16 *__restrict__ y, size_t ldy,
                                 size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols;
         i += (size_t)blockDim.x * gridDim.x)
        y[(i / cols) * ldy + i % cols] = __float2bfloat16(x[(i / cols) * ldx + i % cols]);
}
static void widen(Backend *be, const __nv_bfloat16 *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols) {
    const size_t n = rows * cols;
    if (n) MHE_LAUNCH(act_widen_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, ldx, y, ldy, rows, cols);
    CUDA_CHECK_LAUNCH();
}
static void round_to(Backend *be, const float *x, size_t ldx, __nv_bfloat16 *y, size_t ldy, size_t rows, size_t cols) {
    const size_t n = rows * cols;
    if (n) MHE_LAUNCH(act_round_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, ldx, y, ldy, rows, cols);
    CUDA_CHECK_LAUNCH();
}

// The fp32 staging of one op's Act arguments (see the top of the file).  Slot i uses the
// backend's grow-only buffer i, so steady-state steps allocate nothing.
class Stage {
    struct Slot {
        const void *p;
        size_t rows, cols, ld;
        float *f;
        bool out;
    };
    Backend *be;
    OpClass cls;
    Slot slots[ACT_STAGE_SLOTS];
    int n = 0;

    Slot *find(const void *p, size_t rows, size_t cols, size_t ld) {
        for (int i = 0; i < n; i++)
            if (slots[i].p == p && slots[i].rows == rows && slots[i].cols == cols && slots[i].ld == ld) return &slots[i];
        return nullptr;
    }
    Slot *add(const void *p, size_t rows, size_t cols, size_t ld) {
        if (n == ACT_STAGE_SLOTS) mhe_fatal("cuda_act: more than %d staged activations in one op", ACT_STAGE_SLOTS);
        CudaCtx *c = cuda_ctx(be);
        Slot &s = slots[n];
        s = Slot{p, rows, cols, ld, cuda_grow(be, c->stage[n], c->stage_cap[n], rows * cols > 0 ? rows * cols : 1), false};
        n++;
        return &s;
    }

public:
    Stage(Backend *b, OpClass c) : be(b), cls(c) {}
    // An input [rows, cols] with row stride ld, as a compact fp32 [rows, cols] (NULL stays NULL).
    const Act *in(const Act *p, size_t rows, size_t cols, size_t ld) {
        if (!p) return nullptr;
        Slot *s = find(p, rows, cols, ld);
        if (!s) {
            s = add(p, rows, cols, ld);
            widen(be, ab(p), ld, s->f, cols, rows, cols);
        }
        return fa(s->f);
    }
    const Act *in(const Act *p, size_t count) { return in(p, 1, count, count); }
    // An output, rounded back by done(); `read`: the op reads it first (accumulation, rows left
    // untouched).  The same buffer as an input shares that input's staging.
    Act *out(Act *p, size_t rows, size_t cols, size_t ld, bool read) {
        if (!p) return nullptr;
        Slot *s = find(p, rows, cols, ld);
        if (!s) {
            s = add(p, rows, cols, ld);
            if (read) widen(be, ab(p), ld, s->f, cols, rows, cols);
        }
        s->out = true;
        return fa(s->f);
    }
    Act *out(Act *p, size_t count, bool read) { return out(p, 1, count, count, read); }
    void done() {
        for (int i = 0; i < n; i++)
            if (slots[i].out)
                round_to(be, slots[i].f, slots[i].cols, ab(const_cast<Act *>(static_cast<const Act *>(slots[i].p))),
                         slots[i].ld, slots[i].rows, slots[i].cols);
        mhe_cost_close_op(cls);  // the roundings belong to the op
    }
};

// ---- linear layers: the matmuls (cuda_matmul.cu) and the bias kernels (cuda_bias.cu) ----

static void act_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                               Act *y) {
    double t0 = cuda_prof_begin(be);
    if (cuda_act_linear_forward(be, ab(x), W, b, N, in, out, ab(y))) {
        cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
        return;
    }
    be->matmul(be, 0, 1, N, out, in, 1.0f, mat_act(x, in), mat_f32(W, in), 0.0f, out_act(y, out));
    if (b) be->bias_add(be, y, b, N, out);
}
static void act_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
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
// The FFN's GELU_TANH projections through cuBLASLt's GELU epilogues (cuda_linear.cu): g is GELU
// of the fp32 sum and dx multiplies the fp32 product (one bf16 rounding fewer than the two ops).
static void act_linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N,
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
static void act_linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N,
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

// ---- the host boundary ----

static void act_upload(Backend *be, Act *dst, const float *host_src, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    float *f = cuda_grow(be, c->stage[0], c->stage_cap[0], n ? n : 1);
    be->upload(be, f, host_src, n * sizeof(float));
    round_to(be, f, n, ab(dst), n, 1, n);
}
static void act_download(Backend *be, float *host_dst, const Act *src, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    float *f = cuda_grow(be, c->stage[0], c->stage_cap[0], n ? n : 1);
    widen(be, ab(src), n, f, n, 1, n);
    be->download(be, host_dst, f, n * sizeof(float));
}

// ---- the pre-LN residual stream's ops, on bf16 ----

__global__ void act_add_kernel(const __nv_bfloat16 *a, const __nv_bfloat16 *b, __nv_bfloat16 *out, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
static void act_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) {
    double t0 = cuda_prof_begin(be);
    if (n) MHE_LAUNCH(act_add_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost((double)n, 6.0 * n))(ab(a), ab(b), ab(out), n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// layernorm_forward_kernel (cuda_norm_loss.cu) on a bf16 row: the same two passes in fp32 over the
// widened values, one rounding per stored element; each thread rewrites only what it read, so y
// may alias x.
__global__ void act_layernorm_forward_kernel(const __nv_bfloat16 *x, const float *gamma, const float *beta, int C,
                                             float eps, __nv_bfloat16 *y, float *mean, float *rstd) {
    MHE_SHARED(float, buf, [32]);
    const size_t off = (size_t)blockIdx.x * C;
    float s = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += __bfloat162float(x[off + c]);
    const float mu = block_sum(s, buf) / (float)C;
    float v = 0;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float d = __bfloat162float(x[off + c]) - mu;
        v += d * d;
    }
    const float rs = rsqrtf(block_sum(v, buf) / (float)C + eps);
    for (int c = threadIdx.x; c < C; c += blockDim.x)
        y[off + c] = __float2bfloat16((__bfloat162float(x[off + c]) - mu) * rs * gamma[c] + beta[c]);
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
}
static void act_layernorm_forward(Backend *be, const Act *x, const float *gamma, const float *beta, int N, int C,
                                  float eps, Act *y, float *mean, float *rstd) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote_alloc(be, mean);
    cuda_fp32_wrote_alloc(be, rstd);
    if (N) MHE_LAUNCH(act_layernorm_forward_kernel, N, MHE_BLOCK, 0, cuda_stream(be), mhe_cost(8.0 * N * C, 4.0 * N * C + 8.0 * C + 8.0 * N))(ab(x), gamma, beta, C, eps, ab(y), mean, rstd);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// ---- every other op: the fp32 kernels on staged copies ----

// Q, K, V (and their gradients) staged compact: the fp32 core sees row strides heads * dim.
static AttnShape compact(const AttnShape *s, Stage &st) {
    AttnShape t = *s;
    t.ldq = s->q_heads * s->qk_dim;
    t.ldk = s->k_heads * s->qk_dim;
    t.ldv = s->v_heads * s->v_dim;
    t.key_bias = st.in(s->key_bias, (size_t)s->B * s->T * s->n_heads);
    return t;
}
// The tensor-core flash kernels (head dims 16, 32, 64 on the flash path) read and write bf16
// themselves (cuda_flash_tc.h's tc_act): only the key bias and its gradient, fp32 there, are
// staged.  Other shapes run the fp32 core on compact staged copies.
static AttnShape with_key_bias(const AttnShape *s, Stage &st) {
    AttnShape t = *s;
    t.key_bias = st.in(s->key_bias, (size_t)s->B * s->T * s->n_heads);
    return t;
}
static void act_attention_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                                  float *saved, float *scratch) {
    Stage st(be, OPC_ATTENTION);
    const size_t rows = (size_t)s->B * s->T;
    if (cuda_attention_tc(be, s)) {
        const AttnShape t = with_key_bias(s, st);
        f32(be)->attention_forward(be, &t, q, k, v, out, saved, scratch);
        st.done();
        return;
    }
    const AttnShape t = compact(s, st);
    const Act *qs = st.in(q, rows, t.ldq, s->ldq), *ks = st.in(k, rows, t.ldk, s->ldk), *vs = st.in(v, rows, t.ldv, s->ldv);
    f32(be)->attention_forward(be, &t, qs, ks, vs, st.out(out, rows * s->n_heads * s->v_dim, false), saved, scratch);
    st.done();
}
static void act_attention_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                                   const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                                   float *dout_scale, float *dout_shift, float *scratch) {
    Stage st(be, OPC_ATTENTION);
    const size_t rows = (size_t)s->B * s->T;
    if (cuda_attention_tc(be, s)) {
        const AttnShape t = with_key_bias(s, st);
        f32(be)->attention_backward(be, &t, q, k, v, saved, dout, dq, dk, dv, st.out(dkey_bias, rows * s->n_heads, false),
                                    dout_scale, dout_shift, scratch);
        st.done();
        return;
    }
    const AttnShape t = compact(s, st);
    const Act *qs = st.in(q, rows, t.ldq, s->ldq), *ks = st.in(k, rows, t.ldk, s->ldk), *vs = st.in(v, rows, t.ldv, s->ldv);
    const Act *gs = st.in(dout, rows * s->n_heads * s->v_dim);
    Act *dqs = st.out(dq, rows, t.ldq, s->ldq, false), *dks = st.out(dk, rows, t.ldk, s->ldk, false);
    Act *dvs = st.out(dv, rows, t.ldv, s->ldv, false), *dkbs = st.out(dkey_bias, rows * s->n_heads, false);
    f32(be)->attention_backward(be, &t, qs, ks, vs, saved, gs, dqs, dks, dvs, dkbs, dout_scale, dout_shift, scratch);
    st.done();
}

void cuda_install_act_bf16(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    Backend *inner = static_cast<Backend *>(std::malloc(sizeof(Backend)));
    if (!inner) mhe_fatal("out of memory creating the CUDA backend");
    std::memcpy(inner, be, sizeof *be);
    c->f32 = inner;
    be->act = DT_BF16;
    be->upload_act = act_upload;
    be->download_act = act_download;
    be->linear_forward = act_linear_forward;
    be->linear_backward = act_linear_backward;
    be->linear_gelu_forward = act_linear_gelu_forward;
    be->linear_backward_gelu = act_linear_backward_gelu;
    be->add = act_add;
    be->layernorm_forward = act_layernorm_forward;
    be->attention_forward = act_attention_forward;
    be->attention_backward = act_attention_backward;
}
