// defines: the cuDNN attention core — its registry entry (attn_core_cudnn: what it serves, from
// cuDNN's documented SDPA limits), AttnShape as cuDNN tensors (attn_cudnn_desc), and the work
// around cuDNN's fused SDPA: key lengths from the mask, the key bias transposed to cuDNN's
// [B, H, 1, T], out_scale / out_shift and their gradients, the workspace.
//
// The graphs themselves are built and run by cuda_attn_cudnn.cpp (the frontend's one
// translation unit), in the real build only: the emulation runs no cuDNN, so there this core is
// unavailable except in the cost model's record-only runs, where it is priced (not run) like
// every library call.
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/rng.h"
#include "kernels/cuda/cuda_attn_core.h"
#include "kernels/cuda/cuda_attn_cudnn.h"
#include "kernels/cuda/cuda_attn_heads.h"

#if !defined(MHE_CUDA_EMU) && defined(MHE_HAVE_CUDNN)
#define CUDNN_CORE_RUNS 1
#else
#define CUDNN_CORE_RUNS 0
#endif

// Which operands the core copies per head before cuDNN sees them.  cuDNN takes one Q head per
// output head and K/V heads dividing them, K and V alike: shared query heads (sha, mhe's shared
// Q) and the per-head query scale (mhe_mul, collab: Q_h = q ⊙ m_h, stored in bf16 as the
// materialised copy would be) become per-head Q; K and V with different head counts (collab's
// one K, n V) become per-head K and V.  The backward sums the copies' gradients back.
struct Expand {
    bool q, k, v;
};
static Expand expand_of(const AttnShape *s) {
    Expand x;
    x.q = s->q_heads != s->n_heads || s->q_scale != nullptr;
    x.k = x.v = s->k_heads != s->v_heads;
    x.k = x.k && s->k_heads != s->n_heads;
    x.v = x.v && s->v_heads != s->n_heads;
    return x;
}

// What cuDNN's SDPA serves (cuDNN 9 "Attention" support matrix: bf16, head dims multiples of 8
// up to 128 for the backward on every architecture from sm_80, K/V heads dividing the query
// heads with d_qk != d_v allowed; padding masks as per-sequence lengths; an additive bias).
static const char *cudnn_refuses(Backend *be, const AttnShape *s) {
    static thread_local char why[160];
    if (!act16(be)) return "fp32 activations (cuDNN's fused SDPA is bf16)";
    if (s->qk_dim % 8 || s->v_dim % 8 || s->qk_dim > 128 || s->v_dim > 128) {
        std::snprintf(why, sizeof why, "head dims %d/%d (cuDNN: multiples of 8 up to 128)", s->qk_dim, s->v_dim);
        return why;
    }
    const Expand x = expand_of(s);
    if ((!x.q && s->ldq % 8) || (!x.k && s->ldk % 8) || (!x.v && s->ldv % 8)) {
        std::snprintf(why, sizeof why, "row strides %d/%d/%d not multiples of 8 (16-byte rows)", s->ldq, s->ldk,
                      s->ldv);
        return why;
    }
    if (s->key_mask && !s->key_mask_trailing) return "a key mask that is not trailing padding";
    // cuDNN's dBias is the gradient of a bias of whole [s_q, s_kv] rows; our key bias is one row
    // broadcast over the queries ([B, H, 1, T]), whose gradient is a sum over them.  On an H200
    // (CALIBRATION.md run 7) the parity case with a key bias got a wrong dQ through that graph.
    if (s->key_bias) return "a key bias (cuDNN's dBias does not sum a bias broadcast over the queries)";
    return nullptr;
}

#if CUDNN_CORE_RUNS
static const char *cudnn_unavailable(Backend *) {
    static char why[512];
    return mhe_cudnn_load(why, sizeof why) ? nullptr : why;
}
#else
static const char *cudnn_unavailable(Backend *) {
    if (mhe_cost_dry_run()) return nullptr;  // priced, not run
#if defined(MHE_CUDA_EMU)
    return "the CPU emulation of CUDA runs no cuDNN";
#else
    return "built without the cuDNN frontend headers (launch/setup.sh installs nvidia-cudnn-frontend)";
#endif
}
#endif

