// The attention-core registry's choice (kernels/cuda/cuda_attn_core.h) for every variant's layer
// shape and feature, on the emulated backend: what the cuDNN core's support table refuses (and in
// which words), which core `auto` takes and why it passed the faster ones over, what a named core
// that cannot run or serve does, and the q_scale question the model asks.  The emulation runs no
// cuDNN, so `auto` falls back to flash with that reason; in the cost model's record-only runs the
// cuDNN core is chosen (priced, not run).
#include <cstdio>
#include <cstring>

extern "C" {
#include "kernels/backend_info.h"
}
#include "kernels/cuda/cuda_attn_core.h"
#include "kernels/cuda/cuda_backend.h"

static int failures = 0;
#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            std::printf("FAIL %s:%d: ", __FILE__, __LINE__);  \
            std::printf(__VA_ARGS__);                         \
            std::printf("\n");                                \
            failures++;                                       \
        }                                                     \
    } while (0)

struct Variant {
    const char *name;
    int n, qh, kh, vh, dqk, dv, ldq, ldk, ldv, causal, bias, q_scale, scale_shift;
};
static const Variant kVariants[] = {
    {"mha", 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 0, 0, 0, 0},
    {"mha causal", 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 1, 0, 0, 0},
    {"sha", 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 0, 0, 0},
    {"mhe_add fast", 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 1, 0, 1},
    {"mhe_mul fast", 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 0, 1, 1},
    {"mhe_mul materialised", 12, 12, 1, 1, 64, 64, 768, 192, 192, 0, 0, 0, 1},
    {"mqa", 12, 12, 1, 1, 64, 64, 896, 896, 896, 0, 0, 0, 0},
    {"gqa", 12, 12, 6, 6, 64, 64, 1536, 1536, 1536, 0, 0, 0, 0},
    {"el_att", 12, 12, 12, 12, 64, 64, 768, 768, 768, 0, 0, 0, 0},
    {"skv", 12, 12, 12, 12, 64, 64, 1536, 1536, 1536, 0, 0, 0, 0},
    {"collab", 12, 12, 1, 12, 64, 64, 768, 832, 1600, 0, 1, 0, 0},
    {"mla", 12, 12, 12, 12, 96, 64, 1152, 1152, 768, 0, 0, 0, 0},
};

static const float kOne = 1.0f;
static const int32_t kMask = 1;

static AttnShape shape_of(const Variant &v, bool padding, bool trailing, bool dropout) {
    AttnShape s;
    std::memset(&s, 0, sizeof s);
    s.B = 2, s.T = 64, s.n_heads = v.n, s.q_heads = v.qh, s.k_heads = v.kh, s.v_heads = v.vh;
    s.qk_dim = v.dqk, s.v_dim = v.dv, s.ldq = v.ldq, s.ldk = v.ldk, s.ldv = v.ldv, s.scale = 0.125f;
    s.causal = v.causal;
    if (padding) s.key_mask = &kMask, s.key_mask_trailing = trailing;
    if (v.bias) s.key_bias = reinterpret_cast<const Act *>(&kOne);
    if (v.q_scale) s.q_scale = &kOne;
    if (v.scale_shift) s.out_scale = s.out_shift = &kOne;
    s.dropout = dropout ? 0.1f : 0.0f;
    return s;
}

static bool has(const char *s, const char *part) { return s && std::strstr(s, part); }

