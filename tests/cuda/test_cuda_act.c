// bf16 activations on the CUDA backend (kernels/cuda/cuda_act_stage.cu, a bf16 run's default): every op
// that takes an Act, run on bf16 storage, against the CPU backend in fp32 from the same inputs.
// The inputs are rounded to bf16 on the host before both sides get them, so the two runs start
// from identical values and differ only by what the bf16 side rounds: each Act it stores (≤ 2⁻⁹
// relative per element), the weights of its matmuls (bf16 operands), and the intermediate Act of
// a composite op (linear + GELU).  Tolerance: 1e-2 norm-wise (max |Δ| / max |cpu|), as the
// other bf16 tests; the exactly representable cases (row gather/scatter, the host boundary)
// must be exact.
#include "kernels/cuda/cuda_backend.h"
#include "tests/cuda/parity.h"

// x rounded to the nearest bf16, ties to even (the host's own rounding: the oracle of upload_act).
static float bf16_round(float x) { return parity_bf16_round(x); }

// An activation: fp32 on the CPU, bf16 on the CUDA backend, the same values.
typedef struct {
    size_t n;
    float *host;
    float *c;
    Act *g;
} ABuf;

static ABuf abuf_new(Fix *f, size_t n, float lo, float hi) {
    ABuf b = {n, malloc((n ? n : 1) * sizeof(float)), NULL, NULL};
    for (size_t i = 0; i < n; i++) b.host[i] = bf16_round(lo + (hi - lo) * 0.5f * (uniform(f) + 1.0f));
    b.c = f->cpu->alloc(f->cpu, n * sizeof(float));
    b.g = f->gpu->alloc(f->gpu, n * dtype_size(f->gpu->act));
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload_act(f->gpu, b.g, b.host, n);
    return b;
}
static ABuf abuf_rand(Fix *f, size_t n) { return abuf_new(f, n, -1.0f, 1.0f); }
static void abuf_free(Fix *f, ABuf *b) {
    f->cpu->free(f->cpu, b->c);
    f->gpu->free(f->gpu, b->g);
    free(b->host);
}
// fp32 memory (parameters, their gradients) holding bf16-representable values.
static Buf fbuf_rand(Fix *f, size_t n) {
    Buf b = buf_rand(f, n);
    for (size_t i = 0; i < n; i++) b.host[i] = bf16_round(b.host[i]);
    f->cpu->upload(f->cpu, b.c, b.host, n * sizeof(float));
    f->gpu->upload(f->gpu, b.g, b.host, n * sizeof(float));
    return b;
}

// The activation on the side the PAIR macro is running (the CPU's is fp32, Backend.act DT_F32).
#define DX(b) (side_ ? (b).g : (Act *)(b).c)

// Recorded calls (the cost model's records) whose label contains `part`: which path ran.
static long calls_with(const CostReport *r, const char *part) {
    long n = 0;
    for (int i = 0; i < r->n_top; i++)
        if (strstr(r->top[i].label, part)) n += r->top[i].calls;
    return n;
}

// The ops whose kernels store bf16 themselves (each family's file, kernels/cuda) run without staging:
// no widening or rounding kernel among the records of `call` on the CUDA backend.
#define NATIVE(call)                                                                               \
    do {                                                                                           \
        CostReport nr_;                                                                            \
        backend_cuda_cost_start();                                                                 \
        call;                                                                                      \
        backend_cuda_cost_stop(gpu_spec_find("h100"), &nr_);                                       \
        assert_int_equal(calls_with(&nr_, "act_widen_kernel") + calls_with(&nr_, "act_round_kernel"), 0); \
    } while (0)

static double expect_act(Fix *f, const ABuf *b, double tol, const char *what) {
    float *x = malloc((b->n ? b->n : 1) * sizeof(float)), *y = malloc((b->n ? b->n : 1) * sizeof(float));
    f->cpu->download(f->cpu, x, b->c, b->n * sizeof(float));
    f->gpu->download_act(f->gpu, y, b->g, b->n);
    double mx = 1e-3, err = 0;
    size_t worst = 0;
    for (size_t i = 0; i < b->n; i++) {
        if (fabs(x[i]) > mx) mx = fabs(x[i]);
        const double e = fabs((double)x[i] - y[i]);
        if (!(e <= err)) {
            err = isnan(e) ? INFINITY : e;
            worst = i;
        }
    }
    const double rel = err / mx;
    if (!(rel <= tol))
        print_error("%s: relative error %.3g > %.3g (element %zu: cpu %.8g cuda bf16 %.8g)\n", what, rel, tol, worst,
                    b->n ? x[worst] : 0.0, b->n ? y[worst] : 0.0);
    free(x);
    free(y);
    assert_true(rel <= tol);
    return rel;
}

#define TOL 1e-2


static int setup_act(void **state) {
    setup_fp32(state);
    Fix *f = *state;
    f->gpu->destroy(f->gpu);
    f->gpu = backend_cuda_create(0, 1);
    f->gpu_bf16 = 1;
    return 0;
}

static void test_backend_stores_bf16(void **state) {
    Fix *f = *state;
    assert_int_equal(f->gpu->act, DT_BF16);
    assert_int_equal(f->cpu->act, DT_F32);
}