extern "C" void attn_cudnn_desc(const AttnShape *s, int backward, CudnnSdpa *d) {
    std::memset(d, 0, sizeof *d);  // compared as bytes by the graph cache
    const int64_t B = s->B, T = s->T, n = s->n_heads;
    d->B = B, d->T = T, d->hq = n, d->hk = s->k_heads, d->hv = s->v_heads, d->dqk = s->qk_dim, d->dv = s->v_dim;
    // AttnShape's rows are tokens with the heads side by side: [B, T, heads, dim] seen as
    // [B, H, S, D].
    auto bshd = [&](int64_t *st, int64_t ld, int64_t dim) {
        st[0] = T * ld, st[1] = dim, st[2] = ld, st[3] = 1;
    };
    const Expand x = expand_of(s);
    if (x.k) d->hk = n;
    if (x.v) d->hv = n;
    bshd(d->q_stride, x.q ? n * s->qk_dim : s->ldq, s->qk_dim);
    bshd(d->k_stride, x.k ? n * s->qk_dim : s->ldk, s->qk_dim);
    bshd(d->v_stride, x.v ? n * s->v_dim : s->ldv, s->v_dim);
    bshd(d->o_stride, n * s->v_dim, s->v_dim);
    d->bias = s->key_bias != nullptr;
    if (d->bias) d->bias_stride[0] = n * T, d->bias_stride[1] = T, d->bias_stride[2] = T, d->bias_stride[3] = 1;
    d->scale = s->scale;
    d->dropout = s->dropout;
    d->causal = s->causal;
    d->padding = s->key_mask != nullptr;
    d->backward = backward;
}

// The saved buffer (fp32 words, 64-byte aligned as the model's arena hands it out): the row
// log-sum-exp [B, n, T], cuDNN's output O' (bf16, before out_scale / out_shift: the backward's O),
// the key lengths seq_q, seq_kv (int32 [B] each); each part starts on 64 bytes, as cuDNN's
// operands must be 16-byte aligned.
namespace {
size_t stats_words(const AttnShape *s) { return (size_t)s->B * s->n_heads * s->T; }
size_t o_elems(const AttnShape *s) { return (size_t)s->B * s->T * s->n_heads * s->v_dim; }
size_t bias_elems(const AttnShape *s) { return (size_t)s->B * s->n_heads * s->T; }
struct Saved {
    float *stats;
    __nv_bfloat16 *o;
    int32_t *seq_q, *seq_kv;
};
Saved saved_of(const AttnShape *s, const float *saved) {
    float *p = const_cast<float *>(saved);
    Saved v;
    v.stats = p;
    v.o = reinterpret_cast<__nv_bfloat16 *>(p + attn_words_up16(stats_words(s)));
    v.seq_q = reinterpret_cast<int32_t *>(p + attn_words_up16(stats_words(s)) + attn_words_up16((o_elems(s) + 1) / 2));
    v.seq_kv = v.seq_q + s->B;
    return v;
}
// Scratch: G = bf16(dout ⊙ out_scale), the bias and its gradient in cuDNN's [B, n, 1, T], the
// per-head copies of Q, K, V (expand_of) and their gradients before the sums (bf16 each).
struct Scratch {
    __nv_bfloat16 *g, *bias, *dbias, *q, *k, *v, *dq, *dk, *dv;
};
struct ScratchPlan {
    size_t words;
    Scratch at;  // offsets (as pointers from null) of each part
};
ScratchPlan scratch_plan(const AttnShape *s, float *base) {
    const Expand x = expand_of(s);
    const size_t qx = (size_t)s->B * s->T * s->n_heads * s->qk_dim, vx = o_elems(s);
    size_t w = 0;
    auto take = [&](size_t elems) {
        __nv_bfloat16 *p = reinterpret_cast<__nv_bfloat16 *>(base + w);
        w += attn_words_up16((elems + 1) / 2);
        return p;
    };
    ScratchPlan p;
    p.at.g = take(o_elems(s));
    p.at.bias = take(bias_elems(s));
    p.at.dbias = take(bias_elems(s));
    p.at.q = x.q ? take(qx) : nullptr;
    p.at.k = x.k ? take(qx) : nullptr;
    p.at.v = x.v ? take(vx) : nullptr;
    // dQ lands in dq itself when each head has its own query (q_scale: ops.h's per-head dq).
    p.at.dq = x.q && !s->q_scale ? take(qx) : nullptr;
    p.at.dk = x.k ? take(qx) : nullptr;
    p.at.dv = x.v ? take(vx) : nullptr;
    p.words = w;
    return p;
}
Scratch scratch_of(const AttnShape *s, float *scratch) { return scratch_plan(s, scratch).at; }
}  // namespace

