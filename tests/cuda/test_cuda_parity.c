// Parity of every op of kernels/ops.h but the attention core (test_cuda_attention.c): the CUDA
// backend (run through the CPU emulation of CUDA, kernels/cuda/emu) against the CPU backend on
// the same inputs.  Tolerance is norm-wise: max|cuda - cpu| <= tol * max(max|cpu|, 1e-3),
// tol = 1e-5 in fp32 mode, 1e-2 in bf16 mode.
#include "parity.h"

// Returns the largest relative error seen.
static double check_matmuls(void **state, double tol) {
    Fix *f = *state;
    double worst = 0, e;
    const int M = 5, N = 7, K = 9, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            Buf A = buf_rand(f, (size_t)(ta ? K : M) * lda);
            Buf B = buf_rand(f, (size_t)(tb ? N : K) * ldb);
            Buf C = buf_rand(f, (size_t)M * ldc);
            PAIR(f, matmul, ta, tb, M, N, K, 0.7f, mat_f32(D(A), lda), mat_f32(D(B), ldb), 0.5f, out_f32(D(C), ldc));
            e = expect_close(f, &C, tol, "matmul");
            worst = e > worst ? e : worst;
            PAIR(f, matmul, ta, tb, M, N, K, 1.0f, mat_f32(D(A), lda), mat_f32(D(B), ldb), 0.0f, out_f32(D(C), ldc));
            e = expect_close(f, &C, tol, "matmul beta=0");
            worst = e > worst ? e : worst;
            buf_free(f, &A);
            buf_free(f, &B);
            buf_free(f, &C);
        }
    // Batched, with B broadcast (stride 0) as the shared-K/V attention paths use it.
    const int batch = 3;
    Buf A = buf_rand(f, (size_t)batch * M * K), B = buf_rand(f, (size_t)N * K);
    Buf C = buf_rand(f, (size_t)batch * M * N);
    PAIR(f, matmul_batched, 0, 1, M, N, K, 1.0f, D(A), K, (long)M * K, D(B), K, 0L, 1.0f, D(C), N,
         (long)M * N, batch);
    e = expect_close(f, &C, tol, "matmul_batched");
    worst = e > worst ? e : worst;
    buf_free(f, &A);
    buf_free(f, &B);
    buf_free(f, &C);
    return worst;
}
static void test_matmul_matches_cpu(void **state) { check_matmuls(state, 1e-5); }
// Within 1e-2, and visibly rounded: an error this small would mean the bf16 path never ran.
static void test_matmul_bf16_within_1e2(void **state) { assert_true(check_matmuls(state, 1e-2) > 1e-5); }

// The number of recorded calls whose label ends with `suffix` (the cost model's records).
static long calls_labelled(const CostReport *r, const char *suffix) {
    long n = 0;
    const size_t ls = strlen(suffix);
    for (int i = 0; i < r->n_top; i++) {
        const size_t l = strlen(r->top[i].label);
        if (l >= ls && strcmp(r->top[i].label + l - ls, suffix) == 0) n += r->top[i].calls;
    }
    return n;
}

