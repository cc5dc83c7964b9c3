// defines: the attention-core dispatcher — the registry's table (auto's order), the choice per
// distinct layer shape (cached, said once), and ops.h's attention entries that hand each call to
// its core.  The cores themselves live in their own files: cuda_attn_cudnn_core.cu (cuDNN),
// cuda_flash.cu (+ _tc, _tc_bwd: flash), cuda_attention.cu (gemm and plain).
#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_attn_core.h"

// What the choice depends on: sizes, layouts and which features are on (not the pointers, nor
// the dropout offset, which changes every step).
struct AttnShapeKey {
    int B, T, n, qh, kh, vh, dqk, dv, ldq, ldk, ldv;
    int causal, mask, trailing, bias, scale, shift, q_scale;
    float softmax_scale, dropout;
};
static AttnShapeKey key_of(const AttnShape *s) {
    AttnShapeKey k;
    std::memset(&k, 0, sizeof k);
    k.B = s->B, k.T = s->T, k.n = s->n_heads, k.qh = s->q_heads, k.kh = s->k_heads, k.vh = s->v_heads;
    k.dqk = s->qk_dim, k.dv = s->v_dim, k.ldq = s->ldq, k.ldk = s->ldk, k.ldv = s->ldv;
    k.causal = s->causal, k.mask = s->key_mask != nullptr, k.trailing = s->key_mask_trailing;
    k.bias = s->key_bias != nullptr, k.scale = s->out_scale != nullptr, k.shift = s->out_shift != nullptr;
    k.q_scale = s->q_scale != nullptr, k.softmax_scale = s->scale, k.dropout = s->dropout;
    return k;
}

constexpr int kShapes = 256;  // distinct shapes remembered (a run has a handful: train, eval, last batch)

struct AttnDispatch {
    char requested[32];  // "auto" or a core's name
    int verbose;
    AttnCoreId own;      // the own core of the call in progress (cuda_attn_own_core)
    // The ops installed before the dispatcher: the own cores in this precision.
    void (*sizes)(Backend *, const AttnShape *, size_t *, size_t *);
    void (*forward)(Backend *, const AttnShape *, const Act *, const Act *, const Act *, Act *, float *, float *);
    void (*backward)(Backend *, const AttnShape *, const Act *, const Act *, const Act *, const float *, const Act *,
                     Act *, Act *, Act *, Act *, float *, float *, float *);
    int n;
    AttnShapeKey keys[kShapes];
    const AttnCore *cores[kShapes];
    // The most that attention_sizes has answered: a call whose core needs more was sized for
    // another shape, and would write past its caller's buffers (checked at every call).
    size_t sized_saved, sized_scratch;
};

static AttnDispatch *dispatch_of(Backend *be) { return cuda_ctx(be)->attn; }

AttnCoreId cuda_attn_own_core(Backend *be) { return dispatch_of(be)->own; }

// ---- the own cores: through the ops installed before the dispatcher ----

static void own_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch, AttnCoreId id) {
    AttnDispatch *d = dispatch_of(be);
    const AttnCoreId was = d->own;
    d->own = id;
    d->sizes(be, s, saved, scratch);
    d->own = was;
}
#define OWN_CORE_CALLS(ID, fn)                                                                                           \
    static void fn##_sizes(Backend *be, const AttnShape *s, size_t *sv, size_t *sc) { own_sizes(be, s, sv, sc, ID); } \
    static void fn##_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,     \
                             float *saved, float *scratch) {                                                         \
        AttnDispatch *d = dispatch_of(be);                                                                           \
        d->own = ID;                                                                                                 \
        d->forward(be, s, q, k, v, out, saved, scratch);                                                             \
    }                                                                                                                \
    static void fn##_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,             \
                              const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkb, float *dsc, \
                              float *dsh, float *scratch) {                                                          \
        AttnDispatch *d = dispatch_of(be);                                                                           \
        d->own = ID;                                                                                                 \
        d->backward(be, s, q, k, v, saved, dout, dq, dk, dv, dkb, dsc, dsh, scratch);                                \
    }
