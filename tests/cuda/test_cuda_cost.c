// The cost model (kernels/cuda/README.md "Cost model"), through the emulated backend:
// - bytes and FLOPs of single calls against hand calculations (the figures below are worked
//   out in the comments, not taken from the code under test);
// - the prediction max(FLOPs/peak, bytes/bandwidth) + launch on the published A100 figures;
// - one recorded training step of small BERT and GPT models (mha and mhe_mul): the GEMM FLOPs
//   equal model_step_flops exactly (plus mhe_mul's recomputed attention output, plus the forward
//   train.recompute reruns), every call has an op class, the peak covers the arenas and falls
//   with recompute at least by the arena bytes it sheds.
// Record-only mode throughout: nothing runs, allocations are inaccessible address space, so a
// kernel that touched memory would fault.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "kernels/backend_info.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/ops.h"
#include "trainer/model/model.h"

static const CostEntry *find(const CostReport *r, const char *label) {
    for (int i = 0; i < r->n_top; i++)
        if (strcmp(r->top[i].label, label) == 0) return &r->top[i];
    fail_msg("no record labelled '%s'", label);
    return NULL;
}

static void test_single_calls(void **state) {
    (void)state;
    assert_int_equal(backend_cuda_cost_dry_run(1), 1);
    const GpuSpec *a100 = gpu_spec_find("A100");
    assert_non_null(a100);
    assert_null(gpu_spec_find("v100"));
    // fp32 mode: every buffer fp32 (bf16 activations: test_single_calls_bf16_activations).
    Backend *be = backend_cuda_create(0, 0);
    float *x = be->alloc(be, 4 << 20), *y = be->alloc(be, 4 << 20), *z = be->alloc(be, 4 << 20);
    int32_t *labels = be->alloc(be, 64);
    CostReport r;

    // LayerNorm of [6, 10]: reads x (60 floats) + gamma, beta (20), writes y (60) + mean,
    // rstd (12): 152 floats = 608 bytes.
    backend_cuda_cost_start();
    be->layernorm_forward(be, (const Act *)(x), y, y + 100, 6, 10, 1e-5f, (Act *)(z), z + 100, z + 200);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    const CostEntry *e = find(&r, "layernorm_forward_kernel");
    assert_int_equal(e->op_class, OPC_NORM_ACT);
    assert_true(e->bytes == 608.0);
    // The fused residual step on the same shape: reads x and r, writes s and y (4 x 60 floats),
    // gamma, beta (20) and mean, rstd (12): 272 floats = 1088 bytes, one launch for what was
    // three (dropout, add, LayerNorm).
    backend_cuda_cost_start();
    be->residual_layernorm_forward(be, (const Act *)(x), (const Act *)(x + 100), 0.1f, 1, 2, y, y + 100, 6, 10, 1e-5f, (Act *)(x + 100), (Act *)(z), z + 100, z + 200);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    e = find(&r, "residual_layernorm_kernel<RlnFp32>");
    assert_int_equal(e->op_class, OPC_NORM_ACT);
    assert_true(e->bytes == 1088.0);

    // fp32 matmul 8x16x32: reads 768 floats, writes 128: 3584 B, 2*8*16*32 = 8192 CUDA-core FLOPs.
    backend_cuda_cost_start();
    be->matmul(be, 0, 0, 8, 16, 32, 1.0f, mat_f32(x, 32), mat_f32(y, 16), 0.0f, out_f32(z, 16));
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    e = find(&r, "gemm 8x16x32 fp32");
    assert_int_equal(e->op_class, OPC_MATMUL);
    assert_true(e->bytes == 3584.0 && e->flops == 8192.0 && e->tc_flops == 0.0);

    // A linear layer with the bias fused (cuBLASLt BIAS epilogue): y [8, 16] = x [8, 32] Wᵀ + b
    // with W = the [16, 32] at y: one call, the matmul's 3584 B plus the 16 biases (64 B), no
    // bias_add pass.
    backend_cuda_cost_start();
    be->linear_forward(be, (const Act *)(x), y, z + 600, 8, 32, 16, (Act *)(z));
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    e = find(&r, "gemm 8x16x32 fp32 +bias");
    assert_true(e->bytes == 3648.0 && e->flops == 8192.0);
    // Its backward without dx: dW [16, 32] += dyᵀ x with the bias gradient summed by the BGRADB
    // epilogue: reads 128 + 256 floats (1536 B), reads and writes dW (2 x 2048 B) and stores the
    // 16 sums (64 B): 5696 B; a kernel adds the sums into db (2 x 16 read, 16 written: 192 B).
    backend_cuda_cost_start();
    be->linear_backward(be, (const Act *)(z), (const Act *)(x), y, 8, 32, 16, NULL, 0, z + 4000, z + 5000, 0);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 2);
    e = find(&r, "gemm 16x32x8 fp32 +bgrad");
    assert_true(e->bytes == 5696.0 && e->flops == 8192.0);
    assert_true(find(&r, "bias_grad_accumulate_kernel")->bytes == 192.0);
    // The same under the dW_zero promise (a step's first write): dW is stored, not read: 3648 B.
    be->zero(be, z + 4000, 512 * sizeof(float));
    be->zero(be, z + 5000, 16 * sizeof(float));
    backend_cuda_cost_start();
    be->linear_backward(be, (const Act *)(z), (const Act *)(x), y, 8, 32, 16, NULL, 0, z + 4000, z + 5000, 1);
    backend_cuda_cost_stop(a100, &r);
    assert_true(find(&r, "gemm 16x32x8 fp32 +bgrad")->bytes == 3648.0);

    // Softmax cross-entropy forward of [3, 50]: the logits once (600 B) + labels, loss, lse
    // (36 B) = 636 B.
    backend_cuda_cost_start();
    be->cross_entropy_forward(be, (const Act *)(x), labels, 3, 50, 50, y, z);
    backend_cuda_cost_stop(a100, &r);
    assert_true(find(&r, "cross_entropy_forward_kernel<float>")->bytes == 636.0);

    // LayerNorm backward of [6, 10] in one pass (6 rows: 6 blocks of one row): reads dy, x (120
    // floats), writes dx (60), reads mean, rstd (12) and gamma (10), writes the
    // partials of dγ and dβ per block and column (2 x 6 x 10): 322 floats = 1288 B; 13 FLOPs per
    // element (dx 10, dy·x̂ 2, dy 1).  6 blocks use 6 of the A100's 108 SMs: 18 x 1288 B /
    // 2.039 TB/s + 4 us.  Stage 2 reads the 120 partials, reads and writes dγ, dβ (2 x 20): 640 B.
    // With accumulate and dβ alone: dx also read (+60), one set of partials (-60), 11 FLOPs per
    // element; stage 2 reads 60 partials, dβ twice: 320 B.  In fp32 mode stage 2 runs at once
    // (cuda_colsum2_finish; a bf16 backend defers it to one table launch counting the same bytes).
    for (int variant = 0; variant < 2; variant++) {
        backend_cuda_cost_start();
        be->layernorm_backward(be, (const Act *)(x), (const Act *)(y), y + 100, z + 100, z + 200, 6, 10, (Act *)(z + 3000), variant, variant ? NULL : z + 300,
                               z + 400);
        be->synchronize(be);
        backend_cuda_cost_stop(a100, &r);
        assert_int_equal(r.launches, 2);
        e = find(&r, "layernorm_backward_kernel<LnbFp32>");
        assert_int_equal(e->op_class, OPC_NORM_ACT);
        assert_true(e->bytes == 1288.0 && e->flops == (variant ? 660.0 : 780.0));
        assert_true(fabs(e->seconds - (18 * 1288.0 / 2.039e12 + 4e-6)) < 1e-15);
        e = find(&r, "colsum2_finish_kernel");
        assert_int_equal(e->op_class, OPC_NORM_ACT);
        assert_true(e->bytes == (variant ? 320.0 : 640.0));
    }

    // AdamW on 1e6 floats: p, m, v read and written, g read = 28 MB; memory-bound on an A100:
    // 28e6 / 2.039e12 s = 13.732 us, plus the 4 us launch = 17.732 us.
    float *big = be->alloc(be, 4000000);
    backend_cuda_cost_start();
    be->adamw_update(be, big, big, big, big, 1000000, 0.9f, 0.999f, 1e-8f, 1e-2f, 0.99999f, 0.0316f, 1.0f);
    backend_cuda_cost_stop(a100, &r);
    e = find(&r, "adam_kernel");
    assert_true(e->bytes == 28e6);
    assert_true(fabs(r.seconds - 17.732e-6) < 0.001e-6);
    assert_int_equal(r.class_calls[OPC_OTHER], 1);
    // Its bytes are the step's, all in its class.
    assert_true(r.class_bytes[OPC_OTHER] == 28e6 && r.bytes == 28e6 && r.class_bytes[OPC_MATMUL] == 0);

    // The multi-tensor form over two ranges of that buffer (600,000 floats with weight decay,
    // 300,000 without, a gap between): one launch moving 28 B per element plus the 2 x 32 B
    // range table = 25,200,064 B; the first call also uploads the table (64 B over PCIe).
    const size_t starts[2] = {0, 700000}, lens[2] = {600000, 300000};
    const unsigned char decays[2] = {1, 0};
    for (int call = 0; call < 2; call++) {
        backend_cuda_cost_start();
        be->adamw_update_ranges(be, big, big, big, big, 0, 2, starts, lens, decays, 0.9f, 0.999f, 1e-8f, 0.0316f,
                                0.99999f, 1.0f, 1.0f);
        backend_cuda_cost_stop(a100, &r);
        assert_int_equal(r.launches, call ? 1 : 2);
        assert_true(find(&r, "adam_ranges_kernel")->bytes == 25200064.0);
        if (!call) assert_true(find(&r, "memcpy h2d")->bytes == 64.0);
    }

    // A compute-bound prediction: 312e12 tensor-core FLOPs take 1 s on an A100, 989e12 on an H100.
    assert_true(fabs(backend_cuda_cost_predict(a100, 312e12, 0, 1e9, 0) - (1.0 + 4e-6)) < 1e-12);
    assert_true(fabs(backend_cuda_cost_predict(gpu_spec_find("h100"), 0, 67e12, 0, 0) - (1.0 + 4e-6)) < 1e-12);

    // Peak device memory: at least the four 4 MiB buffers, 64 B and the 4 MB one.
    assert_true(r.peak_bytes >= 3.0 * (4 << 20) + 64 + 4e6);
    be->free(be, big);
    be->free(be, x);
    be->free(be, y);
    be->free(be, z);
    be->free(be, labels);
    be->destroy(be);
}

