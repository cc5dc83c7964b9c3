// Parity of the attention core (attention_forward / attention_backward of kernels/ops.h): the
// CUDA backend's three paths (flash, the default, with its tensor-core kernels in bf16 mode;
// gemm; plain) through the CPU emulation of CUDA against the CPU backend, every output compared
// norm-wise (parity.h: tol 1e-5 in fp32 mode, 1e-2 in bf16 mode).
#include "parity.h"

// One attention configuration, forward and backward, every output compared.
typedef struct {
    const char *name;
    int B, T, n, qh, kh, vh, dq, dv, causal, use_mask, use_bias, use_scale, use_shift;
    float dropout;
    int mask_all_of_seq1;  // sequence 1 has no visible key: rows of zeros, output = shift
} AttnCase;

// The cuDNN core's layouts (test_attention_bf16_cudnn): rows of whole heads (16-byte aligned)
// and trailing key padding (the last two keys of each sequence), as the model hands them over.
static int g_cudnn_layout;

static void check_attention(Fix *f, const AttnCase *ac, double tol) {
    AttnShape s = {0};
    s.B = ac->B;
    s.T = ac->T;
    s.n_heads = ac->n;
    s.q_heads = ac->qh;
    s.k_heads = ac->kh;
    s.v_heads = ac->vh;
    s.qk_dim = ac->dq;
    s.v_dim = ac->dv;
    s.ldq = ac->qh * ac->dq + (g_cudnn_layout ? 0 : 2);  // padded rows: strides are honoured
    s.ldk = ac->kh * ac->dq + (g_cudnn_layout ? 0 : 1);
    s.ldv = ac->vh * ac->dv + (g_cudnn_layout ? 0 : 3);
    s.scale = 1.0f / sqrtf((float)ac->dq);
    s.causal = ac->causal;
    s.dropout = ac->dropout;
    s.seed = 4242;
    s.offset = 17;
    const size_t rows = (size_t)ac->B * ac->T;
    int32_t mask[512];
    assert_true((size_t)ac->B * ac->T <= 512);
    for (size_t i = 0; i < rows; i++)
        mask[i] = g_cudnn_layout ? (int)(i % ac->T) < ac->T - 2
                  : ac->mask_all_of_seq1 && (int)(i / ac->T) == 1 ? 0 : (i % ac->T) != 2;
    s.key_mask_trailing = g_cudnn_layout;
    IBuf M = ibuf_new(f, mask, rows);
    Buf q = act_new(f, rows * s.ldq, -2.0f, 2.0f), k = act_new(f, rows * s.ldk, -2.0f, 2.0f),
        v = act_rand(f, rows * s.ldv);
    Buf kb = act_rand(f, rows * ac->n), osc = buf_rand(f, (size_t)ac->n * ac->dv),
        osh = buf_rand(f, (size_t)ac->n * ac->dv);
    Buf out = act_rand(f, rows * ac->n * ac->dv), dout = act_rand(f, rows * ac->n * ac->dv);
    Buf dq = act_rand(f, rows * s.ldq), dk = act_rand(f, rows * s.ldk), dv = act_rand(f, rows * s.ldv);
    Buf dkb = act_rand(f, rows * ac->n), dosc = buf_rand(f, (size_t)ac->n * ac->dv),
        dosh = buf_rand(f, (size_t)ac->n * ac->dv);
    // Sized as the model sizes (attn_plan_shape): the key bias, out_scale and out_shift marked,
    // never read; masks and dropout per call.
    AttnShape z = s;
    z.key_bias = ac->use_bias ? (const Act *)&kb : NULL;
    z.out_scale = ac->use_scale ? (const float *)&osc : NULL;
    z.out_shift = ac->use_shift ? (const float *)&osh : NULL;
    size_t sv[2], sc[2];
    f->cpu->attention_sizes(f->cpu, &z, &sv[0], &sc[0]);
    f->gpu->attention_sizes(f->gpu, &z, &sv[1], &sc[1]);
    float *saved[2] = {f->cpu->alloc(f->cpu, sv[0] * 4), f->gpu->alloc(f->gpu, sv[1] * 4)};
    float *scratch[2] = {f->cpu->alloc(f->cpu, sc[0] * 4), f->gpu->alloc(f->gpu, sc[1] * 4)};
    char what[128];
#define CLOSE(b, label)                                                                  \
    snprintf(what, sizeof what, "attention %s: %s", ac->name, label);                   \
    expect_close(f, &(b), tol, what)
    for (int side_ = 0; side_ < 2; side_++) {
        Backend *be = side_ ? f->gpu : f->cpu;
        AttnShape t = s;
        t.key_mask = ac->use_mask ? D(M) : NULL;
        t.key_bias = ac->use_bias ? DA(kb) : NULL;
        t.out_scale = ac->use_scale ? D(osc) : NULL;
        t.out_shift = ac->use_shift ? D(osh) : NULL;
        be->attention_forward(be, &t, DA(q), DA(k), DA(v), DA(out), saved[side_], scratch[side_]);
        be->attention_backward(be, &t, DA(q), DA(k), DA(v), saved[side_], DA(dout), DA(dq), DA(dk), DA(dv),
                               ac->use_bias ? DA(dkb) : NULL, ac->use_scale ? D(dosc) : NULL,
                               ac->use_shift ? D(dosh) : NULL, scratch[side_]);
    }
    CLOSE(out, "out");
    // Only the head columns are defined in the gradients; padding keeps its initial value on
    // both sides, so whole buffers compare.
    CLOSE(dq, "dq");
    CLOSE(dk, "dk");
    CLOSE(dv, "dv");
    if (ac->use_bias) { CLOSE(dkb, "dkey_bias"); }
    if (ac->use_scale) { CLOSE(dosc, "dout_scale"); }
    if (ac->use_shift) { CLOSE(dosh, "dout_shift"); }
#undef CLOSE
    f->cpu->free(f->cpu, saved[0]);
    f->gpu->free(f->gpu, saved[1]);
    f->cpu->free(f->cpu, scratch[0]);
    f->gpu->free(f->gpu, scratch[1]);
    ibuf_free(f, &M);
    Buf *all[] = {&q, &k, &v, &kb, &osc, &osh, &out, &dout, &dq, &dk, &dv, &dkb, &dosc, &dosh};
    for (int i = 0; i < 14; i++) buf_free(f, all[i]);
}