// linear_forward / linear_backward (kernels/cuda/cuda_linear.cu: cuBLASLt with the bias fused
// as the BIAS and BGRADB epilogues), against the CPU backend: with a bias the fused GEMMs
// must run (their records are counted), without one the plain matmul; the backward
// accumulates into dx, dW and db that start non-zero, and into cleared ones.  Twice, the second
// time with new dy values, so bf16 mode also runs on the weight copies made by the first pass.
// The activations (x, y, dy, dx) are act_new buffers: bf16 on the CUDA side in bf16 mode, the
// same draws rounded to bf16 on both sides.
static void check_linear(void **state, double tol) {
    Fix *f = *state;
    // Its own random stream: the later tests' inputs stay those their margins were seen with
    // (the bf16 attention case "mhe_add shared qkv" at T = 5 reaches 1.08e-2 on dk with other
    // draws: see kernels/cuda/README.md).
    const uint64_t rng = f->rng;
    f->rng = 777;
    const int N = 13, in = 24, out = 20;
    Buf x = act_rand(f, (size_t)N * in), W = buf_rand(f, (size_t)out * in), b = buf_rand(f, out);
    Buf y = act_rand(f, (size_t)N * out), dy = act_rand(f, (size_t)N * out), dx = act_rand(f, (size_t)N * in);
    Buf dW = buf_rand(f, (size_t)out * in), db = buf_rand(f, out);
    for (int pass = 0; pass < 2; pass++) {
        CostReport r;
        backend_cuda_cost_start();
        PAIR(f, linear_forward, DA(x), D(W), D(b), N, in, out, DA(y));
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_labelled(&r, " +bias"), 1);
        expect_close(f, &y, tol, "linear_forward");
        PAIR(f, linear_forward, DA(x), D(W), NULL, N, in, out, DA(y));
        expect_close(f, &y, tol, "linear_forward without bias");
        backend_cuda_cost_start();
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, DA(dx), 1, D(dW), D(db), 0);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_labelled(&r, " +bgrad"), 1);
        expect_close(f, &dx, tol, "linear_backward dx (accumulated)");
        expect_close(f, &dW, tol, "linear_backward dW");
        expect_close(f, &db, tol, "linear_backward db");
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, NULL, 0, D(dW), NULL, 0);
        expect_close(f, &dW, tol, "linear_backward dW without dx, db");
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, DA(dx), 0, D(dW), D(db), 0);
        expect_close(f, &dx, tol, "linear_backward dx (overwritten)");
        expect_close(f, &db, tol, "linear_backward db (again)");
        // Gradients cleared first (the optimizer's zeros), then written under the dW_zero promise:
        // the GEMM stores instead of adding (no read of dW: 4 B per element fewer).
        PAIR(f, zero, D(dW), (size_t)out * in * sizeof(float));
        PAIR(f, zero, D(db), (size_t)out * sizeof(float));
        backend_cuda_cost_start();
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, DA(dx), 1, D(dW), D(db), 1);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        expect_close(f, &dW, tol, "linear_backward dW (from zeros, dW_zero)");
        expect_close(f, &db, tol, "linear_backward db (from zeros, dW_zero)");
        CostReport r_acc;
        PAIR(f, zero, D(dW), (size_t)out * in * sizeof(float));
        PAIR(f, zero, D(db), (size_t)out * sizeof(float));
        backend_cuda_cost_start();
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, DA(dx), 1, D(dW), D(db), 0);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r_acc);
        expect_close(f, &dW, tol, "linear_backward dW (from zeros)");
        expect_close(f, &db, tol, "linear_backward db (from zeros)");
        assert_true(r_acc.bytes - r.bytes == 4.0 * out * in);
        PAIR(f, linear_backward, DA(dy), DA(x), D(W), N, in, out, DA(dx), 1, D(dW), D(db), 0);
        expect_close(f, &dW, tol, "linear_backward dW (added to the stored sums)");
        expect_close(f, &db, tol, "linear_backward db (added to the stored sums)");
        // New dy values (exact in bf16 too: a power-of-two scale of bf16 values).
        for (size_t i = 0; i < dy.n; i++) dy.host[i] *= -0.5f;
        PAIR(f, upload_act, DA(dy), dy.host, dy.n);
    }
    Buf *all[] = {&x, &W, &b, &y, &dy, &dx, &dW, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
    f->rng = rng;
}
static void test_linear_matches_cpu(void **state) { check_linear(state, 1e-5); }
static void test_linear_bf16_within_1e2(void **state) { check_linear(state, 1e-2); }

static void test_bias_and_elementwise_match_cpu(void **state) {
    Fix *f = *state;
    const int N = 37, C = 70;
    const size_t n = (size_t)N * C;
    Buf y = buf_rand(f, n), bias = buf_rand(f, C), db = buf_rand(f, C), a = buf_rand(f, n),
        b = buf_rand(f, n), o = buf_rand(f, n);
    PAIR(f, bias_add, DA(y), D(bias), N, C);
    expect_close(f, &y, 1e-5, "bias_add");
    PAIR(f, bias_backward, DA(a), N, C, D(db));
    expect_close(f, &db, 1e-5, "bias_backward");
    PAIR(f, add, DA(a), DA(b), DA(o), n);
    expect_close(f, &o, 1e-5, "add");
    PAIR(f, axpy, -0.3f, D(a), D(o), n);
    expect_close(f, &o, 1e-5, "axpy");
    PAIR(f, scale, D(o), 1.7f, n);
    expect_close(f, &o, 1e-5, "scale");
    PAIR(f, add_scalar, D(o), 0.25f, D(o), n);
    expect_close(f, &o, 1e-5, "add_scalar");
    PAIR(f, mul, D(a), D(o), D(o), n);
    expect_close(f, &o, 1e-5, "mul");
    PAIR(f, mul_acc, D(a), D(b), D(o), n);
    expect_close(f, &o, 1e-5, "mul_acc");
    PAIR(f, dropout, DA(a), DA(o), n, 0.3f, 99u, 7u);
    expect_close(f, &o, 1e-5, "dropout");
    PAIR(f, dropout, DA(a), DA(o), n, 0.0f, 99u, 7u);
    expect_close(f, &o, 1e-5, "dropout p=0");
    double sc = f->cpu->sum_squares(f->cpu, a.c, n), sg = f->gpu->sum_squares(f->gpu, a.g, n);
    assert_true(fabs(sc - sg) <= 1e-9 * sc);
    Buf *all[] = {&y, &bias, &db, &a, &b, &o};
    for (int i = 0; i < 6; i++) buf_free(f, all[i]);
}

