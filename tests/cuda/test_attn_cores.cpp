// The attention-core registry's choice (kernels/cuda/cuda_attn_core.h) for every variant's layer
// shape and feature, on the emulated backend: what the cuDNN core's support table refuses (and in
// which words), which core `auto` takes and why it passed the faster ones over, what a named core
// that cannot run or serve does, and the q_scale question the model asks.  The emulation runs no
// cuDNN, so `auto` falls back to flash with that reason; in the cost model's record-only runs the
// cuDNN core is chosen (priced, not run).
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <csetjmp>
#include <cstring>

#include <sys/wait.h>
#include <unistd.h>

extern "C" {
#include "kernels/backend_info.h"
#include "tests/cuda/attn_variants.h"
}
#include "kernels/cuda/cuda_attn_core.h"
#include "kernels/cuda/cuda_backend.h"

// Last: cmocka's macros (fail, ...) would rename the standard library's members.
extern "C" {
#include <cmocka.h>
}

struct Backends {
    Backend *bf16, *fp32;
};

static int setup(void **state) {
    *state = new Backends{backend_cuda_create(0, 1), backend_cuda_create(0, 0)};
    return 0;
}
static int teardown(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    b->bf16->destroy(b->bf16);
    b->fp32->destroy(b->fp32);
    delete b;
    return 0;
}

static bool has(const char *s, const char *part) { return s && std::strstr(s, part); }
#define EXPECT(cond, ...)                       \
    do {                                        \
        if (!(cond)) fail_msg(__VA_ARGS__);     \
    } while (0)

static const AttnCore *core_named(const char *name) {
    int n = 0;
    const AttnCore *const *cores = attn_cores(&n);
    for (int i = 0; i < n; i++)
        if (std::strcmp(cores[i]->name, name) == 0) return cores[i];
    return nullptr;
}

// cuDNN serves every variant without a key bias in bf16 (shared/scaled queries and unequal K/V
// heads as per-head copies) with or without padding and dropout, refuses those with one (mhe_add
// fast, collab: its dBias is not a sum over the queries) by name, and refuses fp32; auto under the emulation takes
// flash where its tensor-core kernels serve the head dims (gemm_bf16 defers, saying so) and
// gemm_bf16 elsewhere (mla's d_qk 96), and says why not cuDNN; a named cudnn is refused with the
// reason, a named gemm_bf16 serves the key-bias variants.
static void test_every_variant(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    char why[1024];
    for (int i = 0; i < N_ATTN_VARIANTS; i++)
        for (int padding = 0; padding < 2; padding++)
            for (int dropout = 0; dropout < 2; dropout++) {
                const AttnVariant &v = ATTN_VARIANTS[i];
                const AttnShape s = attn_variant_shape(&v, 2, 64, padding, 1, dropout ? 0.1f : 0.0f);
                const char *r = attn_core_cudnn.refuses(b->bf16, &s);
                if (v.bias) {
                    EXPECT(has(r, "a key bias"), "%s: cudnn served a key bias (%s)", v.name, r ? r : "no reason");
                    // d 64: flash's tensor-core kernels keep it under auto; named, gemm_bf16 serves it
                    const AttnCore *c = attn_core_choose(b->bf16, &s, "auto", why, sizeof why);
                    EXPECT(c && std::strcmp(c->name, "flash") == 0, "%s: auto chose %s", v.name, c ? c->name : "none");
                    EXPECT(has(why, "gemm_bf16: the flash kernels run these head dims on tensor cores"),
                           "%s: reason '%s'", v.name, why);
                    c = attn_core_choose(b->bf16, &s, "gemm_bf16", why, sizeof why);
                    EXPECT(c && std::strcmp(c->name, "gemm_bf16") == 0, "%s: named gemm_bf16: %s", v.name, why);
                    continue;
                }
                EXPECT(r == nullptr, "%s: cudnn refused: %s", v.name, r);
                EXPECT(has(attn_core_cudnn.refuses(b->fp32, &s), "fp32 activations"), "%s: cudnn took fp32", v.name);
                const bool big = v.dqk + v.dv > 128;
                const AttnCore *c = attn_core_choose(b->bf16, &s, "auto", why, sizeof why);
                EXPECT(c && std::strcmp(c->name, big ? "gemm_bf16" : "flash") == 0, "%s: auto chose %s", v.name,
                       c ? c->name : "none");
                EXPECT(big || has(why, v.q_scale ? "gemm_bf16: q_scale" : "gemm_bf16: the flash kernels run these head "
                                                                           "dims on tensor cores"),
                       "%s: reason '%s'", v.name, why);
                EXPECT(has(why, "cudnn: the CPU emulation of CUDA runs no cuDNN"), "%s: reason '%s'", v.name, why);
                EXPECT(attn_core_choose(b->bf16, &s, "cudnn", why, sizeof why) == nullptr, "%s: named cudnn ran",
                       v.name);
                EXPECT(has(why, "runs no cuDNN"), "%s: named cudnn reason '%s'", v.name, why);
            }
}