static const AttnCase ATTN_CASES[] = {
        // name     B  T  n qh kh vh dq dv causal mask bias scale shift dropout all-masked
        {"mha causal dropout", 2, 6, 2, 2, 2, 2, 8, 8, 1, 0, 0, 0, 0, 0.2f, 0},
        {"gqa padding mask", 2, 5, 4, 4, 2, 2, 4, 4, 0, 1, 0, 0, 0, 0.0f, 0},
        {"mqa causal+mask", 1, 7, 3, 3, 1, 1, 6, 6, 1, 1, 0, 0, 0, 0.0f, 0},
        {"mhe_add shared qkv, key bias, shift", 2, 5, 3, 1, 1, 1, 4, 4, 0, 1, 1, 0, 1, 0.1f, 0},
        {"mhe_mul scale+shift", 2, 4, 2, 2, 1, 1, 4, 4, 1, 0, 0, 1, 1, 0.0f, 0},
        {"fully masked sequence", 2, 4, 2, 2, 2, 2, 4, 6, 0, 1, 1, 1, 1, 0.0f, 1},
        {"mqa dropout, scale, shift", 2, 5, 3, 3, 1, 1, 4, 4, 1, 1, 1, 1, 1, 0.3f, 0},
        {"gqa dropout, causal", 2, 5, 6, 6, 3, 3, 4, 4, 1, 1, 0, 0, 0, 0.2f, 0},
        {"q 3 heads, k 6, v 1 of 6", 1, 5, 6, 3, 6, 1, 4, 4, 0, 0, 1, 1, 1, 0.0f, 0},
        {"gqa groups not a block (k 3, v 2 of 6)", 1, 4, 6, 6, 3, 2, 4, 4, 1, 0, 0, 0, 0, 0.0f, 0},
        // Longer than the fused kernels' 32-row tiles and not a multiple of them.
        {"mha T=45 causal dropout mask", 2, 45, 2, 2, 2, 2, 8, 8, 1, 1, 0, 0, 0, 0.1f, 0},
        {"mhe T=70 shared qkv, bias, scale, shift", 1, 70, 3, 1, 1, 1, 6, 5, 0, 1, 1, 1, 1, 0.1f, 0},
        {"gqa T=37 dq != dv, causal", 2, 37, 4, 4, 2, 1, 4, 6, 1, 0, 0, 1, 0, 0.0f, 0},
        // Head dims of the tensor-core kernels (bf16 mode; fp32 mode runs the CUDA-core ones).
        {"mha d=16 T=45 causal dropout mask", 2, 45, 2, 2, 2, 2, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        {"mhe d=32 T=37 shared qkv, bias, scale, shift", 1, 37, 3, 1, 1, 1, 32, 32, 0, 1, 1, 1, 1, 0.1f, 0},
        {"gqa d=16 T=33 k 2 v 1 of 4, masked seq", 2, 33, 4, 4, 2, 1, 16, 16, 0, 1, 1, 0, 1, 0.0f, 1},
        // Past the tensor-core dK/dV kernel's 128-row key tiles (causal: each key tile's queries
        // start at its first key).
        {"mha d=16 T=150 causal dropout, key bias", 1, 150, 2, 2, 2, 2, 16, 16, 1, 0, 1, 0, 0, 0.1f, 0},
        // Past the forward's and dQ's 256-row query tiles too, ending 14 and 4 rows into the
        // next: causal and not, dropout, masks, shared K/V heads (a dK/dV block owning 4 heads).
        {"mha d=16 T=270 causal dropout mask", 1, 270, 2, 2, 2, 2, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        {"gqa d=32 T=260 k 2 v 1 of 4, bias, scale, shift, dropout", 1, 260, 4, 4, 2, 1, 32, 32, 0, 1, 1, 1, 1, 0.1f, 0},
        // A dK/dV grid of 2 tiles x 14 heads x 2 sequences = 56 blocks: 128-row key tiles (grids
        // of at most 54, the cases above, take 64-row ones), the second ending 2 rows in.
        {"mha 14 heads d=16 T=130 causal dropout mask", 2, 130, 14, 14, 14, 14, 16, 16, 1, 1, 0, 0, 0, 0.1f, 0},
        // d = 64: the dK/dV kernel's 64 KB of shared memory (opted in past 48 KB).
        {"mha d=64 T=21 mask", 1, 21, 1, 1, 1, 1, 64, 64, 0, 1, 0, 0, 0, 0.0f, 0},
        // Heads sharing K and V whose tensor-core dK/dV blocks split their group of heads (a grid
        // below 256 blocks; these have 1 to 4 unsplit): each part's blocks write partial dK/dV,
        // the reduction kernel adds them (cuda_flash_tc_bwd.cu).  12 heads on one K/V head (MQA,
        // MHE's shape) past one 64-row key tile and not a multiple of it; with out_scale (mhe_mul);
        // GQA with groups of 4 heads; K and V groups of different sizes (3 and 6 heads: blocks
        // own 6, a part may hold part of a K head's 3).
        {"mqa 12 heads d=32 T=75 causal dropout, key bias, mask", 1, 75, 12, 12, 1, 1, 32, 32, 1, 1, 1, 0, 0, 0.1f, 0},
        {"mhe_mul 12 heads d=32 T=70 dropout, key bias, scale, shift", 1, 70, 12, 12, 1, 1, 32, 32, 0, 1, 1, 1, 1, 0.1f, 0},
        {"gqa 12 heads k 3 v 3 d=16 T=40 causal dropout, key bias", 1, 40, 12, 12, 3, 3, 16, 16, 1, 0, 1, 0, 0, 0.1f, 0},
        {"gqa 12 heads k 4 v 2 d=16 T=66 causal, key bias, shift", 2, 66, 12, 12, 4, 2, 16, 16, 1, 1, 1, 0, 1, 0.0f, 0},
};
#define N_ATTN_CASES (sizeof ATTN_CASES / sizeof ATTN_CASES[0])

// runtime.attention_core on a test's backend.
static void select_core(Backend *be, const char *name) {
    char err[256];
    if (!backend_attention_core_select(be, name, 0, err, sizeof err)) fail_msg("%s", err);
}

static void run_attention_cases(Fix *f, double tol) {
    for (size_t i = 0; i < N_ATTN_CASES; i++) check_attention(f, &ATTN_CASES[i], tol);
}
// The default path: the fused (flash) kernels.
static void test_attention_matches_cpu(void **state) { run_attention_cases(*state, 1e-5); }
// cuBLAS GEMMs + row kernels (gqa with 1 < groups < n uses the plain kernels).
static void test_attention_gemm_path_matches_cpu(void **state) {
    Fix *f = *state;
    Backend *dflt = f->gpu;
    f->gpu = backend_cuda_create(0, 0);
    select_core(f->gpu, "gemm");
    run_attention_cases(f, 1e-5);
    f->gpu->destroy(f->gpu);
    f->gpu = dflt;
}
// The plain kernels, the GEMM path's reference, on every case.
static void test_attention_plain_kernels_match_cpu(void **state) {
    Fix *f = *state;
    Backend *gemm = f->gpu;
    f->gpu = backend_cuda_create(0, 0);
    select_core(f->gpu, "plain");
    run_attention_cases(f, 1e-5);
    f->gpu->destroy(f->gpu);
    f->gpu = gemm;
}
// The flash kernels in bf16 (tensor cores at d 16/32/64, the staged CUDA-core kernels elsewhere;
// auto gives the latter's shapes to gemm_bf16, tested below).
static void test_attention_bf16_within_1e2(void **state) {
    Fix *f = *state;
    select_core(f->gpu, "flash");
    run_attention_cases(f, 1e-2);
    select_core(f->gpu, "auto");
}


// The tensor-core dK/dV kernel with its head groups split other ways than the automatic one
// (which at these sizes is single heads: test_attention_bf16_within_1e2) through
// MHE_CUDA_DKV_HEADS (heads per block): not at all, and unevenly (12 heads as 5 + 5 + 2; the
// group of 6 as 5 + 1, so the second K head, heads 3..5, is summed from two parts).  Each must
// match the CPU backend: a partial dropped or added twice moves dK/dV by a part's share, far
// past 1e-2.  The reduction kernel runs exactly when the group is split.
static void test_attention_bf16_dkv_split(void **state) {
    Fix *f = *state;
    Backend *dflt = f->gpu;
    static const int heads[] = {12, 5};
    const AttnCase *cases[] = {&ATTN_CASES[N_ATTN_CASES - 4], &ATTN_CASES[N_ATTN_CASES - 1]};
    for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
        char value[16];
        snprintf(value, sizeof value, "%d", heads[i]);
        setenv("MHE_CUDA_DKV_HEADS", value, 1);
        f->gpu = backend_cuda_create(0, 1);
        unsetenv("MHE_CUDA_DKV_HEADS");
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            const int group = c ? 6 : 12;
            backend_cuda_cost_start();
            check_attention(f, cases[c], 1e-2);
            CostReport r;
            backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
            long reduced = 0;
            for (int e = 0; e < r.n_top; e++)
                if (strcmp(r.top[e].label, "flash_tc_dkv_reduce_kernel") == 0) reduced = r.top[e].calls;
            print_message("%s, %d heads per dK/dV block: %ld reductions\n", cases[c]->name, heads[i], reduced);
            assert_int_equal(reduced, heads[i] < group ? 1 : 0);
        }
        f->gpu->destroy(f->gpu);
    }
    f->gpu = dflt;
}