// upload_act rounds to nearest even, download_act widens exactly: hand-picked values.
static void test_host_boundary_rounds_to_nearest_even(void **state) {
    Fix *f = *state;
    // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: even is 1.  1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷
    // and 1 + 2⁻⁶: even is 1 + 2⁻⁶.  1 + 2⁻⁸ + 2⁻¹⁶ is past halfway: up.  -2.5 is exact.
    const float in[5] = {1.00390625f, 1.01171875f, 1.0039215087890625f, -2.5f, 0.0f};
    const float want[5] = {1.0f, 1.015625f, 1.0078125f, -2.5f, 0.0f};
    float out[5];
    Act *g = f->gpu->alloc(f->gpu, 5 * dtype_size(f->gpu->act));
    f->gpu->upload_act(f->gpu, g, in, 5);
    f->gpu->download_act(f->gpu, out, g, 5);
    for (int i = 0; i < 5; i++) assert_true(out[i] == want[i]);
    for (int i = 0; i < 5; i++) assert_true(bf16_round(in[i]) == want[i]);  // the oracle agrees
    f->gpu->free(f->gpu, g);
}

static void test_matmuls(void **state) {
    Fix *f = *state;
    const int M = 7, N = 9, K = 11;
    ABuf A = abuf_rand(f, (size_t)M * K), At = abuf_rand(f, (size_t)K * M), C = abuf_rand(f, (size_t)M * N);
    Buf W = fbuf_rand(f, (size_t)K * N), Wt = fbuf_rand(f, (size_t)N * K), G = fbuf_rand(f, (size_t)K * N);
    // An activation times a weight into an activation; again accumulating into it.
    PAIR(f, matmul, 0, 0, M, N, K, 0.7f, mat_act(DX(A), K), mat_f32(D(W), N), 0.0f, out_act(DX(C), N));
    expect_act(f, &C, TOL, "act x fp32 -> act");
    PAIR(f, matmul, 0, 1, M, N, K, 1.0f, mat_act(DX(A), K), mat_f32(D(Wt), K), 0.5f, out_act(DX(C), N));
    expect_act(f, &C, TOL, "act x fp32^T += act");
    // Two activations into fp32 memory (a weight gradient), accumulating.
    ABuf B = abuf_rand(f, (size_t)M * N);
    PAIR(f, matmul, 1, 0, K, N, M, 1.0f, mat_act(DX(A), K), mat_act(DX(B), N), 1.0f, out_f32(D(G), N));
    expect_close(f, &G, TOL, "act^T x act += fp32");
    PAIR(f, matmul, 1, 0, M, N, K, 1.0f, mat_act(DX(At), M), mat_f32(D(W), N), 0.0f, out_act(DX(C), N));
    expect_act(f, &C, TOL, "act^T x fp32 -> act");
    ABuf *acts[] = {&A, &At, &C, &B};
    for (size_t i = 0; i < 4; i++) abuf_free(f, acts[i]);
    Buf *fs[] = {&W, &Wt, &G};
    for (size_t i = 0; i < 3; i++) buf_free(f, fs[i]);
}

// The bf16 copy of a weight (kernels/cuda/cuda_weight_copy.cu) follows every kind of write to the fp32
// master: after each, the product matches the CPU's on the new weights (and the emulated build
// checks the copy it hands to cuBLAS against bf16 of the fp32 data).  AdamW and the fp32
// elementwise ops store into the copy as they update the weights: no rounding pass before the
// next product; an upload or a copy costs one.
static void test_weight_copy_follows_writes(void **state) {
    Fix *f = *state;
    const int M = 6, N = 10, K = 8;
    const size_t nw = (size_t)K * N;
    ABuf A = abuf_rand(f, (size_t)M * K), C = abuf_rand(f, (size_t)M * N);
    Buf W = fbuf_rand(f, nw), G = fbuf_rand(f, nw), mom = fbuf_rand(f, nw), var = buf_new(f, nw, 0.0f, 1.0f);
    float *host = malloc(nw * sizeof(float));
    for (int step = 0; step < 6; step++) {
        CostReport r;
        backend_cuda_cost_start();
        switch (step) {
        case 0: break;  // the copy is made
        case 1: PAIR(f, adamw_update, D(W), D(G), D(mom), D(var), nw, 0.9f, 0.999f, 1e-8f, 1e-2f, 0.99f, 0.5f, 1.0f); break;
        case 2: PAIR(f, axpy, 0.25f, D(G), D(W), nw); break;
        case 3:
            for (size_t i = 0; i < nw; i++) host[i] = bf16_round(0.5f - (float)i / (float)nw);
            PAIR(f, upload, D(W), host, nw * sizeof(float));
            break;
        case 4: PAIR(f, copy, D(W), D(G), nw * sizeof(float)); break;
        default: PAIR(f, scale, D(W), -2.0f, nw); break;
        }
        PAIR(f, matmul, 0, 0, M, N, K, 1.0f, mat_act(DX(A), K), mat_f32(D(W), N), 0.0f, out_act(DX(C), N));
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "to_bf16_kernel"), step == 0 || step == 3 || step == 4);
        expect_act(f, &C, TOL, "matmul on the written weights");
    }
    free(host);
    abuf_free(f, &A);
    abuf_free(f, &C);
    Buf *fs[] = {&W, &G, &mom, &var};
    for (size_t i = 0; i < 4; i++) buf_free(f, fs[i]);
}