// Two shapes: one row chunk of the column sums (cuda_colsum.h), and several chunks and column
// blocks with a partial last one (N = 530 rows = 3 chunks of 256, n d = 45 columns).
static void head_expand_case(Fix *f, int N, int n, int d, int ldx) {
    Buf x = buf_rand(f, (size_t)N * ldx), mul = buf_rand(f, (size_t)n * d), add = buf_rand(f, (size_t)n * d);
    Buf out = buf_rand(f, (size_t)N * n * d), dx = buf_rand(f, (size_t)N * ldx);
    Buf dmul = buf_rand(f, (size_t)n * d), dadd = buf_rand(f, (size_t)n * d);
    PAIR(f, head_expand, DA(x), ldx, D(mul), D(add), N, n, d, DA(out));
    expect_close(f, &out, 1e-5, "head_expand");
    PAIR(f, head_expand, DA(x), ldx, NULL, D(add), N, n, d, DA(out));
    expect_close(f, &out, 1e-5, "head_expand add only");
    for (int acc = 0; acc < 2; acc++) {
        PAIR(f, head_expand_backward, DA(out), DA(x), ldx, D(mul), N, n, d, DA(dx), acc, D(dmul), D(dadd));
        expect_close(f, &dx, 1e-5, "head_expand_backward dx");
        expect_close(f, &dmul, 1e-5, "head_expand_backward dmul");
        expect_close(f, &dadd, 1e-5, "head_expand_backward dadd");
    }
    PAIR(f, head_expand_backward, DA(out), DA(x), ldx, D(mul), N, n, d, DA(dx), 1, NULL, D(dadd));
    expect_close(f, &dadd, 1e-5, "head_expand_backward dadd only");
    Buf *all[] = {&x, &mul, &add, &out, &dx, &dmul, &dadd};
    for (int i = 0; i < 7; i++) buf_free(f, all[i]);
}
static void test_head_expand_matches_cpu(void **state) {
    head_expand_case(*state, 11, 3, 8, 13);
    head_expand_case(*state, 530, 5, 9, 50);
}

// residual_layernorm_forward (one kernel) against the CPU backend's dropout, add and
// layernorm_forward: with dropout and without, s written over r (as the model calls it) and
// into a separate buffer; s, y, mean and rstd compared.  C = 300 is longer than the sums the
// kernel keeps in registers (4 per thread of the emulation's 64): the rest are recomputed.
static void residual_layernorm_case(Fix *f, int N, int C) {
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), r = buf_rand(f, n), g = buf_rand(f, C), bt = buf_rand(f, C);
    Buf y = buf_rand(f, n), s = buf_rand(f, n), mean = buf_rand(f, N), rstd = buf_rand(f, N);
    for (int variant = 0; variant < 3; variant++) {
        const float p = variant == 1 ? 0.0f : 0.25f;
        Buf *out = variant == 2 ? &s : &r;  // the sum over r, or into s
        f->cpu->dropout(f->cpu, (const Act *)(r.c), (Act *)(out->c), n, p, 31, 5 + variant);
        f->cpu->add(f->cpu, (const Act *)(x.c), (const Act *)(out->c), (Act *)(out->c), n);
        f->cpu->layernorm_forward(f->cpu, (const Act *)(out->c), g.c, bt.c, N, C, 1e-5f, (Act *)(y.c), mean.c, rstd.c);
        f->gpu->residual_layernorm_forward(f->gpu, (const Act *)(x.g), (const Act *)(r.g), p, 31, 5 + variant, g.g, bt.g, N, C, 1e-5f, (Act *)(out->g), (Act *)(y.g),
                                           mean.g, rstd.g);
        expect_close(f, out, 1e-5, "residual_layernorm s");
        expect_close(f, &y, 1e-5, "residual_layernorm y");
        expect_close(f, &mean, 1e-5, "residual_layernorm mean");
        expect_close(f, &rstd, 1e-5, "residual_layernorm rstd");
    }
    Buf *all[] = {&x, &r, &g, &bt, &y, &s, &mean, &rstd};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}
static void test_residual_layernorm_matches_cpu(void **state) {
    residual_layernorm_case(*state, 11, 80);
    residual_layernorm_case(*state, 7, 300);
}