// bf16 mode (bf16 activations): Q, K, V, the output and every gradient but the output scale's
// and shift's in bf16 on the CUDA side, the same draws rounded to bf16 on both.  The random
// stream as it was when these tests shared test_cuda_parity.c's fixture, after the bf16 matmul
// test's 1115 draws: the cases keep the inputs their margins were seen with (bf16 "fully masked
// sequence" reaches 1.08e-2 on dkey_bias with the stream's first draws).
static int setup_bf16_attention(void **state) {
    setup_bf16(state);
    Fix *f = *state;
    assert_int_equal(f->gpu->act, DT_BF16);
    for (int i = 0; i < 1115; i++) uniform(f);
    return 0;
}

// The layouts of every variant the cuDNN core serves (tests/cuda/attn_variants.h), small.
static const AttnCase CUDNN_CASES[] = {
        // name     B  T  n qh kh vh dq dv causal mask bias scale shift dropout all-masked
        {"cudnn mha d=64 T=100", 2, 100, 4, 4, 4, 4, 64, 64, 0, 0, 0, 0, 0, 0.0f, 0},
        {"cudnn mha d=64 T=100 causal, padding", 2, 100, 4, 4, 4, 4, 64, 64, 1, 1, 0, 0, 0, 0.0f, 0},
        {"cudnn sha (one shared head) padding", 2, 100, 4, 1, 1, 1, 64, 64, 0, 1, 0, 0, 0, 0.0f, 0},
        {"cudnn mhe_mul materialised: per-head Q, shared K/V, scale, shift", 2, 100, 12, 12, 1, 1, 64, 64, 0, 0, 0,
         1, 1, 0.0f, 0},
        {"cudnn mqa d=32 causal, padding", 2, 100, 12, 12, 1, 1, 32, 32, 1, 1, 0, 0, 0, 0.0f, 0},
        {"cudnn gqa 12/6 padding", 2, 64, 12, 12, 6, 6, 64, 64, 0, 1, 0, 0, 0, 0.0f, 0},
        {"cudnn k 1 head, v 12 (collab without its bias)", 1, 64, 12, 12, 1, 12, 64, 64, 0, 0, 0, 0, 0, 0.0f, 0},
        {"cudnn mla d_qk 96 d_v 64 padding", 2, 64, 4, 4, 4, 4, 96, 64, 0, 1, 0, 0, 0, 0.0f, 0},
        {"cudnn q 3 heads, k 6, v 1 of 6, scale, shift", 1, 40, 6, 3, 6, 1, 16, 16, 0, 0, 0, 1, 1, 0.0f, 0},
        {"cudnn tiny 4/1/1 d=32 T=128 padding, scale", 2, 128, 4, 4, 1, 1, 32, 32, 0, 1, 0, 1, 0, 0.0f, 0},
};