// The vocabulary heads: a width that is not a multiple of 8 (BERT's 30522, GPT-2's 50257) in rows
// ops_head_ld apart (cuda_pad_ld.cu): 301 wide in rows of 320, 300 rows, with a bias (BERT) and
// without (GPT-2), and the loss between the two products as the model runs them.  The CUDA
// products run 320 wide over the weight's zero rows, nothing is copied, and the padding columns
// hold zeros on both backends (the CPU's fp32 here runs the unpadded width into the wide rows).
static void test_vocabulary_head_padded(void **state) {
    Fix *f = *state;
    const int N = 300, in = 24, out = 301, ld = ops_head_ld(f->gpu->act, out);
    assert_int_equal(ld, 320);
    assert_int_equal(ops_head_ld(DT_F32, out), out);
    int32_t labels[300];
    for (int i = 0; i < N; i++) labels[i] = i % 7 == 3 ? -1 : (i * 37) % out;
    IBuf L = ibuf_new(f, labels, N);
    ABuf x = abuf_rand(f, (size_t)N * in), dx = abuf_rand(f, (size_t)N * in);
    ABuf y = abuf_new(f, (size_t)N * ld, -3.0f, 3.0f);  // the padding too: it must be overwritten
    Buf W = fbuf_rand(f, (size_t)out * in), b = fbuf_rand(f, out), dW = fbuf_rand(f, (size_t)out * in),
        db = fbuf_rand(f, out), loss = fbuf_rand(f, N), lse = fbuf_rand(f, N);
    float *host = malloc((size_t)N * ld * sizeof *host);
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        CostReport r;
        f->cpu->linear_forward_ld(f->cpu, (Act *)x.c, W.c, with_bias ? b.c : NULL, N, in, out, ld, (Act *)y.c);
        backend_cuda_cost_start();
        f->gpu->linear_forward_ld(f->gpu, x.g, W.g, with_bias ? b.g : NULL, N, in, out, ld, y.g);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "gemm 300x320x24"), 1);  // the width padded
        assert_int_equal(calls_with(&r, "bias_pad"), 0);         // not the unpadded fallback
        // The padded weight is made once and kept (the second pass pads only the new bias).
        assert_int_equal(calls_with(&r, "pad_tail"), 1);
        expect_act(f, &y, TOL, "padded linear_forward_ld");
        f->gpu->download_act(f->gpu, host, y.g, (size_t)N * ld);
        for (int i = 0; i < N; i++)
            for (int c = out; c < ld; c++) assert_true(host[(size_t)i * ld + c] == 0.0f);
        PAIR(f, cross_entropy_forward, DX(y), D(L), N, out, ld, D(loss), D(lse));
        expect_close(f, &loss, TOL, "cross_entropy_forward over padded rows: loss");
        expect_close(f, &lse, TOL, "cross_entropy_forward over padded rows: lse");
        PAIR(f, cross_entropy_backward, DX(y), D(lse), D(L), N, out, ld, 1.0f / N, DX(y));
        expect_act(f, &y, TOL, "cross_entropy_backward over padded rows");
        float *dw_c = with_bias ? db.c : NULL, *db_g = with_bias ? db.g : NULL;
        f->cpu->linear_backward_ld(f->cpu, (Act *)y.c, (Act *)x.c, W.c, N, in, out, ld, (Act *)dx.c, 1, dW.c, dw_c, 0);
        backend_cuda_cost_start();
        f->gpu->linear_backward_ld(f->gpu, y.g, x.g, W.g, N, in, out, ld, dx.g, 1, dW.g, db_g, 0);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "gemm 300x24x320"), 1);  // dx: K over the padded width
        // dW: the rows up to a multiple of 64, then the rest (an odd row count kept cuBLAS on
        // CUTLASS sm80 kernels), each once.
        assert_int_equal(calls_with(&r, "gemm 256x24x300"), 1);
        assert_int_equal(calls_with(&r, "gemm 45x24x300"), 1);
        assert_int_equal(calls_with(&r, "pad_tail"), 0);         // the forward's padded weight
        expect_act(f, &dx, TOL, "padded linear_backward_ld dx (accumulated)");
        expect_close(f, &dW, TOL, "padded linear_backward_ld dW");
        if (with_bias) expect_close(f, &db, TOL, "padded linear_backward_ld db");
    }
    // A write to the weight (an optimizer's in-place update through the dual store) renews its
    // copy: the next forward pads again, and gives the new weight's product.
    PAIR(f, scale, D(W), 0.5f, (size_t)out * in);
    f->cpu->linear_forward_ld(f->cpu, (Act *)x.c, W.c, b.c, N, in, out, ld, (Act *)y.c);
    CostReport r;
    backend_cuda_cost_start();
    f->gpu->linear_forward_ld(f->gpu, x.g, W.g, b.g, N, in, out, ld, y.g);
    backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    assert_int_equal(calls_with(&r, "pad_tail"), 1);
    expect_act(f, &y, TOL, "padded linear_forward_ld after the weight changed");
    free(host);
    ibuf_free(f, &L);
    ABuf *acts[] = {&x, &y, &dx};
    for (size_t i = 0; i < 3; i++) abuf_free(f, acts[i]);
    Buf *fs[] = {&W, &b, &dW, &db, &loss, &lse};
    for (size_t i = 0; i < 6; i++) buf_free(f, fs[i]);
}