// layernorm_backward_dropout (one kernel) against the CPU backend's layernorm_backward then
// dropout: with dropout and without, dx written and accumulated, with and without dγ/dβ; 300
// rows so blocks take several (cuda_layernorm.cu's chunks).
static void test_layernorm_backward_dropout_matches_cpu(void **state) {
    Fix *f = *state;
    const int N = 300, C = 80;
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), g = buf_rand(f, C), bt = buf_rand(f, C), y = buf_rand(f, n);
    Buf mean = buf_rand(f, N), rstd = buf_rand(f, N), dy = buf_rand(f, n), dx = buf_rand(f, n), dr = buf_rand(f, n);
    Buf dg = buf_rand(f, C), db = buf_rand(f, C);
    PAIR(f, layernorm_forward, DA(x), D(g), D(bt), N, C, 1e-5f, DA(y), D(mean), D(rstd));
    for (int v = 0; v < 4; v++) {
        const float p = v == 2 ? 0.0f : 0.3f;
        const int acc = v == 1;
        float *dgc = v == 3 ? NULL : dg.c, *dbc = v == 3 ? NULL : db.c;
        float *dgg = v == 3 ? NULL : dg.g, *dbg = v == 3 ? NULL : db.g;
        f->cpu->layernorm_backward(f->cpu, (const Act *)(dy.c), (const Act *)(x.c), g.c, mean.c, rstd.c, N, C, (Act *)(dx.c), acc, dgc, dbc);
        f->cpu->dropout(f->cpu, (const Act *)(dx.c), (Act *)(dr.c), n, p, 77, 9 + v);
        f->gpu->layernorm_backward_dropout(f->gpu, (const Act *)(dy.g), (const Act *)(x.g), g.g, mean.g, rstd.g, N, C, (Act *)(dx.g), acc, dgg, dbg, p, 77,
                                           9 + v, (Act *)(dr.g));
        expect_close(f, &dx, 1e-5, "layernorm_backward_dropout dx");
        expect_close(f, &dr, 1e-5, "layernorm_backward_dropout dr");
        expect_close(f, &dg, 1e-5, "layernorm_backward_dropout dgamma");
        expect_close(f, &db, 1e-5, "layernorm_backward_dropout dbeta");
    }
    Buf *all[] = {&x, &g, &bt, &y, &mean, &rstd, &dy, &dx, &dr, &dg, &db};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

// LayerNorm's backward past 48 KB of shared memory in all: C = 6,120 columns of dγ/dβ partials
// (47.8 KB dynamic) plus its 256 B of static block sums, which the launch must opt in to (the
// emulation refuses the launch otherwise, as a GPU would).
static void test_layernorm_backward_past_48k_matches_cpu(void **state) {
    Fix *f = *state;
    const int N = 2, C = 6120;
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), g = buf_rand(f, C), bt = buf_rand(f, C), y = buf_rand(f, n);
    Buf mean = buf_rand(f, N), rstd = buf_rand(f, N), dy = buf_rand(f, n), dx = buf_rand(f, n);
    Buf dg = buf_rand(f, C), db = buf_rand(f, C);
    PAIR(f, layernorm_forward, DA(x), D(g), D(bt), N, C, 1e-5f, DA(y), D(mean), D(rstd));
    PAIR(f, layernorm_backward, DA(dy), DA(x), D(g), D(mean), D(rstd), N, C, DA(dx), 0, D(dg), D(db));
    expect_close(f, &dx, 1e-5, "layernorm dx, C = 6120");
    expect_close(f, &dg, 1e-5, "layernorm dgamma, C = 6120");
    expect_close(f, &db, 1e-5, "layernorm dbeta, C = 6120");
    Buf *all[] = {&x, &g, &bt, &y, &mean, &rstd, &dy, &dx, &dg, &db};
    for (int i = 0; i < 10; i++) buf_free(f, all[i]);
}

static void layernorm_gelu_tanh_case(Fix *f, int N, int C) {
    const size_t n = (size_t)N * C;
    Buf x = buf_new(f, n, -2.0f, 3.0f), g = buf_rand(f, C), bt = buf_rand(f, C), y = buf_rand(f, n);
    Buf mean = buf_rand(f, N), rstd = buf_rand(f, N), dy = buf_rand(f, n), dx = buf_rand(f, n);
    Buf dg = buf_rand(f, C), db = buf_rand(f, C);
    PAIR(f, layernorm_forward, DA(x), D(g), D(bt), N, C, 1e-5f, DA(y), D(mean), D(rstd));
    expect_close(f, &y, 1e-5, "layernorm y");
    expect_close(f, &mean, 1e-5, "layernorm mean");
    expect_close(f, &rstd, 1e-5, "layernorm rstd");
    // dx = and +=, with dγ and dβ, either or neither (NULL: not written), without dx, then dx
    // written over dy (accumulate 0, as ops.h allows).
    for (int v = 0; v < 7; v++) {
        const int acc = v == 1 || v == 2;
        Buf *out = v == 6 ? &dy : &dx;
        PAIR(f, layernorm_backward, DA(dy), DA(x), D(g), D(mean), D(rstd), N, C, (Act *)(v == 5 ? NULL : D(*out)), acc,
             v == 3 || v == 4 ? NULL : D(dg), v == 2 || v == 4 ? NULL : D(db));
        expect_close(f, out, 1e-5, "layernorm dx");
        expect_close(f, &dg, 1e-5, "layernorm dgamma");
        expect_close(f, &db, 1e-5, "layernorm dbeta");
    }
    for (int kind = 0; kind < 2; kind++) {
        PAIR(f, gelu_forward, (GeluKind)kind, DA(x), DA(y), n);
        expect_close(f, &y, 1e-5, "gelu_forward");
        PAIR(f, gelu_backward, (GeluKind)kind, DA(x), DA(dy), DA(dx), n);
        expect_close(f, &dx, 1e-5, "gelu_backward");
    }
    PAIR(f, tanh_forward, DA(x), DA(y), n);
    expect_close(f, &y, 1e-6, "tanh_forward");
    PAIR(f, tanh_backward, DA(y), DA(dy), DA(dx), n);
    expect_close(f, &dx, 1e-6, "tanh_backward");
    Buf *all[] = {&x, &g, &bt, &y, &mean, &rstd, &dy, &dx, &dg, &db};
    for (int i = 0; i < 10; i++) buf_free(f, all[i]);
}
// LayerNorm's backward gives each block ceil(N / 256) rows (cuda_layernorm.cu): 9 rows one
// each; 600 three each (200 blocks; 70 columns over the emulation's 64 threads, so 6 threads
// own two; dγ/dβ's second stage: 9 blocks of 8 columns, the last partial); 1027 five each, the
// last block 2 (206 partials per column: chunk groups of 7 and of 6), 150 columns.
static void test_layernorm_gelu_tanh_match_cpu(void **state) {
    layernorm_gelu_tanh_case(*state, 9, 96);
    layernorm_gelu_tanh_case(*state, 600, 70);
    layernorm_gelu_tanh_case(*state, 1027, 150);
}