int main() {
    Backend *bf16 = backend_cuda_create(0, 1), *fp32 = backend_cuda_create(0, 0);
    char why[1024];
    for (const Variant &v : kVariants)
        for (int padding = 0; padding < 2; padding++)
            for (int dropout = 0; dropout < 2; dropout++) {
                const AttnShape s = shape_of(v, padding, true, dropout);
                // cuDNN serves every variant in bf16 (shared/scaled queries and unequal K/V heads as
                // per-head copies), refuses fp32.
                const char *r = attn_core_cudnn.refuses(bf16, &s);
                CHECK(r == nullptr, "%s: cudnn refused %s", v.name, r);
                CHECK(has(attn_core_cudnn.refuses(fp32, &s), "fp32 activations"), "%s: cudnn took fp32", v.name);
                // auto under the emulation: flash (gemm where flash's tiles do not fit: mla's
                // d_qk 96), saying why not the faster ones.
                const bool big = v.dqk + v.dv > 128;
                const AttnCore *c = attn_core_choose(bf16, &s, "auto", why, sizeof why);
                CHECK(c && std::strcmp(c->name, big ? "gemm" : "flash") == 0, "%s: auto chose %s", v.name,
                      c ? c->name : "none");
                CHECK(!big || has(why, "flash: head dims past the flash tiles"), "%s: reason '%s'", v.name, why);
                CHECK(has(why, "cudnn: the CPU emulation of CUDA runs no cuDNN"), "%s: reason '%s'", v.name, why);
                // Named cudnn: refused with the reason.
                CHECK(attn_core_choose(bf16, &s, "cudnn", why, sizeof why) == nullptr, "%s: named cudnn ran", v.name);
                CHECK(has(why, "runs no cuDNN"), "%s: named cudnn reason '%s'", v.name, why);
            }
    // Features the cuDNN core does not serve, each named.
    {
        AttnShape s = shape_of(kVariants[0], true, false, true);
        CHECK(has(attn_core_cudnn.refuses(bf16, &s), "not trailing padding"), "arbitrary mask served");
        s = shape_of(kVariants[0], true, true, true);
        s.qk_dim = s.v_dim = 36;
        CHECK(has(attn_core_cudnn.refuses(bf16, &s), "head dims 36/36"), "head dim 36 served");
        s.qk_dim = s.v_dim = 256;
        CHECK(has(attn_core_cudnn.refuses(bf16, &s), "up to 128"), "head dim 256 served");
        s = shape_of(kVariants[0], true, true, true);
        s.ldq = 2300;
        CHECK(has(attn_core_cudnn.refuses(bf16, &s), "row strides"), "unaligned rows served");
        // flash's q_scale needs its tensor-core kernels: fp32 cannot apply it.
        const AttnShape m = shape_of(kVariants[4], true, true, true);
        const AttnCore *c = nullptr;
        int n = 0;
        const AttnCore *const *cores = attn_cores(&n);
        for (int i = 0; i < n; i++)
            if (std::strcmp(cores[i]->name, "flash") == 0) c = cores[i];
        CHECK(c && c->refuses(bf16, &m) == nullptr, "flash refused mhe_mul's q_scale in bf16");
        CHECK(c && has(c->refuses(fp32, &m), "q_scale"), "flash took q_scale in fp32");
        CHECK(n == 4 && std::strcmp(cores[0]->name, "cudnn") == 0 && std::strcmp(cores[3]->name, "plain") == 0,
              "auto's order");
    }
    // The model's q_scale question: the shared form where the chosen core scales Q itself.
    {
        AttnShape t = shape_of(kVariants[4], true, true, true);
        t.q_scale = nullptr;
        CHECK(bf16->attention_q_scale(bf16, &t) == 1, "bf16 flash should scale Q");
        CHECK(fp32->attention_q_scale(fp32, &t) == 0, "fp32 should materialise Q");
    }
    // runtime.attention_core: unknown names and cores that cannot run here, one line each.
    CHECK(!backend_attention_core_select(bf16, "fast", 0, why, sizeof why) && has(why, "`fast` is not a core") &&
              has(why, "auto, cudnn, flash, gemm, plain"),
          "unknown core: '%s'", why);
    CHECK(!backend_attention_core_select(bf16, "cudnn", 0, why, sizeof why) && has(why, "cudnn cannot run here"),
          "cudnn under emulation: '%s'", why);
    CHECK(backend_attention_core_select(bf16, "plain", 0, why, sizeof why), "plain refused: %s", why);
    bf16->destroy(bf16);
    fp32->destroy(fp32);
    // Record-only (the cost model's predictions): cuDNN is priced, so auto takes it in bf16.
    if (backend_cuda_cost_dry_run(1)) {
        Backend *be = backend_cuda_create(0, 1), *be32 = backend_cuda_create(0, 0);
        const AttnShape s = shape_of(kVariants[0], true, true, true);
        const AttnCore *c = attn_core_choose(be, &s, "auto", why, sizeof why);
        CHECK(c && std::strcmp(c->name, "cudnn") == 0 && !why[0], "record-only bf16 chose %s", c ? c->name : "none");
        c = attn_core_choose(be32, &s, "auto", why, sizeof why);
        CHECK(c && std::strcmp(c->name, "flash") == 0 && has(why, "cudnn: fp32 activations"), "record-only fp32: %s",
              why);
        be->destroy(be);
        be32->destroy(be32);
        backend_cuda_cost_dry_run(0);
    } else {
        CHECK(false, "no record-only mode in the emulated backend");
    }
    std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
    return failures != 0;
}