static void test_linear_layers(void **state) {
    Fix *f = *state;
    const int N = 13, in = 24, out = 32;  // multiples of 8: the GELU epilogues' aux matrix
    ABuf x = abuf_rand(f, (size_t)N * in), y = abuf_rand(f, (size_t)N * out), dy = abuf_rand(f, (size_t)N * out);
    ABuf dx = abuf_rand(f, (size_t)N * in);
    Buf W = fbuf_rand(f, (size_t)out * in), b = fbuf_rand(f, out), dW = fbuf_rand(f, (size_t)out * in),
        db = fbuf_rand(f, out);
    // One cuBLASLt GEMM each with the bias fused (BIAS forward, BGRADB backward).
    CostReport r;
    backend_cuda_cost_start();
    PAIR(f, linear_forward, DX(x), D(W), D(b), N, in, out, DX(y));
    backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    assert_int_equal(calls_with(&r, " +bias"), 1);
    expect_act(f, &y, TOL, "linear_forward");
    backend_cuda_cost_start();
    PAIR(f, linear_backward, DX(dy), DX(x), D(W), N, in, out, DX(dx), 1, D(dW), D(db), 0);
    backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    assert_int_equal(calls_with(&r, " +bgrad"), 1);
    expect_act(f, &dx, TOL, "linear_backward dx (accumulated)");
    expect_close(f, &dW, TOL, "linear_backward dW");
    expect_close(f, &db, TOL, "linear_backward db");
    // The FFN's fused forms against the CPU's linear + GELU, both GELUs; the tanh form through
    // cuBLASLt's GELU_AUX_BIAS and DGELU epilogues (one GEMM each).
    ABuf u = abuf_rand(f, (size_t)N * out), g = abuf_rand(f, (size_t)N * out), du = abuf_rand(f, (size_t)N * in);
    for (int k = 0; k < 2; k++) {
        const GeluKind kind = k ? GELU_TANH : GELU_ERF;
        f->cpu->linear_forward(f->cpu, (Act *)x.c, W.c, b.c, N, in, out, (Act *)u.c);
        f->cpu->gelu_forward(f->cpu, kind, (Act *)u.c, (Act *)g.c, (size_t)N * out);
        backend_cuda_cost_start();
        f->gpu->linear_gelu_forward(f->gpu, kind, x.g, W.g, b.g, N, in, out, u.g, g.g);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "+bias+gelu"), kind == GELU_TANH);
        expect_act(f, &u, TOL, "linear_gelu_forward u");
        expect_act(f, &g, TOL, "linear_gelu_forward g");
        // dx = (dy W) gelu'(x) with x standing in for the GELU input u of the down projection.
        f->cpu->linear_backward(f->cpu, (Act *)dy.c, (Act *)x.c, W.c, N, in, out, (Act *)du.c, 0, dW.c, db.c, 0);
        f->cpu->gelu_backward(f->cpu, kind, (Act *)x.c, (Act *)du.c, (Act *)du.c, (size_t)N * in);
        backend_cuda_cost_start();
        f->gpu->linear_backward_gelu(f->gpu, kind, dy.g, x.g, W.g, N, in, out, x.g, du.g, dW.g, db.g, 0);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "+dgelu"), kind == GELU_TANH);
        expect_act(f, &du, TOL, "linear_backward_gelu dx");
        expect_close(f, &dW, TOL, "linear_backward_gelu dW");
        expect_close(f, &db, TOL, "linear_backward_gelu db");
    }
    ABuf *acts[] = {&x, &y, &dy, &dx, &u, &g, &du};
    for (size_t i = 0; i < 7; i++) abuf_free(f, acts[i]);
    Buf *fs[] = {&W, &b, &dW, &db};
    for (size_t i = 0; i < 4; i++) buf_free(f, fs[i]);
}

static void test_elementwise(void **state) {
    Fix *f = *state;
    const int N = 9, C = 70;
    const size_t n = (size_t)N * C;
    ABuf a = abuf_rand(f, n), b = abuf_rand(f, n), o = abuf_rand(f, n);
    Buf bias = fbuf_rand(f, C), db = fbuf_rand(f, C);
    PAIR(f, bias_add, DX(o), D(bias), N, C);
    expect_act(f, &o, TOL, "bias_add");
    PAIR(f, bias_backward, DX(a), N, C, D(db));
    expect_close(f, &db, TOL, "bias_backward");
    NATIVE(PAIR(f, add, DX(a), DX(b), DX(o), n));
    expect_act(f, &o, TOL, "add");
    PAIR(f, add, DX(o), DX(b), DX(o), n);
    expect_act(f, &o, TOL, "add in place");
    NATIVE(PAIR(f, dropout, DX(a), DX(o), n, 0.3f, 99u, 7u));
    expect_act(f, &o, TOL, "dropout");
    PAIR(f, dropout, DX(o), DX(o), n, 0.2f, 98u, 3u);
    expect_act(f, &o, TOL, "dropout in place");
    NATIVE(PAIR(f, tanh_forward, DX(a), DX(o), n));
    expect_act(f, &o, TOL, "tanh_forward");
    NATIVE(PAIR(f, tanh_backward, DX(o), DX(b), DX(b), n));
    expect_act(f, &b, TOL, "tanh_backward in place");
    for (int k = 0; k < 2; k++) {
        const GeluKind kind = k ? GELU_TANH : GELU_ERF;
        NATIVE(PAIR(f, gelu_forward, kind, DX(a), DX(o), n));
        expect_act(f, &o, TOL, "gelu_forward");
        NATIVE(PAIR(f, gelu_backward, kind, DX(a), DX(o), DX(o), n));
        expect_act(f, &o, TOL, "gelu_backward in place");
    }
    abuf_free(f, &a);
    abuf_free(f, &b);
    abuf_free(f, &o);
    buf_free(f, &bias);
    buf_free(f, &db);
}