static void test_embeddings_and_cross_entropy_match_cpu(void **state) {
    Fix *f = *state;
    const int B = 2, T = 5, D = 16, V = 50, types = 2;
    int32_t ids[10], tids[10], labels[10];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7) % 6;  // repeated ids exercise the scatter-add
        tids[i] = i % 2;
        labels[i] = i % 3 == 0 ? -1 : (i * 11) % V;
    }
    IBuf I = ibuf_new(f, ids, 10), TI = ibuf_new(f, tids, 10), L = ibuf_new(f, labels, 10);
    Buf word = buf_rand(f, (size_t)V * D), pos = buf_rand(f, (size_t)T * D), typ = buf_rand(f, (size_t)types * D);
    Buf out = buf_rand(f, (size_t)B * T * D), dword = buf_rand(f, (size_t)V * D),
        dpos = buf_rand(f, (size_t)T * D), dtyp = buf_rand(f, (size_t)types * D);
    PAIR(f, embedding_forward, D(I), D(TI), D(word), D(pos), D(typ), B, T, D, DA(out));
    expect_close(f, &out, 1e-5, "embedding_forward");
    PAIR(f, embedding_forward, D(I), NULL, D(word), D(pos), NULL, B, T, D, DA(out));
    expect_close(f, &out, 1e-5, "embedding_forward no types");
    PAIR(f, embedding_backward, DA(out), D(I), D(TI), B, T, D, D(dword), D(dpos), D(dtyp));
    expect_close(f, &dword, 1e-5, "embedding_backward word");
    expect_close(f, &dpos, 1e-5, "embedding_backward pos");
    expect_close(f, &dtyp, 1e-5, "embedding_backward type");

    Buf logits = buf_new(f, (size_t)B * T * V, -4.0f, 4.0f), loss = buf_rand(f, (size_t)B * T),
        lse = buf_rand(f, (size_t)B * T), dl = buf_rand(f, (size_t)B * T * V);
    PAIR(f, cross_entropy_forward, DA(logits), D(L), B * T, V, V, D(loss), D(lse));
    expect_close(f, &loss, 1e-5, "cross_entropy loss");
    expect_close(f, &lse, 1e-5, "cross_entropy lse");
    PAIR(f, cross_entropy_backward, DA(logits), D(lse), D(L), B * T, V, V, 0.125f, DA(dl));
    expect_close(f, &dl, 1e-5, "cross_entropy_backward");
    // In place: the loss backward overwrites the logits.
    PAIR(f, cross_entropy_backward, DA(logits), D(lse), D(L), B * T, V, V, 0.125f, DA(logits));
    expect_close(f, &logits, 1e-5, "cross_entropy_backward in place");
    ibuf_free(f, &I);
    ibuf_free(f, &TI);
    ibuf_free(f, &L);
    Buf *all[] = {&word, &pos, &typ, &out, &dword, &dpos, &dtyp, &logits, &loss, &lse, &dl};
    for (int i = 0; i < 11; i++) buf_free(f, all[i]);
}