// mhe_mul's per-head query scale through the core (AttnShape.q_scale) at dropout 0
// (parity_attention_q_scale), the shared q a column slice of a fused Q|K|V row.
static void check_q_scale(Fix *f, int B, int T, int n, int d, int causal) {
    const AttnShape s = {.B = B, .T = T, .n_heads = n, .q_heads = 1, .k_heads = 1, .v_heads = 1, .qk_dim = d,
                         .v_dim = d, .ldq = 3 * d, .ldk = d, .ldv = d, .scale = 1.0f / sqrtf((float)d),
                         .causal = causal};
    char label[96];
    snprintf(label, sizeof label, "cudnn q_scale n=%d d=%d T=%d causal=%d", n, d, T, causal);
    parity_attention_q_scale(f, &s, label);
}

// The cuDNN core against the CPU backend at dropout 0 (each backend's dropout stream is its own,
// DESIGN.md §1), on the cases of head dims cuDNN takes (multiples of 8), with the model's layouts.
// Every case runs and reports before the test fails.  Runs where cuDNN can (a GPU:
// tests/gpu/check.sh's gpu_attention); the emulation has none.
static void test_attention_bf16_cudnn(void **state) {
    Fix *f = *state;
    char err[256];
    if (!backend_attention_core_select(f->gpu, "cudnn", 0, err, sizeof err)) {
        // tests/gpu/check.sh sets MHE_REQUIRE_CUDNN where it found libcudnn: there a core that
        // cannot run is a failure, not a skip.
        const char *req = getenv("MHE_REQUIRE_CUDNN");
        if (req && strcmp(req, "1") == 0) fail_msg("cuDNN core required (MHE_REQUIRE_CUDNN=1): %s", err);
        print_message("cuDNN core not run here: %s\n", err);
        return;
    }
    g_cudnn_layout = 1;
    g_parity_soft_failures = 0;
    int run = 0;
    for (size_t i = 0; i < N_ATTN_CASES + sizeof CUDNN_CASES / sizeof *CUDNN_CASES; i++) {
        AttnCase c = i < N_ATTN_CASES ? ATTN_CASES[i] : CUDNN_CASES[i - N_ATTN_CASES];
        // a key bias: refused (cuda_attn_cudnn_core.cu), auto takes flash
        if (c.dq % 8 || c.dv % 8 || c.mask_all_of_seq1 || c.use_bias) continue;
        c.dropout = 0.0f;
        check_attention(f, &c, 1e-2);
        run++;
    }
    for (int causal = 0; causal < 2; causal++) {
        check_q_scale(f, 2, 100, 12, 64, causal);
        run++;
    }
    check_q_scale(f, 2, 64, 4, 32, 0);
    run++;
    const int failures = g_parity_soft_failures;
    g_parity_soft_failures = -1;
    g_cudnn_layout = 0;
    assert_true(backend_attention_core_select(f->gpu, "auto", 0, err, sizeof err));
    print_message("cuDNN core: %d cases against the CPU backend, %d comparisons failed\n", run, failures);
    assert_int_equal(failures, 0);
    assert_true(run >= 16);
}