// GELU on 16-byte groups (kernels/cuda/cuda_gelu.cu): a length that is a multiple of 8 on aligned
// buffers runs the vector kernels (one launch each, no scalar one), against the CPU ≤ 1e-2 over
// GELU's range [-6, 6], forward, backward and backward in place; bit for bit the scalar kernels'
// results on the same values one element off alignment (which take the scalar kernels); a length
// off 8 stays scalar.
static void test_gelu_vectorised(void **state) {
    Fix *f = *state;
    const size_t n = 8 * 97;
    ABuf x = abuf_new(f, n, -6.0f, 6.0f), dy = abuf_rand(f, n), y = abuf_rand(f, n), dx = abuf_rand(f, n);
    const size_t el = dtype_size(f->gpu->act);
    Act *xo = f->gpu->alloc(f->gpu, (n + 8) * el), *dyo = f->gpu->alloc(f->gpu, (n + 8) * el),
        *yo = f->gpu->alloc(f->gpu, (n + 8) * el);
    Act *x1 = act_at(f->gpu, xo, 1), *dy1 = act_at(f->gpu, dyo, 1), *y1 = act_at(f->gpu, yo, 1);
    f->gpu->upload_act(f->gpu, x1, x.host, n);
    f->gpu->upload_act(f->gpu, dy1, dy.host, n);
    float *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb);
    for (int k = 0; k < 2; k++) {
        const GeluKind kind = k ? GELU_TANH : GELU_ERF;
        CostReport r;
        backend_cuda_cost_start();
        PAIR(f, gelu_forward, kind, DX(x), DX(y), n);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "gelu_vec_forward_kernel"), 1);
        assert_int_equal(calls_with(&r, "gelu_forward_kernel"), 0);
        expect_act(f, &y, TOL, "gelu_forward (16-byte groups)");
        f->gpu->gelu_forward(f->gpu, kind, x1, y1, n);  // off alignment: the scalar kernel
        f->gpu->download_act(f->gpu, ha, y.g, n);
        f->gpu->download_act(f->gpu, hb, y1, n);
        assert_memory_equal(ha, hb, n * sizeof *ha);
        backend_cuda_cost_start();
        PAIR(f, gelu_backward, kind, DX(x), DX(dy), DX(dx), n);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "gelu_vec_backward_kernel"), 1);
        assert_int_equal(calls_with(&r, "gelu_backward_kernel"), 0);
        expect_act(f, &dx, TOL, "gelu_backward (16-byte groups)");
        f->gpu->gelu_backward(f->gpu, kind, x1, dy1, y1, n);
        f->gpu->download_act(f->gpu, ha, dx.g, n);
        f->gpu->download_act(f->gpu, hb, y1, n);
        assert_memory_equal(ha, hb, n * sizeof *ha);
        // In place (dx = dy) and a length off 8 (the scalar kernel).
        f->gpu->upload_act(f->gpu, dx.g, dy.host, n);
        f->gpu->gelu_backward(f->gpu, kind, x.g, dx.g, dx.g, n);
        f->gpu->download_act(f->gpu, hb, dx.g, n);
        assert_memory_equal(ha, hb, n * sizeof *ha);
        backend_cuda_cost_start();
        f->gpu->gelu_forward(f->gpu, kind, x.g, y.g, n - 1);
        backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
        assert_int_equal(calls_with(&r, "gelu_vec_"), 0);
        assert_int_equal(calls_with(&r, "gelu_forward_kernel"), 1);
    }
    free(ha);
    free(hb);
    f->gpu->free(f->gpu, xo);
    f->gpu->free(f->gpu, dyo);
    f->gpu->free(f->gpu, yo);
    ABuf *all[] = {&x, &dy, &y, &dx};
    for (size_t i = 0; i < 4; i++) abuf_free(f, all[i]);
}