static void cudnn_sizes(Backend *, const AttnShape *s, size_t *saved, size_t *scratch) {
    *saved = attn_words_up16(stats_words(s)) + attn_words_up16((o_elems(s) + 1) / 2) + 2 * (size_t)s->B;
    *scratch = scratch_plan(s, nullptr).words;
}

// Philox key of one layer's call: the run's seed and the call's offset (step and layer) mixed,
// so every call draws an independent stream and a resumed run draws the same.
static void philox_of(const AttnShape *s, int64_t *seed, int64_t *offset) {
    *seed = (int64_t)(rng_mix64(s->seed ^ rng_mix64(s->offset)) >> 1);
    *offset = 0;
}

// ---- the kernels around the core ----

// seq_q[b] = T, seq_kv[b] = the real keys of sequence b (trailing padding: their count).
__global__ void cudnn_seq_len_kernel(const int32_t *mask, int T, int32_t *seq_q, int32_t *seq_kv) {
    MHE_SHARED(int, buf, [32]);
    const int b = blockIdx.x;
    int c = 0;
    for (int j = threadIdx.x; j < T; j += blockDim.x) c += mask[(size_t)b * T + j] != 0;
    c = block_sum(c, buf);
    if (threadIdx.x == 0) {
        seq_q[b] = T;
        seq_kv[b] = c;
    }
}

// dst[b, h, j] = src[b, j, h] (to cuDNN's bias layout) or the reverse (its gradient back).
__global__ void cudnn_bias_transpose_kernel(const __nv_bfloat16 *src, int B, int T, int n, int to_bht,
                                            __nv_bfloat16 *dst) {
    const size_t total = (size_t)B * T * n;
    GRID_STRIDE(i, total) {
        // i indexes [B, T, n]
        const size_t h = i % n, j = (i / n) % T, b = i / ((size_t)n * T);
        const size_t bht = (b * n + h) * T + j;
        if (to_bht) dst[bht] = src[i];
        else dst[i] = src[bht];
    }
}

static void launch_bias_transpose(Backend *be, const __nv_bfloat16 *src, const AttnShape *s, int to_bht,
                                  __nv_bfloat16 *dst) {
    const double n = (double)bias_elems(s);
    MHE_LAUNCH(cudnn_bias_transpose_kernel, cuda_grid_for(bias_elems(s)), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 4.0 * n))(src, s->B, s->T, s->n_heads, to_bht, dst);
    CUDA_CHECK_LAUNCH();
}

// Q, K, V as cuDNN reads them: the caller's, or their per-head copies in scratch.
struct Operands {
    const void *q, *k, *v;
};
static Operands operands(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, const Scratch &sc) {
    const Expand x = expand_of(s);
    const size_t rows = (size_t)s->B * s->T;
    Operands o{q, k, v};
    if (x.q) {
        attn_heads_expand(be, ab(q), s->ldq, s->n_heads / s->q_heads, s->q_scale, rows, s->n_heads, s->qk_dim, sc.q);
        o.q = sc.q;
    }
    if (x.k) {
        attn_heads_expand(be, ab(k), s->ldk, s->n_heads / s->k_heads, nullptr, rows, s->n_heads, s->qk_dim, sc.k);
        o.k = sc.k;
    }
    if (x.v) {
        attn_heads_expand(be, ab(v), s->ldv, s->n_heads / s->v_heads, nullptr, rows, s->n_heads, s->v_dim, sc.v);
        o.v = sc.v;
    }
    return o;
}

// ---- the cuDNN calls ----

static double pairs_of(const AttnShape *s) {
    const double full = (double)s->B * s->n_heads * s->T * s->T;
    return s->causal ? full * (s->T + 1) / (2.0 * s->T) : full;
}
// Bytes of Q, K, V (bf16) read once, as a fused kernel reads them.
static double qkv_bytes(const AttnShape *s) {
    return 2.0 * s->B * s->T * ((double)s->q_heads * s->qk_dim + (double)s->k_heads * s->qk_dim + (double)s->v_heads * s->v_dim);
}