// The gemm_bf16 core (cuBLAS bf16 products, scores recomputed in the backward) against the CPU
// backend on every case, dropout on: its dropout is the CPU's hash over P's index.  Cases with
// shared heads sum per-head gradients (tmp), the all-masked sequence has rows of -inf
// log-sum-exp, key-bias cases take dkey_bias from the fp32 dS.  chunked: one sequence per chunk
// (MHE_GEMM_BF16_CHUNK), so the B 2 cases run as two chunks.
static void run_gemm_bf16_cases(Fix *f, int chunked) {
    Backend *dflt = f->gpu;
    if (chunked) setenv("MHE_GEMM_BF16_CHUNK", "1", 1);
    f->gpu = backend_cuda_create(0, 1);
    select_core(f->gpu, "gemm_bf16");
    g_parity_soft_failures = 0;
    int run = 0;
    for (size_t i = 0; i < N_ATTN_CASES + sizeof CUDNN_CASES / sizeof *CUDNN_CASES; i++) {
        const AttnCase *c = i < N_ATTN_CASES ? &ATTN_CASES[i] : &CUDNN_CASES[i - N_ATTN_CASES];
        check_attention(f, c, 1e-2);
        run++;
    }
    const int failures = g_parity_soft_failures;
    g_parity_soft_failures = -1;
    unsetenv("MHE_GEMM_BF16_CHUNK");
    f->gpu->destroy(f->gpu);
    f->gpu = dflt;
    print_message("gemm_bf16 core%s: %d cases against the CPU backend, %d comparisons failed\n",
                  chunked ? " in chunks of one sequence" : "", run, failures);
    assert_int_equal(failures, 0);
}
static void test_attention_bf16_gemm_bf16(void **state) { run_gemm_bf16_cases(*state, 0); }
static void test_attention_bf16_gemm_bf16_chunks(void **state) { run_gemm_bf16_cases(*state, 1); }