// Features the cuDNN core does not serve, each named; flash's q_scale needs its tensor-core
// kernels (bf16); auto's order.
static void test_refusals_named(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    const AttnVariant &mha = ATTN_VARIANTS[0];
    AttnShape s = attn_variant_shape(&mha, 2, 64, 1, 0, 0.1f);
    EXPECT(has(attn_core_cudnn.refuses(b->bf16, &s), "not trailing padding"), "arbitrary mask served");
    s = attn_variant_shape(&mha, 2, 64, 1, 1, 0.1f);
    s.qk_dim = s.v_dim = 36;
    EXPECT(has(attn_core_cudnn.refuses(b->bf16, &s), "head dims 36/36"), "head dim 36 served");
    s.qk_dim = s.v_dim = 256;
    EXPECT(has(attn_core_cudnn.refuses(b->bf16, &s), "up to 128"), "head dim 256 served");
    s = attn_variant_shape(&mha, 2, 64, 1, 1, 0.1f);
    s.ldq = 2300;
    EXPECT(has(attn_core_cudnn.refuses(b->bf16, &s), "row strides"), "unaligned rows served");
    const AttnVariant *mul = nullptr;
    for (int i = 0; i < N_ATTN_VARIANTS; i++)
        if (ATTN_VARIANTS[i].q_scale) mul = &ATTN_VARIANTS[i];
    assert_non_null(mul);
    const AttnShape m = attn_variant_shape(mul, 2, 64, 1, 1, 0.1f);
    const AttnCore *flash = core_named("flash");
    assert_non_null(flash);
    EXPECT(flash->refuses(b->bf16, &m) == nullptr, "flash refused mhe_mul's q_scale in bf16");
    EXPECT(has(flash->refuses(b->fp32, &m), "q_scale"), "flash took q_scale in fp32");
    int n = 0;
    const AttnCore *const *cores = attn_cores(&n);
    assert_int_equal(n, 5);
    assert_string_equal(cores[0]->name, "cudnn");
    assert_string_equal(cores[1]->name, "gemm_bf16");
    assert_string_equal(cores[2]->name, "flash");
    assert_string_equal(cores[3]->name, "gemm");
    assert_string_equal(cores[4]->name, "plain");
    const AttnCore *gb = core_named("gemm_bf16");
    EXPECT(has(gb->refuses(b->fp32, &s), "fp32 activations"), "gemm_bf16 took fp32");
    EXPECT(has(gb->refuses(b->bf16, &m), "q_scale"), "gemm_bf16 took q_scale");
    s = attn_variant_shape(&mha, 1, 8192, 0, 0, 0.0f);  // 12.25 B x 12 heads x 8192² = 9.2 GiB per sequence
    EXPECT(has(gb->refuses(b->bf16, &s), "9408.0 MiB at T 8192) past its 1024.0 MiB budget"), "gemm_bf16 took T 8192");
}

// collab at BERT-base's D̃ = 384 (configs/bert-base-collab.yaml): query/key heads of 384 with a
// content bias.  cuDNN refuses the head dims (and the bias), flash's tiles do not fit them, so
// auto takes gemm_bf16 in bf16 without deferring; in fp32 an own fp32 core, saying why not it.
static void test_collab_bert_base_takes_gemm_bf16(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    static const float one = 1.0f;
    AttnShape s;
    std::memset(&s, 0, sizeof s);
    s.B = 16, s.T = 512, s.n_heads = 12, s.q_heads = 12, s.k_heads = 1, s.v_heads = 12;
    s.qk_dim = 384, s.v_dim = 64, s.ldq = 12 * 384, s.ldk = 384 + 384 + 768, s.ldv = s.ldk;
    s.scale = 0.125f, s.dropout = 0.1f, s.key_bias = (const Act *)&one;
    char why[1024];
    const AttnCore *c = attn_core_choose(b->bf16, &s, "auto", why, sizeof why);
    EXPECT(c && std::strcmp(c->name, "gemm_bf16") == 0, "collab bf16: auto chose %s (%s)", c ? c->name : "none", why);
    EXPECT(!has(why, "gemm_bf16"), "collab bf16: gemm_bf16 deferred: %s", why);
    c = attn_core_choose(b->fp32, &s, "auto", why, sizeof why);
    EXPECT(c && std::strcmp(c->name, "gemm_bf16") != 0, "collab fp32: auto chose %s", c ? c->name : "none");
    EXPECT(has(why, "gemm_bf16: fp32 activations"), "collab fp32 reason '%s'", why);
}

// The model's q_scale question: the shared form where the chosen core scales Q itself.
static void test_q_scale_question(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    for (int i = 0; i < N_ATTN_VARIANTS; i++)
        if (ATTN_VARIANTS[i].q_scale) {
            AttnShape t = attn_variant_shape(&ATTN_VARIANTS[i], 2, 64, 1, 1, 0.1f);
            t.q_scale = nullptr;
            assert_int_equal(b->bf16->attention_q_scale(b->bf16, &t), 1);
            assert_int_equal(b->fp32->attention_q_scale(b->fp32, &t), 0);
        }
}