// Records the call for the cost model (tensor-core FLOPs of its products, its bytes); false in
// record-only runs, where nothing executes.
static bool record_cudnn(const char *label, double tc_flops, double bytes) {
    MheCost c = mhe_cost(0, bytes);
    c.tc_flops = tc_flops;
    return mhe_cost_record(label, c);
}

#if CUDNN_CORE_RUNS
static const char *cudnn_prepare(Backend *be, const AttnShape *s) {
    static char why[1024];
    CudaCtx *c = cuda_ctx(be);
    size_t need = 0;
    for (int backward = 0; backward < 2; backward++) {
        CudnnSdpa d;
        attn_cudnn_desc(s, backward, &d);
        size_t ws = 0;
        char reason[900];
        if (!mhe_cudnn_prepare(&d, c->device, &ws, reason, sizeof reason)) {
            std::snprintf(why, sizeof why, "cuDNN refused the %s graph: %s", backward ? "backward" : "forward", reason);
            return why;
        }
        if (ws > need) need = ws;
    }
    cuda_grow(be, c->cudnn_ws, c->cudnn_ws_cap, need);  // counted in the memory report
    return nullptr;
}
static void cudnn_run(Backend *be, const CudnnSdpa *d, const CudnnSdpaArgs *a) {
    char why[1024];
    CudnnSdpaArgs args = *a;
    args.workspace = cuda_ctx(be)->cudnn_ws;
    if (!mhe_cudnn_run(d, cuda_ctx(be)->device, cuda_stream(be), &args, why, sizeof why))
        mhe_fatal("cuDNN attention %s: %s", d->backward ? "backward" : "forward", why);
}
#else
static const char *cudnn_prepare(Backend *, const AttnShape *) { return nullptr; }
static void cudnn_run(Backend *, const CudnnSdpa *d, const CudnnSdpaArgs *) {
    mhe_fatal("cuDNN attention %s called where cuDNN cannot run (only record-only runs may choose it here)",
              d->backward ? "backward" : "forward");
}
#endif

static void cudnn_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                          float *saved, float *scratch) {
    const double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    const Saved sv = saved_of(s, saved);
    __nv_bfloat16 *bias = scratch_of(s, scratch).bias;
    if (s->key_mask) {
        MHE_LAUNCH(cudnn_seq_len_kernel, s->B, MHE_BLOCK, 0, st, mhe_cost((double)s->B * s->T, 4.0 * s->B * s->T))(s->key_mask, s->T, sv.seq_q, sv.seq_kv);
        CUDA_CHECK_LAUNCH();
    }
    if (s->key_bias) launch_bias_transpose(be, ab(s->key_bias), s, 1, bias);
    const double rows = (double)s->B * s->T, hd = (double)s->n_heads * s->v_dim;
    if (record_cudnn("cudnn_sdpa_fwd", 2.0 * pairs_of(s) * (s->qk_dim + s->v_dim),
                     qkv_bytes(s) + 2.0 * rows * hd + 4.0 * (double)stats_words(s) + (s->key_bias ? 2.0 * bias_elems(s) : 0))) {
        CudnnSdpa d;
        attn_cudnn_desc(s, 0, &d);
        CudnnSdpaArgs a;
        std::memset(&a, 0, sizeof a);
        const Operands op = operands(be, s, q, k, v, scratch_of(s, scratch));
        a.q = op.q, a.k = op.k, a.v = op.v, a.out = sv.o, a.stats = sv.stats, a.bias = bias;
        a.seq_q = sv.seq_q, a.seq_kv = sv.seq_kv;
        philox_of(s, &a.seed, &a.offset);
        cudnn_run(be, &d, &a);
    }
    // out = O' ⊙ out_scale + out_shift; O' stays in saved for the backward.
    if (s->out_scale || s->out_shift) {
        attn_heads_affine(be, sv.o, s->out_scale, s->out_shift, (size_t)rows, (int)hd, ab(out),
                      mhe_cost(2.0 * rows * hd, 4.0 * rows * hd + 8.0 * hd));
    } else {
        cuda_memcpy_d2d(be, out, sv.o, 2 * o_elems(s));
    }
    cuda_prof_end(be, OPC_ATTENTION, t0, 2.0 * pairs_of(s) * (s->qk_dim + s->v_dim));
}