OWN_CORE_CALLS(ATTN_CORE_FLASH, flash)
OWN_CORE_CALLS(ATTN_CORE_GEMM, gemm)
OWN_CORE_CALLS(ATTN_CORE_PLAIN, plain)

static const char *q_scale_off_tc(Backend *be, const AttnShape *s) {
    return s->q_scale && !cuda_flash_tc_supported(be, s)
               ? "q_scale off the tensor-core kernels (they need bf16 and qk_dim = v_dim in 16, 32, 64)"
               : nullptr;
}
static const char *flash_refuses(Backend *be, const AttnShape *s) {
    if (!cuda_flash_supported(s)) return "head dims past the flash tiles' shared memory (qk_dim + v_dim too large)";
    return q_scale_off_tc(be, s);
}
static const char *no_q_scale(Backend *, const AttnShape *s) {
    return s->q_scale ? "q_scale (the per-head query scale; the caller materialises the queries)" : nullptr;
}
static const char *always_available(Backend *) { return nullptr; }
static const char *nothing_to_prepare(Backend *, const AttnShape *) { return nullptr; }

static const AttnCore attn_core_flash = {
    ATTN_CORE_FLASH, "flash",
    "own fused (flash) kernels: tensor cores in bf16 at head dims 16/32/64, CUDA cores elsewhere; every feature",
    true, true, "flash_* kernels (measured efficiency, CALIBRATION.md)",
    flash_refuses, always_available, nothing_to_prepare, flash_sizes, flash_forward, flash_backward, nullptr};
static const AttnCore attn_core_gemm = {
    ATTN_CORE_GEMM, "gemm",
    "cuBLAS batched GEMMs + softmax/dS row kernels, T x T probabilities in memory (plain kernels where shared "
    "heads form no blocks)",
    true, false, "cuBLAS GEMMs + row kernels", no_q_scale, always_available, nothing_to_prepare, gemm_sizes,
    gemm_forward, gemm_backward, nullptr};
static const AttnCore attn_core_plain = {
    ATTN_CORE_PLAIN, "plain", "one thread per output element, T x T probabilities in memory: the reference", true,
    false, "plain kernels", no_q_scale, always_available, nothing_to_prepare, plain_sizes, plain_forward,
    plain_backward, nullptr};

const AttnCore *const *attn_cores(int *count) {
    static const AttnCore *const table[] = {&attn_core_cudnn, &attn_core_gemm_bf16, &attn_core_flash, &attn_core_gemm,
                                            &attn_core_plain};
    *count = (int)(sizeof table / sizeof *table);
    return table;
}

void attn_shape_describe(const AttnShape *s, char *out, size_t len) {
    int w = std::snprintf(out, len, "B %d T %d, %d heads (q/k/v %d/%d/%d), d %d/%d", s->B, s->T, s->n_heads,
                          s->q_heads, s->k_heads, s->v_heads, s->qk_dim, s->v_dim);
    auto add = [&](bool on, const char *what) {
        if (on && w >= 0 && (size_t)w < len) w += std::snprintf(out + w, len - w, ", %s", what);
    };
    add(s->causal, "causal");
    add(s->key_mask && s->key_mask_trailing, "key padding");
    add(s->key_mask && !s->key_mask_trailing, "key mask");
    add(s->key_bias != nullptr, "key bias");
    add(s->q_scale != nullptr, "q_scale");
    add(s->out_scale != nullptr, "out_scale");
    add(s->out_shift != nullptr, "out_shift");
    add(s->dropout > 0.0f, "dropout");
}

static void append(char *why, size_t len, const char *name, const char *reason) {
    if (!why || !len) return;
    const size_t w = std::strlen(why);
    if (w < len) std::snprintf(why + w, len - w, "%s%s: %s", w ? "; " : "", name, reason);
}

// The first reason core c cannot run s here (a feature, then this process, then s's setup).
static const char *cannot_run(Backend *be, const AttnCore *c, const AttnShape *s, bool prepare) {
    if (const char *r = c->refuses(be, s)) return r;
    if (const char *r = c->unavailable(be)) return r;
    return prepare ? c->prepare(be, s) : nullptr;
}