// One forward + backward of a small model, recorded: the GEMM FLOPs are model_step_flops.
// gemm_path: attention through cuBLAS (runtime.attention_core gemm), so every product of the model
// is a GEMM; else the default fused attention, whose T x T products are kernel FLOPs.
// Returns the step's recorded peak device memory; the model's arena bytes in *arena.
static double check_step(Arch arch, AttentionType type, int bf16, int gemm_path, RecomputeMode mode,
                         size_t *arena) {
    Config cfg;
    config_defaults(&cfg);
    cfg.model.arch = arch;
    cfg.model.layers = 2;
    cfg.model.hidden = 64;
    cfg.model.heads = 4;
    cfg.model.ffn = 128;
    cfg.model.vocab_size = 97;
    cfg.model.max_seq = 40;
    cfg.attention.type = type;
    cfg.data.seq_len = 0;
    cfg.train.recompute = mode;
    config_resolve(&cfg, "test_cuda_cost");
    const int B = 3, T = 37;
    Backend *be = backend_cuda_create(0, bf16);
    char err[256];
    // The own cores: what this test counts (the record-only run could take cuDNN's, priced apart).
    if (!backend_attention_core_select(be, gemm_path ? "gemm" : "flash", 0, err, sizeof err)) fail_msg("%s", err);
    Model *m = model_create(&cfg, be, B, T);
    model_init_params(m, 1);
    int32_t ids[3 * 37], labels[3 * 37];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7) % 97;
        labels[i] = i % 5 == 0 ? (i * 3) % 97 : -100;
    }
    CostReport r;
    backend_cuda_cost_start();
    model_zero_grad(m);
    model_forward(m, ids, NULL, NULL, labels, B, T, 1);
    model_backward(m, 0);
    backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    // mhe_mul scales the attention output per head (out_scale): its gradient needs
    // O = dropout(P) V again, one [T, T] x [T, d] product per head per layer (2 B n T^2 d FLOPs)
    // that model_step_flops does not count.
    const double recompute = gemm_path && type == ATTN_MHE_MUL ? cfg.model.layers * 2.0 * B * cfg.model.heads * T * T * cfg.model.head_dim : 0;
    // The attention products (forward 2 B n T^2 (d_qk + d_v) per layer, backward twice that).
    const double attention = cfg.model.layers * 3.0 * 2.0 * B * cfg.model.heads * T * T * 2.0 * cfg.model.head_dim;
    // train.recompute reruns the forward of every layer but the last before its backward
    // (worked out here from the shapes, not from model_recompute_flops): `attention` the Q/K/V
    // projections and the core, `layer` also the output projection and the FFN — post-LN both
    // of its matmuls (its LayerNorm needs the down projection's output), pre-LN the up
    // projection only.  On the flash path the core's products are kernel FLOPs, not GEMMs.
    const double N = (double)B * T, D = cfg.model.hidden, F = cfg.model.ffn, n = cfg.model.heads;
    const double d = cfg.model.head_dim, again = cfg.model.layers - 1;
    const double proj = 2 * N * D * (type == ATTN_MHA ? 3 * n * d : 3 * d);
    const double core = 2.0 * B * n * T * T * 2 * d;
    const double post = arch == ARCH_BERT;
    double rerun = 0;
    if (mode != RECOMPUTE_NONE) rerun = again * (proj + (gemm_path ? core : 0));
    if (mode == RECOMPUTE_LAYER) rerun += again * (2 * N * n * d * D + (post ? 4 : 2) * N * D * F);
    // bf16 runs the vocabulary head's forward and dx products over its padded width (ops_head_ld):
    // 2 N D (ld - V) more each, on zeros (the head runs on every row: full logits).
    assert_true(model_full_logits(m));
    const double V = cfg.model.vocab_size, pad = bf16 ? 2 * 2 * N * D * (ops_head_ld(DT_BF16, (int)V) - V) : 0;
    const double want = model_step_flops(m, B, T) + recompute + rerun + pad - (gemm_path ? 0.0 : attention);
    printf("  %s %s %s %s recompute %d: gemm flops %.6e expected %.6e, %ld launches, predicted %.1f us, "
           "peak %.0f bytes\n",
           arch == ARCH_BERT ? "bert" : "gpt", type == ATTN_MHA ? "mha" : "mhe_mul", bf16 ? "bf16" : "fp32",
           gemm_path ? "gemm" : "flash", (int)mode, r.gemm_flops, want, r.launches, 1e6 * r.seconds,
           r.peak_bytes);
    // The model's own count of the rerun forward agrees (it adds the flash core too).
    const double model_rerun = model_recompute_flops(m, B, T);
    assert_true(fabs(model_rerun - (rerun + (gemm_path || mode == RECOMPUTE_NONE ? 0 : again * core))) <=
                1e-12 * (model_rerun + 1));
    assert_true(fabs(r.gemm_flops - want) <= 1e-12 * want);
    // The fused kernels recompute P in the backward: at least the model's attention FLOPs.
    assert_true(r.tc_flops + r.flops >= want + (gemm_path ? 0.0 : attention));
    long calls = 0;
    double sum = 0, bytes = 0;
    for (int c = 0; c < OPC_COUNT; c++) {
        calls += r.class_calls[c];
        sum += r.class_seconds[c];
        bytes += r.class_bytes[c];
    }
    assert_int_equal(calls, r.launches);
    assert_true(fabs(bytes - r.bytes) <= 1e-12 * r.bytes && r.class_bytes[OPC_MATMUL] > 0 &&
                r.class_bytes[OPC_NORM_ACT] > 0);
    // One stream: the calls back to back, plus the GPU's idle time after each host
    // synchronisation (a 4 us relaunch each on the bound's timeline).
    assert_true(fabs(sum + r.sync_seconds - r.seconds) <= 1e-9 * r.seconds);
    assert_true(fabs(r.sync_seconds - r.syncs * gpu_spec_find("h100")->launch_s) <= 1e-12);
    assert_true(r.class_calls[OPC_ATTENTION] > 0 && r.class_calls[OPC_MATMUL] > 0 && r.class_calls[OPC_LOSS] > 0);
    assert_true(r.peak_bytes >= (double)(model_arena_bytes(m) + model_state_bytes(m)));
    *arena = model_arena_bytes(m);
    model_free(m);
    be->destroy(be);
    config_free(&cfg);
    return r.peak_bytes;
}