// The loss over rows much wider than a block, where each thread's running max (the forward's one
// pass, an online softmax) grows along its elements and rescales its sum: an ascending row (a
// rescale at every element), a descending one (none), random rows spread over ±40 (exp of the raw
// logits would overflow float without the max), one row without a label; rows 1024 apart with the
// padding's zeros written by the backward.  fp32 ≤ 1e-5 against the CPU backend.
static void test_cross_entropy_wide_rows_match_cpu(void **state) {
    Fix *f = *state;
    enum { N = 5, V = 1000, LD = 1024 };
    const int32_t labels[N] = {999, 0, 517, -1, 3};
    Buf z = buf_new(f, (size_t)N * LD, -40.0f, 40.0f), loss = buf_rand(f, N), lse = buf_rand(f, N),
        dz = buf_rand(f, (size_t)N * LD);
    for (int v = 0; v < LD; v++) {
        z.host[v] = 0.05f * (float)v - 20.0f;
        z.host[LD + v] = 20.0f - 0.05f * (float)v;
    }
    f->cpu->upload(f->cpu, z.c, z.host, (size_t)N * LD * sizeof(float));
    f->gpu->upload(f->gpu, z.g, z.host, (size_t)N * LD * sizeof(float));
    IBuf L = ibuf_new(f, labels, N);
    PAIR(f, cross_entropy_forward, DA(z), D(L), N, V, LD, D(loss), D(lse));
    expect_close(f, &loss, 1e-5, "cross_entropy wide rows: loss");
    expect_close(f, &lse, 1e-5, "cross_entropy wide rows: lse");
    float host_lse[N];
    f->gpu->download(f->gpu, host_lse, lse.g, sizeof host_lse);
    // The ascending row's lse: its largest logit (29.95) plus log Σ exp(-0.05 k), k = 0..999.
    double s = 0;
    for (int k = 0; k < V; k++) s += exp(-0.05 * k);
    assert_true(fabs(host_lse[0] - (29.95 + log(s))) < 1e-4);
    PAIR(f, cross_entropy_backward, DA(z), D(lse), D(L), N, V, LD, 0.25f, DA(dz));
    expect_close(f, &dz, 1e-5, "cross_entropy wide rows: backward with the padding's zeros");
    ibuf_free(f, &L);
    Buf *all[] = {&z, &loss, &lse, &dz};
    for (int i = 0; i < 4; i++) buf_free(f, all[i]);
}

// embedding_layernorm_forward (one kernel) against the CPU backend's embedding_forward,
// layernorm_forward and dropout in place: with token types and without, with dropout and without;
// e, y, mean and rstd compared.  D = 300 is longer than the sums the kernel keeps in registers.
static void embedding_layernorm_case(Fix *f, int B, int T, int D) {
    const int N = B * T, V = 23;
    int32_t *ids = malloc((size_t)N * sizeof *ids), *tids = malloc((size_t)N * sizeof *tids);
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 7 + 3) % V;
        tids[i] = (i / 3) % 2;
    }
    IBuf I = ibuf_new(f, ids, N), TI = ibuf_new(f, tids, N);
    const size_t n = (size_t)N * D;
    Buf word = buf_rand(f, (size_t)V * D), pos = buf_rand(f, (size_t)T * D), typ = buf_rand(f, 2 * (size_t)D);
    Buf g = buf_new(f, D, 0.5f, 1.5f), bt = buf_rand(f, D);
    Buf e = buf_rand(f, n), y = buf_rand(f, n), mean = buf_rand(f, N), rstd = buf_rand(f, N);
    for (int variant = 0; variant < 4; variant++) {
        const float p = variant & 1 ? 0.0f : 0.1f;
        const int typed = variant < 2;
        f->cpu->embedding_forward(f->cpu, I.c, typed ? TI.c : NULL, word.c, pos.c, typed ? typ.c : NULL, B, T, D, (Act *)(e.c));
        f->cpu->layernorm_forward(f->cpu, (const Act *)(e.c), g.c, bt.c, N, D, 1e-12f, (Act *)(y.c), mean.c, rstd.c);
        f->cpu->dropout(f->cpu, (const Act *)(y.c), (Act *)(y.c), n, p, 77, 9 + variant);
        f->gpu->embedding_layernorm_forward(f->gpu, I.g, typed ? TI.g : NULL, word.g, pos.g, typed ? typ.g : NULL, g.g,
                                            bt.g, B, T, D, 1e-12f, p, 77, 9 + variant, (Act *)(e.g), (Act *)(y.g), mean.g, rstd.g);
        expect_close(f, &e, 1e-5, "embedding_layernorm e");
        expect_close(f, &y, 1e-5, "embedding_layernorm y");
        expect_close(f, &mean, 1e-5, "embedding_layernorm mean");
        expect_close(f, &rstd, 1e-5, "embedding_layernorm rstd");
    }
    ibuf_free(f, &I);
    ibuf_free(f, &TI);
    Buf *all[] = {&word, &pos, &typ, &g, &bt, &e, &y, &mean, &rstd};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
    free(ids);
    free(tids);
}
static void test_embedding_layernorm_matches_cpu(void **state) {
    embedding_layernorm_case(*state, 2, 5, 16);
    embedding_layernorm_case(*state, 3, 4, 300);
}