// The model's key-bias question (ops.h attention_key_bias): 1 where the core for mhe_add's fast
// shape is the core without its key bias (the emulation: flash either way), 0 where a faster core
// takes the shape only without it (record-only runs price cuDNN, which refuses a key bias).
static void test_key_bias_question(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    const AttnVariant *add = nullptr;
    for (int i = 0; i < N_ATTN_VARIANTS; i++)
        if (ATTN_VARIANTS[i].bias && ATTN_VARIANTS[i].qh == 1) add = &ATTN_VARIANTS[i];
    assert_non_null(add);
    const AttnShape s = attn_variant_shape(add, 2, 64, 1, 1, 0.1f);
    assert_non_null(b->bf16->attention_key_bias);
    assert_int_equal(b->bf16->attention_key_bias(b->bf16, &s), 1);
    assert_true(backend_cuda_cost_dry_run(1));
    Backend *be = backend_cuda_create(0, 1);
    assert_int_equal(be->attention_key_bias(be, &s), 0);
    be->destroy(be);
    backend_cuda_cost_dry_run(0);
}

// An attention call whose core needs more saved/scratch room than attention_sizes answered
// ends with a message naming the shape (in a child process: mhe_fatal exits), before any kernel
// writes past the caller's buffers.
static void test_call_beyond_sizes_refused(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        Backend *be = backend_cuda_create(0, 1);
        AttnShape s = attn_variant_shape(&ATTN_VARIANTS[0], 1, 16, 0, 0, 0.0f);
        size_t sv = 0, sc = 0;
        be->attention_sizes(be, &s, &sv, &sc);
        float *saved = static_cast<float *>(be->alloc(be, (sv + 1) * 4));
        float *scratch = static_cast<float *>(be->alloc(be, (sc + 1) * 4));
        s.B = 4, s.T = 64;  // sized for 1 x 16, called with 4 x 64
        const size_t n = (size_t)s.B * s.T * s.ldq;
        Act *x = static_cast<Act *>(be->alloc(be, n * 2)), *out = static_cast<Act *>(be->alloc(be, n * 2));
        be->attention_forward(be, &s, x, x, x, out, saved, scratch);
        _exit(0);  // not reached when the call is refused
    }
    close(fds[1]);
    char buf[4096];
    size_t got = 0;
    for (ssize_t r; got + 1 < sizeof buf && (r = read(fds[0], buf + got, sizeof buf - 1 - got)) > 0;) got += (size_t)r;
    buf[got] = '\0';
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1, "child status %d; stderr '%s'", status, buf);
    EXPECT(has(buf, "but attention_sizes promised at most"), "stderr '%s'", buf);
}

// runtime.attention_core: unknown names and cores that cannot run here, one line each.
static void test_named_cores(void **state) {
    Backends *b = static_cast<Backends *>(*state);
    char why[1024];
    EXPECT(!backend_attention_core_select(b->bf16, "fast", 0, why, sizeof why) && has(why, "`fast` is not a core") &&
               has(why, "auto, cudnn, gemm_bf16, flash, gemm, plain"),
           "unknown core: '%s'", why);
    EXPECT(!backend_attention_core_select(b->bf16, "cudnn", 0, why, sizeof why) && has(why, "cudnn cannot run here"),
           "cudnn under emulation: '%s'", why);
    EXPECT(backend_attention_core_select(b->bf16, "plain", 0, why, sizeof why), "plain refused: %s", why);
    EXPECT(backend_attention_core_select(b->bf16, "auto", 0, why, sizeof why), "auto refused: %s", why);
}

// Record-only (the cost model's predictions): cuDNN is priced, so auto takes it in bf16.
static void test_record_only_prices_cudnn(void **state) {
    (void)state;
    char why[1024];
    assert_true(backend_cuda_cost_dry_run(1));
    Backend *be = backend_cuda_create(0, 1), *be32 = backend_cuda_create(0, 0);
    const AttnShape s = attn_variant_shape(&ATTN_VARIANTS[0], 2, 64, 1, 1, 0.1f);
    const AttnCore *c = attn_core_choose(be, &s, "auto", why, sizeof why);
    EXPECT(c && std::strcmp(c->name, "cudnn") == 0 && !why[0], "record-only bf16 chose %s", c ? c->name : "none");
    c = attn_core_choose(be32, &s, "auto", why, sizeof why);
    EXPECT(c && std::strcmp(c->name, "flash") == 0 && has(why, "cudnn: fp32 activations"), "record-only fp32: %s",
           why);
    be->destroy(be);
    be32->destroy(be32);
    backend_cuda_cost_dry_run(0);
}

int main() {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_variant),
        cmocka_unit_test(test_refusals_named),
        cmocka_unit_test(test_q_scale_question),
        cmocka_unit_test(test_key_bias_question),
        cmocka_unit_test(test_call_beyond_sizes_refused),
        cmocka_unit_test(test_named_cores),
        cmocka_unit_test(test_record_only_prices_cudnn),
        cmocka_unit_test(test_collab_bert_base_takes_gemm_bf16),
    };
    return cmocka_run_group_tests_name("attention-core registry", tests, setup, teardown);
}