// The step's FLOPs for each mode; the peak device memory falls at least by what the arena
// sheds.
static void check_modes(Arch arch, AttentionType type, int bf16, int gemm_path) {
    size_t arena[3];
    double peak[3];
    for (int mode = 0; mode < 3; mode++) peak[mode] = check_step(arch, type, bf16, gemm_path, (RecomputeMode)mode, &arena[mode]);
    for (int mode = 1; mode < 3; mode++) {
        assert_true(arena[mode] < arena[mode - 1]);
        assert_true(peak[0] - peak[mode] >= (double)(arena[0] - arena[mode]));
    }
}

static long calls_labelled(const CostReport *r, const char *label) {
    long n = 0;
    for (int i = 0; i < r->n_top; i++)
        if (strcmp(r->top[i].label, label) == 0) n += r->top[i].calls;
    return n;
}

// Single calls on bf16 activations (a bf16 run's default): an activation moves 2 B per element,
// a weight is read from its allocation's bf16 copy (rounded at its first use, kept current by
// the optimizer), and a linear layer's bias gradient waits with the column sums' stage 2.
static void test_single_calls_bf16_activations(void **state) {
    (void)state;
    assert_int_equal(backend_cuda_cost_dry_run(1), 1);
    const GpuSpec *a100 = gpu_spec_find("A100");
    Backend *be = backend_cuda_create(0, 1);
    // The own flash core's kernels are counted below; cuDNN's SDPA is one priced call
    // (test_attn_cores).
    {
        char err[256];
        if (!backend_attention_core_select(be, "flash", 0, err, sizeof err)) fail_msg("%s", err);
    }
    assert_int_equal(be->act, DT_BF16);
    Act *x = be->alloc(be, 1 << 16), *y = be->alloc(be, 1 << 16), *dy = be->alloc(be, 1 << 16);
    // Parameters (W [16, 32] at w, b at w + 512, gamma at w + 600, beta at w + 700), their
    // gradients, AdamW's moments, LayerNorm's statistics: fp32, 1024 floats each.
    float *w = be->alloc(be, 4096), *g = be->alloc(be, 4096), *mv = be->alloc(be, 4096), *st = be->alloc(be, 4096);
    int32_t *rows = be->alloc(be, 64);
    CostReport r;

    // LayerNorm of [6, 10]: reads x (60 bf16 = 120 B), gamma, beta (80 B), writes y (120 B) and
    // mean, rstd (48 B): 368 B (fp32 rows: 608 B, test_single_calls).
    backend_cuda_cost_start();
    be->layernorm_forward(be, x, w + 600, w + 700, 6, 10, 1e-5f, y, st, st + 32);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    assert_true(find(&r, "act_layernorm_forward_kernel")->bytes == 368.0);

    // tanh of 60 elements: 60 bf16 read and written, 240 B, 10 FLOPs each.  The row gather of 4
    // rows of 10: 40 bf16 read and written (160 B) and the 4 row indices (16 B).
    backend_cuda_cost_start();
    be->tanh_forward(be, x, y, 60);
    be->gather_rows(be, x, rows, 4, 10, y, 6);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 2);
    const CostEntry *e = find(&r, "tanh_forward_kernel<__nv_bfloat16>");
    assert_true(e->bytes == 240.0 && e->flops == 600.0);
    assert_true(find(&r, "gather_rows_kernel<__nv_bfloat16>")->bytes == 176.0);

    // matmul x [8, 32] · W [32, 16] -> act [8, 16]: the first use rounds W's whole allocation
    // (1024 floats, 4 B read + 2 B written: 6144 B); the GEMM reads 768 bf16 (1536 B) and writes
    // 128 bf16 (256 B): 1792 B, 8192 tensor-core FLOPs.  Again: the copy is current, the GEMM alone.
    for (int call = 0; call < 2; call++) {
        backend_cuda_cost_start();
        be->matmul(be, 0, 0, 8, 16, 32, 1.0f, mat_act(x, 32), mat_f32(w, 16), 0.0f, out_act(y, 16));
        backend_cuda_cost_stop(a100, &r);
        assert_int_equal(r.launches, call ? 1 : 2);
        e = find(&r, "gemm 8x16x32 bf16->bf16");
        assert_true(e->bytes == 1792.0 && e->tc_flops == 8192.0);
        if (!call) assert_true(find(&r, "to_bf16_kernel")->bytes == 6144.0);
    }
    // AdamW over W stores bf16(p) into the current copy as it updates p: 28 B per element + 2:
    // 15360 B for 512; the matmul after it rounds nothing.
    backend_cuda_cost_start();
    be->adamw_update(be, w, g, mv, mv + 512, 512, 0.9f, 0.999f, 1e-8f, 1e-2f, 0.99999f, 0.0316f, 1.0f);
    be->matmul(be, 0, 0, 8, 16, 32, 1.0f, mat_act(x, 32), mat_f32(w, 16), 0.0f, out_act(y, 16));
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 2);
    assert_true(find(&r, "adam_kernel")->bytes == 15360.0);

    // The linear layer with the bias fused: reads 768 bf16 (1536 B) and 16 bf16 biases from the
    // copy (32 B), writes 128 bf16 (256 B): 1824 B, one launch.
    backend_cuda_cost_start();
    be->linear_forward(be, x, w, w + 512, 8, 32, 16, y);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    assert_true(find(&r, "gemm 8x16x32 bf16->bf16 +bias")->bytes == 1824.0);
    // Its backward without dx: dW [16, 32] += dyᵀ x reads 128 + 256 bf16 (768 B), reads and
    // writes dW (2 x 2048 B), and BGRADB stores the 16 sums (64 B): 4928 B.  Their add into db
    // waits (no bias_grad_accumulate_kernel): the synchronize's table launch reads the 16 sums
    // and reads and writes db: 192 B.
    backend_cuda_cost_start();
    be->linear_backward(be, dy, x, w, 8, 32, 16, NULL, 0, g, g + 512, 0);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    assert_true(find(&r, "gemm 16x32x8 bf16 +bgrad")->bytes == 4928.0);
    backend_cuda_cost_start();
    be->synchronize(be);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    assert_true(find(&r, "colsum2_finish_table_kernel")->bytes == 192.0);
    assert_int_equal(calls_labelled(&r, "bias_grad_accumulate_kernel"), 0);
    // Under the dW_zero promise dW is stored, not read: 4928 - 2048 = 2880 B.
    be->zero(be, g, 528 * sizeof(float));
    backend_cuda_cost_start();
    be->linear_backward(be, dy, x, w, 8, 32, 16, NULL, 0, g, g + 512, 1);
    be->synchronize(be);
    backend_cuda_cost_stop(a100, &r);
    assert_true(find(&r, "gemm 16x32x8 bf16 +bgrad")->bytes == 2880.0);

    // Tensor-core flash forward, mha, B = 1, T = 64, 2 heads of d = 16 (Q, K, V [64, 32] each,
    // separate bf16 buffers, read as they are: no rounding pass).  The kernel (one pass over the
    // keys, one 256-row query tile per head holding all 64 rows) reads Q once (2048 x 2 B =
    // 4096 B), K and V once per query tile (2 x 4096 B), writes Opre (fp32, 2048 x 4 B = 8192 B),
    // out (bf16, 4096 B) and L (128 x 4 B = 512 B): 25088 B.  Tensor-core FLOPs: Q Kᵀ and P V,
    // 2 x 2 x 64 x 64 x 16 per head, 524288 for the two.
    Act *q = be->alloc(be, 1 << 16), *k = be->alloc(be, 1 << 16), *v = be->alloc(be, 1 << 16),
        *out = be->alloc(be, 1 << 16), *dout = be->alloc(be, 1 << 16), *dq = be->alloc(be, 1 << 16),
        *dk = be->alloc(be, 1 << 16), *dv = be->alloc(be, 1 << 16);
    AttnShape as;
    memset(&as, 0, sizeof as);
    as.B = 1;
    as.T = 64;
    as.n_heads = as.q_heads = as.k_heads = as.v_heads = 2;
    as.qk_dim = as.v_dim = 16;
    as.ldq = as.ldk = as.ldv = 32;
    as.scale = 0.25f;
    size_t saved_n, scratch_n;
    be->attention_sizes(be, &as, &saved_n, &scratch_n);
    float *saved = be->alloc(be, saved_n * sizeof(float)), *scratch = be->alloc(be, scratch_n * sizeof(float));
    backend_cuda_cost_start();
    be->attention_forward(be, &as, q, k, v, out, saved, scratch);
    backend_cuda_cost_stop(a100, &r);
    assert_int_equal(r.launches, 1);
    e = find(&r, "flash_tc_forward_kernel<16>");
    assert_int_equal(e->op_class, OPC_ATTENTION);
    assert_true(e->bytes == 25088.0 && e->tc_flops == 524288.0);
    be->free(be, saved);
    be->free(be, scratch);
    // Causal, T = 512: the two 256-row query tiles stop at their last row, 256 and 512 keys, so
    // per head 256 x 256 + 256 x 512 = 196608 (query, key) pairs instead of 262144: tensor-core
    // FLOPs 2 heads x 196608 x 64 (4 d) = 25165824.  Bytes: Q once (1024 rows x 16 x 2 B =
    // 32768), K and V once per tile over 768 key rows per head (2 x 2 x 768 x 16 x 2 B = 98304),
    // Opre (1024 x 16 x 4 B = 65536) and out (1024 x 16 x 2 B = 32768) written, L (1024 x 4 B):
    // 233472.
    as.T = 512;
    as.causal = 1;
    be->attention_sizes(be, &as, &saved_n, &scratch_n);
    saved = be->alloc(be, saved_n * sizeof(float));
    scratch = be->alloc(be, scratch_n * sizeof(float));
    backend_cuda_cost_start();
    be->attention_forward(be, &as, q, k, v, out, saved, scratch);
    backend_cuda_cost_stop(a100, &r);
    e = find(&r, "flash_tc_forward_kernel<16>");
    assert_true(e->bytes == 233472.0 && e->tc_flops == 25165824.0);
    be->free(be, saved);
    be->free(be, scratch);

    // Its backward, MQA (one K and one V head shared by 2 heads; Q [128, 32], K and V [128, 16]),
    // B = 1, T = 128, not causal; Q, K, V and dout (G) read in bf16, dQ, dK, dV stored in bf16.
    // dK/dV: the two heads share K and V, one group; one 128-key-row block would be a grid far
    // below 128 blocks, so the group is split into single heads (2 parts), and 2 blocks are at
    // most 54, so the key tiles have 64 rows: 4 blocks.  Q, G (2 B each) and L, D (4 B each) of
    // 128 query rows per key tile and head, 2 tiles x 2 heads x 128 x (4 x 16 + 8) = 36864 B;
    // K and V staged by both parts (2 x 128 x 16 x (2 + 2) = 16384 B); each part's partial dK
    // and dV written in fp32 (2 x 2 x 128 x 16 x 4 = 32768 B): 86016 B.  Tensor-core FLOPs: 4
    // products of 128 x 128 x 16 per head, 2 x 4 x 2 x 128 x 128 x 16 = 4194304.  The reduction
    // reads the 4 partials (32768 B) and writes dK, dV in bf16 (2 x 128 x 16 x 2 = 8192 B):
    // 40960 B; one add per partial element and dK's scale, 8192 + 2048 FLOPs.
    // dQ: one 256-row query tile (128 rows) per Q head: K and V per head (2 x 128 x 16 x 4 B =
    // 16384), Q read and dQ written once (2 heads x 128 x 16 x (2 + 2) = 16384), G (2 x 128 x
    // 16 x 2 = 8192), L and D (256 x 8 = 2048): 43008 B; 3 products: 2 x 3 x 2 x 128 x 128 x 16
    // = 3145728 FLOPs.
    as.T = 128;
    as.causal = 0;
    as.k_heads = as.v_heads = 1;
    as.ldk = as.ldv = 16;
    be->attention_sizes(be, &as, &saved_n, &scratch_n);
    saved = be->alloc(be, saved_n * sizeof(float));
    scratch = be->alloc(be, scratch_n * sizeof(float));
    be->attention_forward(be, &as, q, k, v, out, saved, scratch);
    backend_cuda_cost_start();
    be->attention_backward(be, &as, q, k, v, saved, dout, dq, dk, dv, NULL, NULL, NULL, scratch);
    backend_cuda_cost_stop(a100, &r);
    e = find(&r, "flash_tc_dkv_kernel<16>");
    assert_true(e->bytes == 86016.0 && e->tc_flops == 4194304.0);
    e = find(&r, "flash_tc_dkv_reduce_kernel");
    assert_true(e->calls == 1 && e->bytes == 40960.0 && e->flops == 10240.0);
    e = find(&r, "flash_tc_dq_kernel<16>");
    assert_true(e->bytes == 43008.0 && e->tc_flops == 3145728.0);
    be->free(be, saved);
    be->free(be, scratch);
    Act *attn[] = {q, k, v, out, dout, dq, dk, dv};
    for (size_t i = 0; i < sizeof attn / sizeof *attn; i++) be->free(be, attn[i]);

    void *all[] = {x, y, dy, w, g, mv, st, rows};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->free(be, all[i]);
    be->destroy(be);
}

static void test_step_flops(void **state) {
    (void)state;
    assert_int_equal(backend_cuda_cost_dry_run(1), 1);
    for (int gemm_path = 0; gemm_path <= 1; gemm_path++)
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            check_modes(ARCH_BERT, ATTN_MHA, bf16, gemm_path);
            check_modes(ARCH_BERT, ATTN_MHE_MUL, bf16, gemm_path);
            check_modes(ARCH_GPT, ATTN_MHA, bf16, gemm_path);
            check_modes(ARCH_GPT, ATTN_MHE_MUL, bf16, gemm_path);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_calls),
        cmocka_unit_test(test_single_calls_bf16_activations),
        cmocka_unit_test(test_step_flops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