// The per-head broadcast with x a column slice (row stride ldx > d) and dx written into one.
static void test_head_expand(void **state) {
    Fix *f = *state;
    const int N = 10, n = 3, d = 8, ldx = 3 * d;
    const size_t nd = (size_t)n * d;
    ABuf x = abuf_rand(f, (size_t)N * ldx), out = abuf_rand(f, (size_t)N * nd), dx = abuf_rand(f, (size_t)N * ldx);
    Buf mul = fbuf_rand(f, nd), add = fbuf_rand(f, nd), dmul = fbuf_rand(f, nd), dadd = fbuf_rand(f, nd);
    Buf fv = fbuf_rand(f, nd), gv = fbuf_rand(f, nd), df = fbuf_rand(f, nd), dg = fbuf_rand(f, nd);
    PAIR(f, head_expand, DX(x) , ldx, D(mul), D(add), N, n, d, DX(out));
    expect_act(f, &out, TOL, "head_expand");
    for (int acc = 0; acc < 2; acc++) {
        NATIVE(PAIR(f, head_expand_backward, DX(out), DX(x), ldx, D(mul), N, n, d, DX(dx), acc, D(dmul), D(dadd)));
        expect_act(f, &dx, TOL, "head_expand_backward dx (slice, untouched columns too)");
        expect_close(f, &dmul, TOL, "head_expand_backward dmul");
        expect_close(f, &dadd, TOL, "head_expand_backward dadd");
    }
    // The product form against its definition: dm = Σ dout x (zeroed, then head_expand_backward),
    // df += dm g, dg += dm f.
    float *dm = f->cpu->alloc(f->cpu, nd * sizeof(float));
    f->cpu->head_expand_backward(f->cpu, (Act *)out.c, (Act *)x.c, ldx, mul.c, N, n, d, (Act *)dx.c, 1, dm, NULL);
    f->cpu->mul_acc(f->cpu, dm, gv.c, df.c, nd);
    f->cpu->mul_acc(f->cpu, dm, fv.c, dg.c, nd);
    f->gpu->head_expand_backward_prod(f->gpu, out.g, x.g, ldx, mul.g, fv.g, gv.g, N, n, d, dx.g, 1, df.g, dg.g);
    expect_act(f, &dx, TOL, "head_expand_backward_prod dx");
    expect_close(f, &df, TOL, "head_expand_backward_prod df");
    expect_close(f, &dg, TOL, "head_expand_backward_prod dg");
    f->cpu->free(f->cpu, dm);
    abuf_free(f, &x);
    abuf_free(f, &out);
    abuf_free(f, &dx);
    Buf *fs[] = {&mul, &add, &dmul, &dadd, &fv, &gv, &df, &dg};
    for (size_t i = 0; i < 8; i++) buf_free(f, fs[i]);
}

// Rows move unchanged: exact.
static void test_gather_scatter_rows(void **state) {
    Fix *f = *state;
    const int R = 9, M = 4, C = 13;
    const int32_t rows[4] = {7, 0, 3, 8};
    IBuf I = ibuf_new(f, rows, M);
    ABuf src = abuf_rand(f, (size_t)R * C), dst = abuf_rand(f, (size_t)M * C);
    NATIVE(PAIR(f, gather_rows, DX(src), D(I), M, C, DX(dst), R));
    expect_act(f, &dst, 0.0, "gather_rows");
    NATIVE(PAIR(f, scatter_rows, DX(dst), D(I), M, C, DX(src), R));
    expect_act(f, &src, 0.0, "scatter_rows (other rows untouched)");
    abuf_free(f, &src);
    abuf_free(f, &dst);
    ibuf_free(f, &I);
}

static void check_layernorms(Fix *f, int N, int C) {
    const size_t n = (size_t)N * C;
    const float p = 0.25f;
    ABuf x = abuf_rand(f, n), r = abuf_rand(f, n), s = abuf_rand(f, n), y = abuf_rand(f, n), dy = abuf_rand(f, n),
         dx = abuf_rand(f, n), dr = abuf_rand(f, n);
    Buf g = fbuf_rand(f, C), bt = fbuf_rand(f, C), mean = fbuf_rand(f, N), rstd = fbuf_rand(f, N),
        dg = fbuf_rand(f, C), dbt = fbuf_rand(f, C);
    NATIVE(PAIR(f, layernorm_forward, DX(x), D(g), D(bt), N, C, 1e-5f, DX(y), D(mean), D(rstd)));
    expect_act(f, &y, TOL, "layernorm_forward");
    PAIR(f, layernorm_forward, DX(y), D(g), D(bt), N, C, 1e-5f, DX(y), D(mean), D(rstd));  // in place
    expect_act(f, &y, TOL, "layernorm_forward");
    expect_close(f, &mean, TOL, "layernorm_forward mean");
    expect_close(f, &rstd, TOL, "layernorm_forward rstd");
    // The residual step against its definition: s = x + dropout(r), y = LayerNorm(s).
    f->cpu->dropout(f->cpu, (Act *)r.c, (Act *)s.c, n, p, 31, 5);
    f->cpu->add(f->cpu, (Act *)x.c, (Act *)s.c, (Act *)s.c, n);
    f->cpu->layernorm_forward(f->cpu, (Act *)s.c, g.c, bt.c, N, C, 1e-5f, (Act *)y.c, mean.c, rstd.c);
    NATIVE(f->gpu->residual_layernorm_forward(f->gpu, x.g, r.g, p, 31, 5, g.g, bt.g, N, C, 1e-5f, s.g, y.g, mean.g,
                                              rstd.g));
    expect_act(f, &s, TOL, "residual_layernorm_forward s");
    expect_act(f, &y, TOL, "residual_layernorm_forward y");
    expect_close(f, &mean, TOL, "residual_layernorm_forward mean");
    for (int acc = 0; acc < 2; acc++) {
        NATIVE(PAIR(f, layernorm_backward, DX(dy), DX(s), D(g), D(mean), D(rstd), N, C, DX(dx), acc, D(dg), D(dbt)));
        expect_act(f, &dx, TOL, "layernorm_backward dx");
        expect_close(f, &dg, TOL, "layernorm_backward dgamma");
        expect_close(f, &dbt, TOL, "layernorm_backward dbeta");
    }
    // With the branch's dropout: the CPU's layernorm_backward, then dropout of dx.
    f->cpu->layernorm_backward(f->cpu, (Act *)dy.c, (Act *)s.c, g.c, mean.c, rstd.c, N, C, (Act *)dx.c, 1, dg.c,
                               dbt.c);
    f->cpu->dropout(f->cpu, (Act *)dx.c, (Act *)dr.c, n, p, 17, 2);
    f->gpu->layernorm_backward_dropout(f->gpu, dy.g, s.g, g.g, mean.g, rstd.g, N, C, dx.g, 1, dg.g, dbt.g, p, 17, 2,
                                       dr.g);
    expect_act(f, &dx, TOL, "layernorm_backward_dropout dx");
    expect_act(f, &dr, TOL, "layernorm_backward_dropout dr");
    expect_close(f, &dg, TOL, "layernorm_backward_dropout dgamma");
    ABuf *acts[] = {&x, &r, &s, &y, &dy, &dx, &dr};
    for (size_t i = 0; i < 7; i++) abuf_free(f, acts[i]);
    Buf *fs[] = {&g, &bt, &mean, &rstd, &dg, &dbt};
    for (size_t i = 0; i < 6; i++) buf_free(f, fs[i]);
}