// The compact MLM head's row gather and scatter (rows distinct, unordered; untouched rows of the
// scatter target keep their values).
static void test_gather_scatter_rows_match_cpu(void **state) {
    Fix *f = *state;
    const int N = 11, C = 37, M = 4;
    int32_t rows[4] = {9, 0, 5, 10};
    IBuf R = ibuf_new(f, rows, M);
    Buf src = buf_rand(f, (size_t)N * C), dst = buf_rand(f, (size_t)M * C), big = buf_rand(f, (size_t)N * C);
    PAIR(f, gather_rows, DA(src), D(R), M, C, DA(dst), N);
    expect_close(f, &dst, 0.0, "gather_rows");
    PAIR(f, scatter_rows, DA(dst), D(R), M, C, DA(big), N);
    expect_close(f, &big, 0.0, "scatter_rows");
    ibuf_free(f, &R);
    buf_free(f, &src);
    buf_free(f, &dst);
    buf_free(f, &big);
}

static void test_optimizers_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 333;
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n), u = buf_rand(f, n);
    Buf v = buf_new(f, n, 0.0f, 0.5f);
    for (int step = 1; step <= 3; step++) {
        float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        PAIR(f, adamw_update, D(p), D(g), D(m), D(v), n, 0.9f, 0.999f, 1e-8f, 1e-2f / bc1, 1.0f - 1e-2f * 0.01f, sqrtf(bc2),
             0.5f);
    }
    expect_close(f, &p, 1e-5, "adamw p");
    expect_close(f, &m, 1e-5, "adamw m");
    expect_close(f, &v, 1e-5, "adamw v");
    PAIR(f, lamb_direction, D(p), D(g), D(m), D(v), D(u), n, 0.9f, 0.999f, 1e-6f, 0.01f, 0.1f, 0.001f, 1.0f);
    expect_close(f, &u, 1e-5, "lamb u");
    expect_close(f, &m, 1e-5, "lamb m");
    Buf *all[] = {&p, &g, &m, &v, &u};
    for (int i = 0; i < 5; i++) buf_free(f, all[i]);
}

// adamw_update_ranges (one launch over many tensors) against the CPU backend's adamw_update per
// range: ranges with and without weight decay, gaps between them (left untouched), moments
// offset by m_base, three steps.  In bf16 mode a matmul reads part of p before and after, so
// the weights' bf16 copy must follow the update (a stale one fails the comparison, and the
// emulation's copy check, kernels/cuda/cuda_weight_copy.cu).
static void test_adamw_ranges_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 500, m_base = 50;
    const size_t start[5] = {50, 150, 160, 250, 300}, len[5] = {100, 0, 90, 1, 150};
    const unsigned char decays[5] = {1, 1, 0, 1, 1};
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n - m_base), x = buf_rand(f, 8 * 10),
        y = buf_rand(f, 8 * 20);
    Buf v = buf_new(f, n - m_base, 0.0f, 0.5f);
    const float lr = 1e-2f, wd = 0.01f;
    for (int step = 1; step <= 3; step++) {
        PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, mat_f32(D(x), 10), mat_f32(D(p) + 300, 20), 0.0f, out_f32(D(y), 20));  // W = p[300 .. 500)
        expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
        const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        const float step_size = lr / bc1, decay = 1.0f - lr * wd;
        for (int r = 0; r < 5; r++)
            f->cpu->adamw_update(f->cpu, p.c + start[r], g.c + start[r], m.c + start[r] - m_base,
                                 v.c + start[r] - m_base, len[r], 0.9f, 0.999f, 1e-8f, step_size,
                                 decays[r] ? decay : 1.0f, sqrtf(bc2), 0.5f);
        f->gpu->adamw_update_ranges(f->gpu, p.g, g.g, m.g, v.g, m_base, 5, start, len, decays, 0.9f, 0.999f,
                                    1e-8f, step_size, decay, sqrtf(bc2), 0.5f);
        expect_close(f, &p, 1e-5, "adamw ranges p");
        expect_close(f, &m, 1e-5, "adamw ranges m");
        expect_close(f, &v, 1e-5, "adamw ranges v");
    }
    PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, mat_f32(D(x), 10), mat_f32(D(p) + 300, 20), 0.0f, out_f32(D(y), 20));
    expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
    Buf *all[] = {&p, &g, &m, &v, &x, &y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

// lamb_direction_ranges + axpy_ranges (LAMB in three launches) against the CPU backend's
// lamb_direction, sum_squares and axpy per range: ranges with and without weight decay, an
// empty one, one longer than a chunk (8192) so its sums join several blocks, gaps left
// untouched, moments offset by m_base, three steps; the weights' bf16 copy follows the step.
static void test_lamb_ranges_match_cpu(void **state) {
    Fix *f = *state;
    const size_t n = 20000, m_base = 100;
    const size_t start[5] = {100, 300, 300, 9400, 19000}, len[5] = {150, 0, 9000, 1, 1000};
    const float wds[5] = {0.01f, 0.01f, 0.01f, 0.0f, 0.01f};
    Buf p = buf_rand(f, n), g = buf_rand(f, n), m = buf_rand(f, n - m_base), u = buf_rand(f, n - m_base),
        x = buf_rand(f, 8 * 10), y = buf_rand(f, 8 * 20);
    Buf v = buf_new(f, n - m_base, 0.0f, 0.5f);
    const float lr = 1e-2f;
    double sq[10];
    float coef[5];
    for (int step = 1; step <= 3; step++) {
        PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, mat_f32(D(x), 10), mat_f32(D(p) + 19000, 20), 0.0f, out_f32(D(y), 20));  // W in range 4
        expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
        const float bc1 = 1.0f - powf(0.9f, (float)step), bc2 = 1.0f - powf(0.999f, (float)step);
        f->gpu->lamb_direction_ranges(f->gpu, p.g, g.g, m.g, v.g, u.g, m_base, 5, start, len, wds, 0.9f, 0.999f,
                                      1e-6f, bc1, bc2, 0.5f, sq);
        for (int r = 0; r < 5; r++) {
            const size_t at = start[r] - m_base;
            f->cpu->lamb_direction(f->cpu, p.c + start[r], g.c + start[r], m.c + at, v.c + at, u.c + at, len[r],
                                   0.9f, 0.999f, 1e-6f, wds[r], bc1, bc2, 0.5f);
            const double pp = f->cpu->sum_squares(f->cpu, p.c + start[r], len[r]);
            const double uu = f->cpu->sum_squares(f->cpu, u.c + at, len[r]);
            assert_true(fabs(sq[r] - pp) <= 1e-6 * pp && fabs(sq[5 + r] - uu) <= 1e-5 * uu);
            if (!len[r]) assert_true(sq[r] == 0.0 && sq[5 + r] == 0.0);
            coef[r] = -lr * (pp > 0 && uu > 0 ? (float)sqrt(pp / uu) : 1.0f);
        }
        expect_close(f, &u, 1e-5, "lamb ranges u");
        expect_close(f, &m, 1e-5, "lamb ranges m");
        expect_close(f, &v, 1e-5, "lamb ranges v");
        for (int r = 0; r < 5; r++)
            f->cpu->axpy(f->cpu, coef[r], u.c + start[r] - m_base, p.c + start[r], len[r]);
        f->gpu->axpy_ranges(f->gpu, p.g, u.g, m_base, 5, start, len, coef);
        expect_close(f, &p, 1e-5, "lamb ranges p");
    }
    PAIR(f, matmul, 0, 0, 8, 20, 10, 1.0f, mat_f32(D(x), 10), mat_f32(D(p) + 19000, 20), 0.0f, out_f32(D(y), 20));
    expect_close(f, &y, f->gpu_bf16 ? 1e-2 : 1e-5, "matmul on the updated weights");
    Buf *all[] = {&p, &g, &m, &v, &u, &x, &y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) buf_free(f, all[i]);
}