// Dropout's rate and scale, core by core (each draws its own stream, DESIGN.md §1: the own cores
// the CPU's hash, cuDNN its Philox), read off the output: with Q = K = 0 every visible key has
// P = 1/T, and with V one-hot over the keys (V[j, h, c] = [c = j], v_dim = T) out[i, h, j] is
// dropout(P)[i, j], so out·T·(1 - p) is 1 where the element was kept and 0 where it was dropped.
// B 4 x 4 heads x 64² = 65,536 draws at p 0.1: the dropped fraction's standard deviation is
// 0.0012, and the test allows 6 of them (a miss once in 10⁹ seeds).  The same seed and offset give
// the same mask (resume, replicas); another offset another mask (about 2p(1 - p) = 18% differ).
// cuDNN where it can run (a GPU: check.sh's gpu_attention); the emulation runs the own cores.
static double dropped_fraction(Backend *be, const char *core, uint64_t offset, float *mask_out, int *bad_scale) {
    const int B = 4, n = 4, T = 64;
    const float p = 0.1f;
    select_core(be, core);
    AttnShape s = {.B = B, .T = T, .n_heads = n, .q_heads = n, .k_heads = n, .v_heads = n, .qk_dim = T,
                   .v_dim = T, .ldq = n * T, .ldk = n * T, .ldv = n * T, .scale = 0.125f, .dropout = p,
                   .seed = 2718, .offset = offset};
    const size_t rows = (size_t)B * T, w = (size_t)n * T;
    float *zeros = calloc(rows * w, sizeof(float)), *onehot = calloc(rows * w, sizeof(float));
    float *out = malloc(rows * w * sizeof(float));
    for (size_t r = 0; r < rows; r++)
        for (int h = 0; h < n; h++) onehot[r * w + (size_t)h * T + r % T] = 1.0f;
    const size_t bytes = dtype_size(be->act);
    Act *q = be->alloc(be, rows * w * bytes), *v = be->alloc(be, rows * w * bytes), *o = be->alloc(be, rows * w * bytes);
    be->upload_act(be, q, zeros, rows * w);
    be->upload_act(be, v, onehot, rows * w);
    size_t sv = 0, sc = 0;
    be->attention_sizes(be, &s, &sv, &sc);
    float *saved = be->alloc(be, sv * 4), *scratch = be->alloc(be, sc * 4);
    be->attention_forward(be, &s, q, q, v, o, saved, scratch);
    be->download_act(be, out, o, rows * w);
    size_t dropped = 0;
    for (size_t i = 0; i < rows * w; i++) {
        const float x = out[i] * T * (1.0f - p);
        if (fabsf(x) < 0.02f) dropped++;
        else if (fabsf(x - 1.0f) > 0.02f) (*bad_scale)++;
        mask_out[i] = fabsf(x) < 0.02f ? 0.0f : 1.0f;
    }
    be->free(be, q), be->free(be, v), be->free(be, o), be->free(be, saved), be->free(be, scratch);
    free(zeros), free(onehot), free(out);
    select_core(be, "auto");
    return (double)dropped / (double)(rows * w);
}