// C = 80: the block-per-row backward; 256 and 768 (BERT-base, GPT-2): the warp-per-row one on
// bf16 rows, 37 rows so the last block of 16 is partial.
static void test_layernorms(void **state) {
    Fix *f = *state;
    check_layernorms(f, 11, 80);
    check_layernorms(f, 37, 256);
    check_layernorms(f, 37, 768);
}

static void test_embeddings_and_loss(void **state) {
    Fix *f = *state;
    const int B = 2, T = 5, D = 16, V = 23;
    const size_t n = (size_t)B * T * D;
    int32_t ids[10], types[10], labels[10];
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % V;
        types[i] = i % 2;
        labels[i] = i % 4 == 1 ? -1 : (i * 5) % V;
    }
    IBuf I = ibuf_new(f, ids, B * T), TI = ibuf_new(f, types, B * T), L = ibuf_new(f, labels, B * T);
    Buf word = fbuf_rand(f, (size_t)V * D), pos = fbuf_rand(f, (size_t)T * D), typ = fbuf_rand(f, 2 * (size_t)D);
    Buf g = fbuf_rand(f, D), bt = fbuf_rand(f, D), mean = fbuf_rand(f, B * T), rstd = fbuf_rand(f, B * T);
    Buf dword = fbuf_rand(f, (size_t)V * D), dpos = fbuf_rand(f, (size_t)T * D), dtyp = fbuf_rand(f, 2 * (size_t)D);
    ABuf e = abuf_rand(f, n), y = abuf_rand(f, n), dout = abuf_rand(f, n);
    NATIVE(PAIR(f, embedding_forward, D(I), D(TI), D(word), D(pos), D(typ), B, T, D, DX(e)));
    expect_act(f, &e, TOL, "embedding_forward");
    // BERT's block against its definition: embedding, LayerNorm, dropout.
    f->cpu->layernorm_forward(f->cpu, (Act *)e.c, g.c, bt.c, B * T, D, 1e-5f, (Act *)y.c, mean.c, rstd.c);
    f->cpu->dropout(f->cpu, (Act *)y.c, (Act *)y.c, n, 0.1f, 4, 9);
    f->gpu->embedding_layernorm_forward(f->gpu, I.g, TI.g, word.g, pos.g, typ.g, g.g, bt.g, B, T, D, 1e-5f, 0.1f, 4, 9,
                                        e.g, y.g, mean.g, rstd.g);
    expect_act(f, &e, TOL, "embedding_layernorm_forward e");
    expect_act(f, &y, TOL, "embedding_layernorm_forward y");
    expect_close(f, &rstd, TOL, "embedding_layernorm_forward rstd");
    NATIVE(PAIR(f, embedding_backward, DX(dout), D(I), D(TI), B, T, D, D(dword), D(dpos), D(dtyp)));
    expect_close(f, &dword, TOL, "embedding_backward dword");
    expect_close(f, &dpos, TOL, "embedding_backward dpos");
    expect_close(f, &dtyp, TOL, "embedding_backward dtype");
    // Cross-entropy over logits [B T, V]: loss and lse in fp32, the gradient in place.
    ABuf z = abuf_new(f, (size_t)B * T * V, -3.0f, 3.0f);
    Buf loss = fbuf_rand(f, B * T), lse = fbuf_rand(f, B * T);
    PAIR(f, cross_entropy_forward, DX(z), D(L), B * T, V, V, D(loss), D(lse));
    expect_close(f, &loss, TOL, "cross_entropy_forward loss");
    expect_close(f, &lse, TOL, "cross_entropy_forward lse");
    NATIVE(PAIR(f, cross_entropy_backward, DX(z), D(lse), D(L), B * T, V, V, 0.125f, DX(z)));
    expect_act(f, &z, TOL, "cross_entropy_backward (in place)");
    ABuf *acts[] = {&e, &y, &dout, &z};
    for (size_t i = 0; i < 4; i++) abuf_free(f, acts[i]);
    Buf *fs[] = {&word, &pos, &typ, &g, &bt, &mean, &rstd, &dword, &dpos, &dtyp, &loss, &lse};
    for (size_t i = 0; i < 12; i++) buf_free(f, fs[i]);
    IBuf *is[] = {&I, &TI, &L};
    for (size_t i = 0; i < 3; i++) ibuf_free(f, is[i]);
}