static const AttnCore *choose(Backend *be, const AttnShape *s, const char *requested, bool prepare, char *why,
                              size_t len) {
    if (why && len) why[0] = '\0';
    int n = 0;
    const AttnCore *const *cores = attn_cores(&n);
    const bool any = !requested || !*requested || std::strcmp(requested, "auto") == 0;
    for (int i = 0; i < n; i++) {
        if (!any && std::strcmp(requested, cores[i]->name) != 0) continue;
        const char *r = cannot_run(be, cores[i], s, prepare);
        if (!r && any && cores[i]->defers) r = cores[i]->defers(be, s);
        if (!r) return cores[i];
        append(why, len, cores[i]->name, r);
        if (!any) return nullptr;
    }
    return nullptr;  // unreachable under auto: plain serves every shape the others refuse
}

const AttnCore *attn_core_choose(Backend *be, const AttnShape *s, const char *requested, char *why, size_t len) {
    return choose(be, s, requested, false, why, len);
}

const AttnCore *cuda_attn_core_for(Backend *be, const AttnShape *s) {
    AttnDispatch *d = dispatch_of(be);
    const AttnShapeKey k = key_of(s);
    for (int i = 0; i < d->n; i++)
        if (std::memcmp(&d->keys[i], &k, sizeof k) == 0) return d->cores[i];
    char why[1024], shape[256];
    const AttnCore *c = choose(be, s, d->requested, true, why, sizeof why);
    attn_shape_describe(s, shape, sizeof shape);
    if (!c) mhe_fail("runtime.attention_core: %s cannot serve attention of %s: %s", d->requested, shape, why);
    if (d->verbose) {
        if (why[0]) std::fprintf(stderr, "attention core: %s -> %s (passed over: %s)\n", shape, c->name, why);
        else std::fprintf(stderr, "attention core: %s -> %s\n", shape, c->name);
    }
    if (d->n < kShapes) {
        d->keys[d->n] = k;
        d->cores[d->n++] = c;
    }
    return c;
}

// ---- ops.h's attention entries ----

// The model sizes its buffers once, for its largest batch and without the per-call features
// (masks, dropout); a call may then take the core the sizes' shape took or, under auto, fall
// back to the first own core serving it: room for both.
static void dispatch_sizes(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch) {
    AttnDispatch *d = dispatch_of(be);
    const AttnCore *c = choose(be, s, d->requested, false, nullptr, 0);
    if (!c) {
        char why[512], shape[256];
        choose(be, s, d->requested, false, why, sizeof why);
        attn_shape_describe(s, shape, sizeof shape);
        mhe_fail("runtime.attention_core: %s cannot serve attention of %s: %s", d->requested, shape, why);
    }
    c->sizes(be, s, saved, scratch);
    if (c->id == ATTN_CORE_CUDNN) {
        // Room for every core auto may fall back to (a deferring core's choice can change with
        // the call's features), up to the first that serves s without deferring.
        int n = 0;
        const AttnCore *const *cores = attn_cores(&n);
        for (int i = 0; i < n; i++) {
            if (cores[i]->id == ATTN_CORE_CUDNN || cores[i]->refuses(be, s)) continue;
            size_t sv = 0, sc = 0;
            cores[i]->sizes(be, s, &sv, &sc);
            if (sv > *saved) *saved = sv;
            if (sc > *scratch) *scratch = sc;
            if (!cores[i]->defers || !cores[i]->defers(be, s)) break;
        }
    }
    if (*saved > d->sized_saved) d->sized_saved = *saved;
    if (*scratch > d->sized_scratch) d->sized_scratch = *scratch;
}

// The core for s, once it is known to fit the buffers attention_sizes promised.
static const AttnCore *core_within_sizes(Backend *be, const AttnShape *s) {
    AttnDispatch *d = dispatch_of(be);
    const AttnCore *c = cuda_attn_core_for(be, s);
    size_t sv = 0, sc = 0;
    c->sizes(be, s, &sv, &sc);
    if (sv > d->sized_saved || sc > d->sized_scratch) {
        char shape[256];
        attn_shape_describe(s, shape, sizeof shape);
        mhe_fatal("attention core %s: attention of %s needs %zu saved and %zu scratch floats, but attention_sizes "
                  "promised at most %zu and %zu (the caller sized its buffers for another shape)",
                  c->name, shape, sv, sc, d->sized_saved, d->sized_scratch);
    }
    return c;
}