static void test_attention_dropout_statistics(void **state) {
    Fix *f = *state;
    const size_t N = 4 * 64 * 4 * 64;
    const double sigma = sqrt(0.1 * 0.9 / (double)N);
    const char *cores[] = {"gemm_bf16", "flash", "cudnn"};
    float *m1 = malloc(N * sizeof(float)), *m2 = malloc(N * sizeof(float)), *m3 = malloc(N * sizeof(float));
    char err[256];
    for (int c = 0; c < 3; c++) {
        if (!backend_attention_core_select(f->gpu, cores[c], 0, err, sizeof err)) {
            const char *req = getenv("MHE_REQUIRE_CUDNN");
            if (c == 2 && req && strcmp(req, "1") == 0) fail_msg("cuDNN core required (MHE_REQUIRE_CUDNN=1): %s", err);
            print_message("%s not run here: %s\n", cores[c], err);
            continue;
        }
        int bad = 0;
        const double r1 = dropped_fraction(f->gpu, cores[c], 17, m1, &bad);
        const double r2 = dropped_fraction(f->gpu, cores[c], 17, m2, &bad);
        const double r3 = dropped_fraction(f->gpu, cores[c], 20, m3, &bad);
        size_t same = 0, differ = 0;
        for (size_t i = 0; i < N; i++) same += m1[i] == m2[i], differ += m1[i] != m3[i];
        print_message("%s: dropped %.4f and %.4f (p 0.1, sigma %.4f), kept values off 1/(1-p) by > 2%%: %d, "
                      "another offset changes %.3f of the mask\n",
                      cores[c], r1, r3, sigma, bad, (double)differ / N);
        assert_true(fabs(r1 - 0.1) < 6 * sigma);
        assert_true(fabs(r3 - 0.1) < 6 * sigma);
        assert_true(r2 == r1 && same == N);
        assert_int_equal(bad, 0);
        assert_true((double)differ / N > 0.12 && (double)differ / N < 0.24);
    }
    free(m1), free(m2), free(m3);
}

int main(void) {
    const struct CMUnitTest fp32[] = {
        cmocka_unit_test(test_attention_matches_cpu),
        cmocka_unit_test(test_attention_gemm_path_matches_cpu),
        cmocka_unit_test(test_attention_plain_kernels_match_cpu),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_attention_bf16_within_1e2),
        cmocka_unit_test(test_attention_bf16_dkv_split),
        cmocka_unit_test(test_attention_bf16_cudnn),
        cmocka_unit_test(test_attention_bf16_gemm_bf16),
        cmocka_unit_test(test_attention_bf16_gemm_bf16_chunks),
        cmocka_unit_test(test_attention_dropout_statistics),
    };
    int failed = cmocka_run_group_tests_name("cuda attention parity fp32", fp32, setup_fp32, teardown);
    failed += cmocka_run_group_tests_name("cuda attention parity bf16 activations", bf16, setup_bf16_attention, teardown);
    return failed ? 1 : 0;
}