// Q, K, V as column slices of one fused [B T, 3 H d] buffer (the projections' layout), with a
// key bias, padding and dropout; dQ, dK, dV into the slices of another.  d = 8 runs the fp32
// core on staged copies, d = 16 the tensor-core flash kernels on the bf16 buffers themselves,
// here with an output scale and shift and their gradients.
static void attention_case(Fix *f, int d, int scaled) {
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = 2;
    s.T = 7;
    s.n_heads = s.q_heads = s.k_heads = s.v_heads = 2;
    s.qk_dim = s.v_dim = d;
    s.ldq = s.ldk = s.ldv = 3 * 2 * d;
    s.scale = 0.35f;
    s.dropout = 0.1f;
    s.seed = 21;
    const size_t rows = (size_t)s.B * s.T, w = (size_t)s.n_heads * s.v_dim;
    int32_t mask[14];
    for (int i = 0; i < 14; i++) mask[i] = i != 6 && i != 12;
    IBuf M = ibuf_new(f, mask, 14);
    ABuf qkv = abuf_rand(f, rows * s.ldq), dqkv = abuf_rand(f, rows * s.ldq), kb = abuf_rand(f, rows * s.n_heads);
    ABuf dkb = abuf_rand(f, rows * s.n_heads), out = abuf_rand(f, rows * w), dout = abuf_rand(f, rows * w);
    size_t sv[2], sc[2];
    f->cpu->attention_sizes(f->cpu, &s, &sv[0], &sc[0]);
    f->gpu->attention_sizes(f->gpu, &s, &sv[1], &sc[1]);
    float *saved[2] = {f->cpu->alloc(f->cpu, sv[0] * 4 + 4), f->gpu->alloc(f->gpu, sv[1] * 4 + 4)};
    float *scratch[2] = {f->cpu->alloc(f->cpu, sc[0] * 4 + 4), f->gpu->alloc(f->gpu, sc[1] * 4 + 4)};
    Buf osc = fbuf_rand(f, w), osh = fbuf_rand(f, w), dosc = fbuf_rand(f, w), dosh = fbuf_rand(f, w);
    CostReport r;
    for (int side_ = 0; side_ < 2; side_++) {
        Backend *be = side_ ? f->gpu : f->cpu;
        if (side_) backend_cuda_cost_start();
        AttnShape t = s;
        t.key_mask = D(M);
        t.key_bias = DX(kb);
        t.out_scale = scaled ? D(osc) : NULL;
        t.out_shift = scaled ? D(osh) : NULL;
        Act *q = DX(qkv), *dq = DX(dqkv);
        be->attention_forward(be, &t, q, act_at(be, q, w), act_at(be, q, 2 * w), DX(out), saved[side_], scratch[side_]);
        be->attention_backward(be, &t, q, act_at(be, q, w), act_at(be, q, 2 * w), saved[side_], DX(dout), dq,
                               act_at(be, dq, w), act_at(be, dq, 2 * w), DX(dkb), scaled ? D(dosc) : NULL,
                               scaled ? D(dosh) : NULL, scratch[side_]);
        if (side_) backend_cuda_cost_stop(gpu_spec_find("h100"), &r);
    }
    // At d = 16 the tensor-core kernels read Q, K, V, dout from the bf16 buffers: the only
    // staging is the key bias (twice) and its gradient.
    assert_int_equal(calls_with(&r, "flash_tc_") > 0, d == 16);
    if (d == 16) assert_int_equal(calls_with(&r, "act_widen_kernel") + calls_with(&r, "act_round_kernel"), 3);
    expect_act(f, &out, TOL, "attention_forward");
    expect_act(f, &dqkv, TOL, "attention_backward dq|dk|dv");
    expect_act(f, &dkb, TOL, "attention_backward dkey_bias");
    if (scaled) {
        expect_close(f, &dosc, TOL, "attention_backward dout_scale");
        expect_close(f, &dosh, TOL, "attention_backward dout_shift");
    }
    Buf *fs[] = {&osc, &osh, &dosc, &dosh};
    for (size_t i = 0; i < 4; i++) buf_free(f, fs[i]);
    for (int i = 0; i < 2; i++) {
        Backend *be = i ? f->gpu : f->cpu;
        be->free(be, saved[i]);
        be->free(be, scratch[i]);
    }
    ABuf *acts[] = {&qkv, &dqkv, &kb, &dkb, &out, &dout};
    for (size_t i = 0; i < 6; i++) abuf_free(f, acts[i]);
    ibuf_free(f, &M);
}
static void test_attention(void **state) {
    attention_case(*state, 8, 0);
    attention_case(*state, 16, 0);
    attention_case(*state, 16, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backend_stores_bf16),
        cmocka_unit_test(test_host_boundary_rounds_to_nearest_even),
        cmocka_unit_test(test_matmuls),
        cmocka_unit_test(test_weight_copy_follows_writes),
        cmocka_unit_test(test_linear_layers),
        cmocka_unit_test(test_vocabulary_head_padded),
        cmocka_unit_test(test_elementwise),
        cmocka_unit_test(test_gelu_vectorised),
        cmocka_unit_test(test_head_expand),
        cmocka_unit_test(test_gather_scatter_rows),
        cmocka_unit_test(test_layernorms),
        cmocka_unit_test(test_embeddings_and_loss),
        cmocka_unit_test(test_attention),
    };
    return cmocka_run_group_tests(tests, setup_act, teardown);
}