static void dispatch_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                             float *saved, float *scratch) {
    if (!s->B || !s->T || !s->n_heads) return;
    core_within_sizes(be, s)->forward(be, s, q, k, v, out, saved, scratch);
}

static void dispatch_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                              const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                              float *dout_scale, float *dout_shift, float *scratch) {
    if (!s->B || !s->T || !s->n_heads) return;
    core_within_sizes(be, s)->backward(be, s, q, k, v, saved, dout, dq, dk, dv, dkey_bias, dout_scale, dout_shift,
                                        scratch);
}

// Whether the core will apply q_scale for the shared queries of s: asked before q_scale is set.
// The core that would run the materialised per-head queries decides (under auto the fastest);
// only if it applies q_scale itself, and serves the shared form, is the copy avoided.
static int dispatch_q_scale(Backend *be, const AttnShape *s) {
    AttnShape per_head = *s;
    per_head.q_heads = s->n_heads;
    per_head.ldq = s->n_heads * s->qk_dim;
    // chosen, not run: no graph built, no line said, nothing cached for a shape no call has
    const AttnCore *c = choose(be, &per_head, dispatch_of(be)->requested, false, nullptr, 0);
    if (!c || !c->q_scale) return 0;
    static const float marker = 1.0f;  // refuses() only tests q_scale for non-null
    AttnShape shared = *s;
    shared.q_scale = &marker;
    return c->refuses(be, &shared) == nullptr;
}

// Whether the core for s (a key bias set) is the core for s without it: asked before the model
// fixes its plan; chosen, not run.
static int dispatch_key_bias(Backend *be, const AttnShape *s) {
    const char *requested = dispatch_of(be)->requested;
    AttnShape without = *s;
    without.key_bias = nullptr;
    return choose(be, s, requested, false, nullptr, 0) == choose(be, &without, requested, false, nullptr, 0);
}

void cuda_install_attention_dispatch(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    AttnDispatch *d = static_cast<AttnDispatch *>(std::calloc(1, sizeof(AttnDispatch)));
    if (!d) mhe_fatal("out of memory creating the CUDA backend");
    std::snprintf(d->requested, sizeof d->requested, "auto");
    d->own = ATTN_CORE_FLASH;
    d->sizes = be->attention_sizes;
    d->forward = be->attention_forward;
    d->backward = be->attention_backward;
    c->attn = d;
    be->attention_sizes = dispatch_sizes;
    be->attention_forward = dispatch_forward;
    be->attention_backward = dispatch_backward;
    be->attention_q_scale = dispatch_q_scale;
    be->attention_key_bias = dispatch_key_bias;
}

void cuda_attention_dispatch_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    std::free(c->attn);
    c->attn = nullptr;
}

// Selection (kernels/backend_info.h backend_attention_core_select).
int cuda_attention_core_select(Backend *be, const char *name, int verbose, char *err, size_t err_len) {
    AttnDispatch *d = dispatch_of(be);
    const bool any = !name || !*name || std::strcmp(name, "auto") == 0;
    int n = 0;
    const AttnCore *const *cores = attn_cores(&n);
    const AttnCore *named = nullptr;
    for (int i = 0; i < n && !any; i++)
        if (std::strcmp(name, cores[i]->name) == 0) named = cores[i];
    if (!any && !named) {
        int w = std::snprintf(err, err_len, "runtime.attention_core: `%s` is not a core; expected auto", name);
        for (int i = 0; i < n && w >= 0 && (size_t)w < err_len; i++)
            w += std::snprintf(err + w, err_len - w, ", %s", cores[i]->name);
        return 0;
    }
    if (named) {
        if (const char *r = named->unavailable(be)) {
            std::snprintf(err, err_len, "runtime.attention_core: %s cannot run here: %s", named->name, r);
            return 0;
        }
    }
    std::snprintf(d->requested, sizeof d->requested, "%s", any ? "auto" : named->name);
    d->verbose = verbose;
    d->n = 0;  // choices made under the previous selection are forgotten
    return 1;
}