static void cudnn_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                           const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                           float *dout_scale, float *dout_shift, float *scratch) {
    const double t0 = cuda_prof_begin(be);
    const Saved sv = saved_of(s, saved);
    const double rows = (double)s->B * s->T, hd = (double)s->n_heads * s->v_dim;
    const Scratch sc = scratch_of(s, scratch);
    __nv_bfloat16 *g = sc.g, *bias = sc.bias;
    const __nv_bfloat16 *G = ab(dout);
    if (s->out_scale) {  // G = dout ⊙ out_scale: the gradient of O'
        attn_heads_affine(be, ab(dout), s->out_scale, nullptr, (size_t)rows, (int)hd, g,
                      mhe_cost(rows * hd, 4.0 * rows * hd + 4.0 * hd));
        G = g;
    }
    if (dout_scale || dout_shift)
        attn_heads_scale_shift_grads(be, ab(dout), sv.o, (int)rows, (int)hd, dout_scale, dout_shift);
    // The bias and its gradient in cuDNN's layout; dbias goes back to dkey_bias's [B, T, n].
    __nv_bfloat16 *dbias = nullptr;
    if (s->key_bias) {
        launch_bias_transpose(be, ab(s->key_bias), s, 1, bias);
        dbias = sc.dbias;  // the backward graph of a biased shape always writes it
    }
    const double bwd_flops = 2.0 * pairs_of(s) * (3.0 * s->qk_dim + 2.0 * s->v_dim);
    const double bytes = 2.0 * qkv_bytes(s) + 4.0 * rows * hd + 4.0 * (double)stats_words(s) +
                         (s->key_bias ? 4.0 * bias_elems(s) : 0);
    if (record_cudnn("cudnn_sdpa_bwd", bwd_flops, bytes)) {
        CudnnSdpa d;
        attn_cudnn_desc(s, 1, &d);
        CudnnSdpaArgs a;
        std::memset(&a, 0, sizeof a);
        const Operands op = operands(be, s, q, k, v, sc);
        const Expand x = expand_of(s);
        a.q = op.q, a.k = op.k, a.v = op.v, a.o = sv.o, a.dout = G, a.stats = sv.stats;
        a.dq = sc.dq ? (void *)sc.dq : (void *)dq, a.dk = x.k ? (void *)sc.dk : (void *)dk;
        a.dv = x.v ? (void *)sc.dv : (void *)dv;
        a.bias = bias, a.dbias = dbias;
        a.seq_q = sv.seq_q, a.seq_kv = sv.seq_kv;
        philox_of(s, &a.seed, &a.offset);
        cudnn_run(be, &d, &a);
    }
    // The gradients of shared heads: the per-head copies' gradients summed (q_scale's dq is
    // per head, ops.h: the caller applies the chain rule).
    if (sc.dq) attn_heads_sum(be, sc.dq, (size_t)rows, s->n_heads, s->qk_dim, s->n_heads / s->q_heads, s->ldq, ab(dq));
    if (sc.dk) attn_heads_sum(be, sc.dk, (size_t)rows, s->n_heads, s->qk_dim, s->n_heads / s->k_heads, s->ldk, ab(dk));
    if (sc.dv) attn_heads_sum(be, sc.dv, (size_t)rows, s->n_heads, s->v_dim, s->n_heads / s->v_heads, s->ldv, ab(dv));
    if (dbias && dkey_bias) launch_bias_transpose(be, dbias, s, 0, ab(dkey_bias));
    cuda_prof_end(be, OPC_ATTENTION, t0, bwd_flops);
}

const AttnCore attn_core_cudnn = {
    ATTN_CORE_CUDNN, "cudnn",
    "cuDNN's fused SDPA (flash) through the cuDNN frontend's graphs: bf16, head dims multiples of 8 up to 128, "
    "K/V head sharing, shared or scaled queries as per-head copies, key padding, dropout (Philox), "
    "deterministic backward",
    false, true, "cudnn_sdpa_fwd / _bwd (measured on an H200, CALIBRATION.md run 4)", cudnn_refuses,
    cudnn_unavailable, cudnn_prepare, cudnn_sizes, cudnn_forward, cudnn_backward, nullptr};