int main(void) {
    const struct CMUnitTest fp32[] = {
        cmocka_unit_test(test_matmul_matches_cpu),
        cmocka_unit_test(test_linear_matches_cpu),
        cmocka_unit_test(test_bias_and_elementwise_match_cpu),
        cmocka_unit_test(test_head_expand_matches_cpu),
        cmocka_unit_test(test_layernorm_gelu_tanh_match_cpu),
        cmocka_unit_test(test_embeddings_and_cross_entropy_match_cpu),
        cmocka_unit_test(test_cross_entropy_wide_rows_match_cpu),
        cmocka_unit_test(test_gather_scatter_rows_match_cpu),
        cmocka_unit_test(test_optimizers_match_cpu),
        cmocka_unit_test(test_adamw_ranges_match_cpu),
        cmocka_unit_test(test_lamb_ranges_match_cpu),
        cmocka_unit_test(test_residual_layernorm_matches_cpu),
        cmocka_unit_test(test_embedding_layernorm_matches_cpu),
        cmocka_unit_test(test_layernorm_backward_dropout_matches_cpu),
        cmocka_unit_test(test_layernorm_backward_past_48k_matches_cpu),
    };
    const struct CMUnitTest bf16[] = {
        cmocka_unit_test(test_matmul_bf16_within_1e2),
        cmocka_unit_test(test_linear_bf16_within_1e2),
        cmocka_unit_test(test_adamw_ranges_match_cpu),
        cmocka_unit_test(test_lamb_ranges_match_cpu),
    };
    // MHE_TEST_FILTER (a cmocka pattern): the subset the `tsan` tier runs (tests.cmake).
    if (getenv("MHE_TEST_FILTER")) cmocka_set_test_filter(getenv("MHE_TEST_FILTER"));
    int failed = cmocka_run_group_tests_name("cuda parity fp32", fp32, setup_fp32, teardown);
    failed += cmocka_run_group_tests_name("cuda parity bf16", bf16, setup_bf16, teardown);
    return failed ? 1 : 0;
}
