// The CPU backend's ISA levels (kernels/cpu/cpu_isa.h) against each other: every dispatched op
// runs on a backend at the fastest level this CPU supports (the default) and on one forced to
// each lower level (MHE_CPU_ISA), on the same inputs, in fp32 and in bf16 storage.  On an
// AVX-512 machine that is avx512 vs avx2 and vs baseline; on an AVX2-only one avx2 vs baseline.
// Expected differences, and why:
//   bit for bit: every op whose element math is the same expression at every level — the
//     elementwise ops, GELU, tanh, dropout (the same 64-bit hash), AdamW, LAMB, bias, head
//     broadcast, embeddings, the residual add and the conversions to and from bf16.  The build contracts nothing
//     (ISO C mode: -ffp-contract=off), fmaf is fused at every level (glibc's exact software
//     call at the baseline, which lacks FMA), sqrt and division are IEEE, so only the vector
//     width differs.  Also sums that run down columns, one lane per column, rows in order
//     (bias_backward, LayerNorm's dbeta, head_expand_backward's and embedding_backward's, the
//     attention's d out_shift).
//   reassociation: sums along a row under `omp simd reduction` add as many partial sums as
//     the level's vectors have lanes, so their rounding differs between levels.  In double
//     (LayerNorm's statistics and backward sums, fused or not, the cross-entropy's sum of exps, sum_squares)
//     the difference almost never survives the rounding to fp32, but nothing guarantees it:
//     fp32 results within 1e-6 of the output's RMS (1e-7 for sum_squares).  In fp32 (the
//     attention cores' row sums and rowsum(P ⊙ dP)): outputs within 1e-6 relative (Frobenius;
//     a few ulps of a sum, carried through the products; ~2e-7 seen).  bf16 results of those
//     ops within the same plus one bf16 ulp (2^-7 of the value: a sum an ulp off rounds to the
//     neighbour when it lies near a tie).  The attention core in bf16 also rounds P and dS to
//     bf16 before its products, so an element that rounds the other way moves a product by
//     2^-8 of one term: 1e-3 relative (Frobenius) there (~1e-4 seen).
// Seen on this project's AVX-512 machine (not relied on): baseline and avx2 agree with each
// other bit for bit, and differ from avx512 in the attention cores only.

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/ops.h"

static const char *const LEVELS[] = {"avx512", "avx2", "baseline"};  // highest first
enum { NLEVELS = 3, MAX_OUTS = 12 };

typedef struct {
    const char *top;           // the default level
    int lower[NLEVELS];        // indices into LEVELS of the supported levels below it
    int nlower;
    Backend *be[2][NLEVELS];   // [bf16][0] the default, [bf16][1 + k] lower[k]
} Fixture;

// How an output may differ from the default level's (see the header).
typedef enum { SAME, CLOSE, REL } Kind;
typedef struct {
    const char *name;
    float *v;
    size_t n;
    Kind kind;
    double tol;
    int rounded;  // stored in bf16: CLOSE allows one bf16 ulp more
} Out;
typedef struct {
    Out o[MAX_OUTS];
    int n;
} Outs;

static float *rand_floats(size_t n, uint64_t seed, double scale) {
    float *x = mhe_malloc(n * sizeof *x);
    Rng r = rng_stream(seed, 5, 1);
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * rng_next_normal(&r));
    return x;
}
static float *copy_floats(const float *x, size_t n) {
    float *c = mhe_malloc(n * sizeof *c);
    memcpy(c, x, n * sizeof *c);
    return c;
}
static Act *up(Backend *be, const float *host, size_t n) {
    Act *a = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, a, host, n);
    return a;
}
static Act *alloc_act(Backend *be, size_t n) { return be->alloc(be, n * dtype_size(be->act)); }

// Records an fp32 host result (taking it over).
static void keep_f(Outs *o, const char *name, float *v, size_t n, Kind kind, double tol) {
    assert_true(o->n < MAX_OUTS);
    o->o[o->n++] = (Out){name, v, n, kind, tol, 0};
}
// Records an activation's values and frees it.
static void keep_act(Outs *o, Backend *be, const char *name, Act *a, size_t n, Kind kind, double tol) {
    float *h = mhe_malloc((n ? n : 1) * sizeof *h);
    be->download_act(be, h, a, n);
    be->free(be, a);
    keep_f(o, name, h, n, kind, tol);
    o->o[o->n - 1].rounded = be->act == DT_BF16;
}
static void outs_free(Outs *o) {
    for (int i = 0; i < o->n; i++) free(o->o[i].v);
}

static double rms(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)(n ? n : 1));
}

// got (a lower level) against want (the default level), as want->kind says.
static void compare(const char *where, const Out *got, const Out *want) {
    assert_string_equal(got->name, want->name);
    assert_int_equal(got->n, want->n);
    const size_t n = want->n;
    size_t equal = 0;
    for (size_t i = 0; i < n; i++) equal += memcmp(&got->v[i], &want->v[i], sizeof(float)) == 0;
    if (want->kind == SAME) {
        print_message("  %-36s %-26s bit for bit: %zu of %zu equal\n", where, want->name, equal, n);
        if (equal != n)
            for (size_t i = 0; i < n; i++)
                if (memcmp(&got->v[i], &want->v[i], sizeof(float)) != 0)
                    fail_msg("%s: %s differs at %zu: %.9g vs %.9g", where, want->name, i, got->v[i], want->v[i]);
    } else if (want->kind == CLOSE) {
        const double tol = want->tol * rms(want->v, n);
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            const double d = fabs((double)got->v[i] - want->v[i]);
            const double allowed = tol + (want->rounded ? ldexp(fabs((double)want->v[i]), -7) : 0.0);
            if (!(d <= allowed))
                fail_msg("%s: %s at %zu: %.9g vs %.9g (allowed %.2e)", where, want->name, i, got->v[i], want->v[i], allowed);
            worst = d / allowed > worst ? d / allowed : worst;
        }
        print_message("  %-36s %-26s within %.0e RMS%s: worst %.2f of allowed, %zu of %zu equal\n", where,
                      want->name, want->tol, want->rounded ? " + 1 bf16 ulp" : "", worst, equal, n);
    } else {
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            num += ((double)got->v[i] - want->v[i]) * ((double)got->v[i] - want->v[i]);
            den += (double)want->v[i] * want->v[i];
        }
        const double e = sqrt(num / (den > 0 ? den : 1));
        print_message("  %-36s %-26s relative error %.2e (allowed %.0e), %zu of %zu equal\n", where, want->name, e,
                      want->tol, equal, n);
        if (!(e <= want->tol)) fail_msg("%s: %s relative error %.3e > %.0e", where, want->name, e, want->tol);
    }
}

// Runs one case (the same inputs every call) on the default backend and on every lower level,
// in fp32 and in bf16, and compares every output.
typedef void (*CaseFn)(Backend *be, Outs *o);
static void run_case(const Fixture *fx, const char *op, CaseFn fn) {
    for (int bf = 0; bf < 2; bf++) {
        Outs want = {0};
        fn(fx->be[bf][0], &want);
        for (int k = 0; k < fx->nlower; k++) {
            Outs got = {0};
            fn(fx->be[bf][1 + k], &got);
            assert_int_equal(got.n, want.n);
            char where[96];
            snprintf(where, sizeof where, "%s %s: %s vs %s", op, bf ? "bf16" : "fp32", LEVELS[fx->lower[k]], fx->top);
            for (int i = 0; i < want.n; i++) compare(where, &got.o[i], &want.o[i]);
            outs_free(&got);
        }
        outs_free(&want);
    }
}

// ---- cases ----

enum { N_ROWS = 301, C_COLS = 320 };  // rows over the parallel split; 320 = 20 zmm, 40 ymm
#define NC ((size_t)N_ROWS * C_COLS)

// bias, add, the fp32 vector ops (optimizer and head-scale arithmetic), bias_backward.
static void case_dense(Backend *be, Outs *o) {
    float *x = rand_floats(NC, 1, 2.0), *y = rand_floats(NC, 2, 1.0), *bias = rand_floats(C_COLS, 3, 1.0);
    Act *ax = up(be, x, NC), *ay = up(be, y, NC), *as = alloc_act(be, NC);
    be->bias_add(be, ay, bias, N_ROWS, C_COLS);
    be->add(be, ax, ay, as, NC);
    float *db = mhe_calloc(C_COLS, sizeof *db);
    be->bias_backward(be, ax, N_ROWS, C_COLS, db);
    float *f = copy_floats(x, NC), *g = copy_floats(y, NC);
    be->axpy(be, 0.37f, y, f, NC);
    be->scale(be, f, -1.3f, NC);
    be->add_scalar(be, f, 0.25f, f, NC);
    be->mul_acc(be, x, y, f, NC);
    be->mul(be, f, y, g, NC);
    keep_act(o, be, "bias_add", ay, NC, SAME, 0);
    keep_act(o, be, "add", as, NC, SAME, 0);
    keep_f(o, "bias_backward", db, C_COLS, SAME, 0);
    keep_f(o, "axpy scale add_scalar mul_acc", f, NC, SAME, 0);
    keep_f(o, "mul", g, NC, SAME, 0);
    be->free(be, ax);
    free(x), free(y), free(bias);
}

// head_expand (query scale and shift) forward and backward.
static void case_heads(Backend *be, Outs *o) {
    const int n = 4, d = 72, ldx = 2 * d + 8;
    const size_t nx = (size_t)N_ROWS * ldx, no = (size_t)N_ROWS * n * d;
    float *x = rand_floats(nx, 11, 1.0), *mul = rand_floats((size_t)n * d, 12, 1.0), *add = rand_floats((size_t)n * d, 13, 1.0);
    float *dout = rand_floats(no, 14, 1.0), *dx0 = rand_floats(nx, 15, 1.0);
    Act *ax = up(be, x, nx), *ao = alloc_act(be, no), *ad = up(be, dout, no), *adx = up(be, dx0, nx);
    float *dm = mhe_calloc((size_t)n * d, sizeof *dm), *da = mhe_calloc((size_t)n * d, sizeof *da);
    be->head_expand(be, ax, ldx, mul, add, N_ROWS, n, d, ao);
    be->head_expand_backward(be, ad, ax, ldx, mul, N_ROWS, n, d, adx, 1, dm, da);
    keep_act(o, be, "head_expand", ao, no, SAME, 0);
    keep_act(o, be, "head_expand_backward dx", adx, nx, SAME, 0);
    keep_f(o, "head_expand_backward dmul", dm, (size_t)n * d, SAME, 0);
    keep_f(o, "head_expand_backward dadd", da, (size_t)n * d, SAME, 0);
    be->free(be, ax), be->free(be, ad);
    free(x), free(mul), free(add), free(dout), free(dx0);
}

// GELU (erf, tanh) and tanh, forward and backward (dx in place of dy); dropout, in place too.
static void case_activations(Backend *be, Outs *o) {
    const size_t n = NC + 7;  // a vector tail
    float *x = rand_floats(n, 21, 3.0), *dy = rand_floats(n, 22, 1.0);
    static const char *const names[3][2] = {{"gelu erf", "gelu erf backward"}, {"gelu tanh", "gelu tanh backward"},
                                            {"tanh", "tanh backward"}};
    Act *ax = up(be, x, n);
    for (int k = 0; k < 3; k++) {
        Act *ay = alloc_act(be, n), *ad = up(be, dy, n);
        if (k < 2) {
            be->gelu_forward(be, k ? GELU_TANH : GELU_ERF, ax, ay, n);
            be->gelu_backward(be, k ? GELU_TANH : GELU_ERF, ax, ad, ad, n);
        } else {
            be->tanh_forward(be, ax, ay, n);
            be->tanh_backward(be, ay, ad, ad, n);
        }
        keep_act(o, be, names[k][0], ay, n, SAME, 0);
        keep_act(o, be, names[k][1], ad, n, SAME, 0);
    }
    Act *ay = alloc_act(be, n);
    be->dropout(be, ax, ay, n, 0.1f, 1234, 56);
    be->dropout(be, ax, ax, n, 0.3f, 99, (uint64_t)1 << 40);  // in place, offset past 2^32
    keep_act(o, be, "dropout", ay, n, SAME, 0);
    keep_act(o, be, "dropout in place", ax, n, SAME, 0);
    free(x), free(dy);
}

// LayerNorm forward and backward (separate buffers, accumulating; then in place).
static void case_layernorm(Backend *be, Outs *o) {
    float *x = rand_floats(NC, 31, 2.0), *gamma = rand_floats(C_COLS, 32, 1.0), *beta = rand_floats(C_COLS, 33, 1.0);
    float *dy = rand_floats(NC, 34, 1.0), *dx0 = rand_floats(NC, 35, 1.0);
    for (int c = 0; c < C_COLS; c++) x[c] += 3.0f;  // a row with a mean far from 0
    float *mean = mhe_malloc(N_ROWS * sizeof *mean), *rstd = mhe_malloc(N_ROWS * sizeof *rstd);
    float *dg = mhe_calloc(C_COLS, sizeof *dg), *db = mhe_calloc(C_COLS, sizeof *db);
    Act *ax = up(be, x, NC), *ay = alloc_act(be, NC), *ady = up(be, dy, NC), *adx = up(be, dx0, NC);
    be->layernorm_forward(be, ax, gamma, beta, N_ROWS, C_COLS, 1e-5f, ay, mean, rstd);
    be->layernorm_backward(be, ady, ax, gamma, mean, rstd, N_ROWS, C_COLS, adx, 1, dg, db);
    keep_act(o, be, "layernorm y", ay, NC, CLOSE, 1e-6);
    keep_f(o, "layernorm mean", mean, N_ROWS, CLOSE, 1e-6);
    keep_f(o, "layernorm rstd", rstd, N_ROWS, CLOSE, 1e-6);
    keep_act(o, be, "layernorm dx", adx, NC, CLOSE, 1e-6);
    keep_f(o, "layernorm dgamma", dg, C_COLS, CLOSE, 1e-6);
    keep_f(o, "layernorm dbeta", db, C_COLS, SAME, 0);  // Σ dy per column: no row sum inside
    // In place: y = x, dx = dy.
    float *m2 = mhe_malloc(N_ROWS * sizeof *m2), *r2 = mhe_malloc(N_ROWS * sizeof *r2);
    Act *ax2 = up(be, x, NC);
    be->layernorm_forward(be, ax, gamma, beta, N_ROWS, C_COLS, 1e-5f, ax, m2, r2);
    be->layernorm_backward(be, ady, ax2, gamma, m2, r2, N_ROWS, C_COLS, ady, 0, NULL, NULL);
    keep_act(o, be, "layernorm y in place", ax, NC, CLOSE, 1e-6);
    keep_act(o, be, "layernorm dx = dy", ady, NC, CLOSE, 1e-6);
    be->free(be, ax2);
    free(m2), free(r2), free(x), free(gamma), free(beta), free(dy), free(dx0);
}

// The fused residual step and its backward (s = x + dropout(r), y = LayerNorm(s); dx and
// dr = dropout(dx)): the dropout and the adds bit for bit, LayerNorm's sums reassociated.
static void case_residual(Backend *be, Outs *o) {
    float *x = rand_floats(NC, 81, 1.0), *r = rand_floats(NC, 82, 2.0), *dy = rand_floats(NC, 83, 1.0);
    float *gamma = rand_floats(C_COLS, 84, 1.0), *beta = rand_floats(C_COLS, 85, 1.0);
    float *mean = mhe_malloc(N_ROWS * sizeof *mean), *rstd = mhe_malloc(N_ROWS * sizeof *rstd);
    float *dg = mhe_calloc(C_COLS, sizeof *dg), *db = mhe_calloc(C_COLS, sizeof *db);
    Act *ax = up(be, x, NC), *as = up(be, r, NC), *ay = alloc_act(be, NC), *ady = up(be, dy, NC), *adr = alloc_act(be, NC);
    be->residual_layernorm_forward(be, ax, as, 0.1f, 3, 4, gamma, beta, N_ROWS, C_COLS, 1e-5f, as, ay, mean, rstd);
    be->layernorm_backward_dropout(be, ady, as, gamma, mean, rstd, N_ROWS, C_COLS, ady, 0, dg, db, 0.1f, 5, 6, adr);
    keep_act(o, be, "residual s", as, NC, SAME, 0);
    keep_act(o, be, "residual y", ay, NC, CLOSE, 1e-6);
    keep_f(o, "residual mean", mean, N_ROWS, CLOSE, 1e-6);
    keep_f(o, "residual rstd", rstd, N_ROWS, CLOSE, 1e-6);
    keep_act(o, be, "ln_backward_dropout dx", ady, NC, CLOSE, 1e-6);
    keep_act(o, be, "ln_backward_dropout dr", adr, NC, CLOSE, 1e-6);
    keep_f(o, "ln_backward_dropout dgamma", dg, C_COLS, CLOSE, 1e-6);
    keep_f(o, "ln_backward_dropout dbeta", db, C_COLS, SAME, 0);
    be->free(be, ax);
    free(x), free(r), free(dy), free(gamma), free(beta);
}

// Embeddings forward and backward.
static void case_embedding(Backend *be, Outs *o) {
    const int B = 3, T = 100, D = 256, V = 60;
    int32_t ids[300], tids[300];
    for (int i = 0; i < B * T; i++) ids[i] = (i * 13) % V, tids[i] = i % 2;
    float *word = rand_floats((size_t)V * D, 41, 1.0), *pos = rand_floats((size_t)T * D, 42, 1.0);
    float *type = rand_floats(2 * (size_t)D, 43, 1.0), *dout = rand_floats((size_t)B * T * D, 44, 1.0);
    const size_t no = (size_t)B * T * D;
    Act *ao = alloc_act(be, no), *ad = up(be, dout, no);
    float *dw = mhe_calloc((size_t)V * D, sizeof *dw), *dp = mhe_calloc((size_t)T * D, sizeof *dp);
    float *dt = mhe_calloc(2 * (size_t)D, sizeof *dt);
    be->embedding_forward(be, ids, tids, word, pos, type, B, T, D, ao);
    be->embedding_backward(be, ad, ids, tids, B, T, D, dw, dp, dt);
    keep_act(o, be, "embedding", ao, no, SAME, 0);
    keep_f(o, "embedding_backward dword", dw, (size_t)V * D, SAME, 0);
    keep_f(o, "embedding_backward dpos", dp, (size_t)T * D, SAME, 0);
    keep_f(o, "embedding_backward dtype", dt, 2 * (size_t)D, SAME, 0);
    be->free(be, ad);
    free(word), free(pos), free(type), free(dout);
}

// The softmax cross-entropy: loss, lse, dlogits (separate, then in place of the logits).
static void case_cross_entropy(Backend *be, Outs *o) {
    const int N = 97, V = 3001;
    const size_t n = (size_t)N * V;
    int32_t labels[97];
    for (int i = 0; i < N; i++) labels[i] = i % 9 == 4 ? -1 : (i * 31) % V;
    float *z = rand_floats(n, 51, 4.0);
    float *loss = mhe_malloc(N * sizeof *loss), *lse = mhe_malloc(N * sizeof *lse);
    Act *az = up(be, z, n), *ag = alloc_act(be, n);
    be->cross_entropy_forward(be, az, labels, N, V, V, loss, lse);
    be->cross_entropy_backward(be, az, lse, labels, N, V, V, 1.0f / 80, ag);
    keep_f(o, "cross_entropy loss", loss, N, CLOSE, 1e-6);
    keep_f(o, "cross_entropy lse", lse, N, CLOSE, 1e-6);
    keep_act(o, be, "cross_entropy dlogits", ag, n, CLOSE, 1e-6);
    free(z);
    be->free(be, az);
}

// AdamW and LAMB element updates, sum of squares (fp32 parameters at every precision).
static void case_optim(Backend *be, Outs *o) {
    const size_t n = (1u << 16) + 13;
    float *p = rand_floats(n, 61, 0.5), *g = rand_floats(n, 62, 1e-2), *m = rand_floats(n, 63, 1e-3);
    float *v = rand_floats(n, 64, 1e-3), *u = mhe_calloc(n, sizeof *u);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    float *p2 = copy_floats(p, n), *m2 = copy_floats(m, n), *v2 = copy_floats(v, n);
    be->adamw_update(be, p, g, m, v, n, 0.9f, 0.999f, 1e-8f, 1e-3f, 1e-5f, 0.3f, 0.5f);
    be->lamb_direction(be, p2, g, m2, v2, u, n, 0.9f, 0.999f, 1e-6f, 0.01f, 0.19f, 0.0297f, 2.0f);
    float *ss = mhe_malloc(sizeof *ss);
    float *big = rand_floats((size_t)3 << 20, 65, 1.0);  // above the threshold of the parallel sum
    ss[0] = (float)(be->sum_squares(be, big, (size_t)3 << 20) / (double)((size_t)3 << 20));
    keep_f(o, "adamw p", p, n, SAME, 0);
    keep_f(o, "adamw m", m, n, SAME, 0);
    keep_f(o, "adamw v", v, n, SAME, 0);
    keep_f(o, "lamb direction", u, n, SAME, 0);
    keep_f(o, "lamb m", m2, n, SAME, 0);
    keep_f(o, "lamb v", v2, n, SAME, 0);
    keep_f(o, "sum_squares (double)", ss, 1, CLOSE, 1e-7);
    free(g), free(p2), free(big);
}

// The attention core, forward and backward, on every AttnShape feature at once: strided q, k, v,
// grouped V heads, key bias, key mask, output scale and shift, causal, dropout; per-head
// (shared = 0) or shared scores.  Its element passes (exp, row sums, dropout, bf16 stores) are
// what the levels compile; its products are oneDNN's at every level.
static int attn_shared;
static void case_attention(Backend *be, Outs *o) {
    AttnShape s = {0};
    s.B = 2, s.T = 72, s.n_heads = 4;
    s.q_heads = s.k_heads = attn_shared ? 1 : 4;
    s.v_heads = 2;
    s.qk_dim = 16, s.v_dim = 24;
    s.ldq = s.q_heads * s.qk_dim + 5, s.ldk = s.k_heads * s.qk_dim + 3, s.ldv = s.v_heads * s.v_dim + 7;
    s.scale = 0.25f;
    s.causal = !attn_shared;
    s.dropout = 0.1f;
    s.seed = 7, s.offset = 11;
    const int BT = s.B * s.T, n = s.n_heads;
    const size_t nq = (size_t)BT * s.ldq, nk = (size_t)BT * s.ldk, nv = (size_t)BT * s.ldv;
    const size_t no = (size_t)BT * n * s.v_dim, nb = (size_t)BT * n, ns = (size_t)n * s.v_dim;
    float *q = rand_floats(nq, 71, 1.0), *k = rand_floats(nk, 72, 1.0), *v = rand_floats(nv, 73, 1.0);
    float *dout = rand_floats(no, 74, 1.0), *kb = rand_floats(nb, 75, 0.5);
    float *osc = rand_floats(ns, 76, 1.0), *osh = rand_floats(ns, 77, 1.0);
    int32_t km[144];
    for (int i = 0; i < BT; i++) km[i] = i % 7 != 3;
    s.key_mask = km, s.out_scale = osc, s.out_shift = osh;
    size_t saved_n, scratch_n;
    be->attention_sizes(be, &s, &saved_n, &scratch_n);
    float *saved = mhe_calloc(saved_n, sizeof(float)), *scratch = mhe_calloc(scratch_n, sizeof(float));
    Act *aq = up(be, q, nq), *ak = up(be, k, nk), *av = up(be, v, nv), *ad = up(be, dout, no), *akb = up(be, kb, nb);
    Act *ao = alloc_act(be, no), *adq = up(be, q, nq), *adk = up(be, k, nk), *adv = up(be, v, nv);
    Act *adkb = alloc_act(be, nb);
    float *dsc = mhe_calloc(ns, sizeof *dsc), *dsh = mhe_calloc(ns, sizeof *dsh);
    s.key_bias = akb;
    be->attention_forward(be, &s, aq, ak, av, ao, saved, scratch);
    be->attention_backward(be, &s, aq, ak, av, saved, ad, adq, adk, adv, adkb, dsc, dsh, scratch);
    // See the header: fp32 reassociated row sums; bf16 also P and dS rounded either way.
    const double tol = be->act == DT_BF16 ? 1e-3 : 1e-6;
    keep_act(o, be, "attention out", ao, no, REL, tol);
    keep_act(o, be, "attention dq", adq, nq, REL, tol);
    keep_act(o, be, "attention dk", adk, nk, REL, tol);
    keep_act(o, be, "attention dv", adv, nv, REL, tol);
    keep_act(o, be, "attention dkey_bias", adkb, nb, REL, tol);
    keep_f(o, "attention dout_scale", dsc, ns, REL, tol);
    keep_f(o, "attention dout_shift", dsh, ns, SAME, 0);  // Σ dO per column: no softmax inside
    float *lse = mhe_malloc((size_t)BT * n * sizeof *lse);  // the saved row log-sum-exps
    memcpy(lse, saved, (size_t)BT * n * sizeof *lse);
    keep_f(o, "attention lse", lse, (size_t)BT * n, CLOSE, 1e-6);
    be->free(be, aq), be->free(be, ak), be->free(be, av), be->free(be, ad), be->free(be, akb);
    free(saved), free(scratch), free(q), free(k), free(v), free(dout), free(kb), free(osc), free(osh);
}

// A backend at the level (NULL: the default) with the attention core (NULL: the default).
static Backend *make_backend(const char *level, int bf16, const char *core) {
    if (level) setenv("MHE_CPU_ISA", level, 1);
    if (core) setenv("MHE_CPU_ATTENTION", core, 1);
    Backend *be = backend_cpu_create_for(0, bf16);
    unsetenv("MHE_CPU_ISA");
    unsetenv("MHE_CPU_ATTENTION");
    if (level) assert_string_equal(backend_cpu_isa(be), level);
    return be;
}

static void fixture_make(Fixture *fx, const char *core) {
    for (int bf = 0; bf < 2; bf++) {
        fx->be[bf][0] = make_backend(NULL, bf, core);
        for (int k = 0; k < fx->nlower; k++) fx->be[bf][1 + k] = make_backend(LEVELS[fx->lower[k]], bf, core);
    }
}
static void fixture_drop(Fixture *fx) {
    for (int bf = 0; bf < 2; bf++)
        for (int k = 0; k <= fx->nlower; k++) fx->be[bf][k]->destroy(fx->be[bf][k]);
}

// bf16 GELU reads tables (cpu_activation.c), gathered 16 at a time at the AVX-512 level: every bf16
// input that is not a NaN (±0, subnormals, ±inf, the largest values), with gradients that
// include ±inf and 0 (so inf × 0 makes NaNs for the vector rounding's NaN branch), must give the
// lower levels' scalar lookups bit for bit.  fp32 storage has no tables: its GELU is the
// random-input case above.
static void case_gelu_bf16_inputs(Backend *be, Outs *o) {
    if (be->act != DT_BF16) return;
    size_t n = 0;
    float *x = mhe_malloc(65536 * sizeof *x), *dy = rand_floats(65536, 23, 1.0);
    for (uint32_t h = 0; h < 65536; h++) {
        const uint32_t bits = h << 16;
        float v;
        memcpy(&v, &bits, sizeof v);
        if (isnan(v)) continue;
        x[n] = v;
        if (n % 97 == 0) dy[n] = n % 3 == 0 ? INFINITY : n % 3 == 1 ? -INFINITY : 0.0f;
        n++;
    }
    for (int k = 0; k < 2; k++) {
        const GeluKind kind = k ? GELU_TANH : GELU_ERF;
        Act *ax = up(be, x, n), *ay = alloc_act(be, n), *ad = up(be, dy, n);
        be->gelu_forward(be, kind, ax, ay, n);
        be->gelu_backward(be, kind, ax, ad, ad, n);
        keep_act(o, be, k ? "gelu tanh, every bf16 input" : "gelu erf, every bf16 input", ay, n, SAME, 0);
        keep_act(o, be, k ? "gelu tanh backward, every bf16 input" : "gelu erf backward, every bf16 input", ad, n,
                 SAME, 0);
        be->free(be, ax);
    }
    free(x), free(dy);
}

static void test_dense(void **state) { run_case(*state, "dense", case_dense); }
static void test_gelu_bf16_inputs(void **state) { run_case(*state, "gelu tables", case_gelu_bf16_inputs); }
static void test_heads(void **state) { run_case(*state, "head_expand", case_heads); }
static void test_activations(void **state) { run_case(*state, "activations", case_activations); }
static void test_layernorm(void **state) { run_case(*state, "layernorm", case_layernorm); }
static void test_residual(void **state) { run_case(*state, "residual", case_residual); }
static void test_embedding(void **state) { run_case(*state, "embedding", case_embedding); }
static void test_cross_entropy(void **state) { run_case(*state, "cross_entropy", case_cross_entropy); }
static void test_optim(void **state) { run_case(*state, "optim", case_optim); }

// Both cores in both precisions (the fixture's backends have the defaults: ref in fp32, fused
// in bf16), per-head and shared scores.
static void test_attention(void **state) {
    const Fixture *base = *state;
    static const char *const cores[] = {"fused", "ref"};
    for (int c = 0; c < 2; c++) {
        Fixture fx = *base;
        fixture_make(&fx, cores[c]);
        for (attn_shared = 0; attn_shared < 2; attn_shared++) {
            char op[48];
            snprintf(op, sizeof op, "attention %s%s", cores[c], attn_shared ? " shared" : "");
            run_case(&fx, op, case_attention);
        }
        fixture_drop(&fx);
    }
}

// The levels: the default is the highest this CPU supports (setup checks), the baseline runs
// everywhere, and an x86-64 CPU with AVX2 has a lower level to compare with (a build for
// another architecture has the baseline only).
static void test_levels(void **state) {
    const Fixture *fx = *state;
    print_message("default level %s; compared with:", fx->top);
    for (int k = 0; k < fx->nlower; k++) print_message(" %s", LEVELS[fx->lower[k]]);
    print_message("\n");
    assert_true(backend_cpu_isa_supported("baseline"));
    assert_false(backend_cpu_isa_supported("avx1024"));
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) assert_true(fx->nlower >= 1);
#endif
}

static int setup(void **state) {
    // The levels are this test's to choose: a caller's MHE_CPU_ISA (a whole tier run at avx2)
    // would make the "default" backend a lower level.
    unsetenv("MHE_CPU_ISA");
    Fixture *fx = mhe_calloc(1, sizeof *fx);
    int first = -1;
    for (int i = 0; i < NLEVELS; i++) {
        if (!backend_cpu_isa_supported(LEVELS[i])) continue;
        if (first < 0)
            first = i;
        else
            fx->lower[fx->nlower++] = i;
    }
    if (first < 0) return -1;
    fx->top = LEVELS[first];
    fixture_make(fx, NULL);
    if (strcmp(backend_cpu_isa(fx->be[0][0]), fx->top) != 0) return -1;  // the default is the highest
    *state = fx;
    return 0;
}
static int teardown(void **state) {
    fixture_drop(*state);
    free(*state);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),        cmocka_unit_test(test_dense),     cmocka_unit_test(test_heads),
        cmocka_unit_test(test_activations),   cmocka_unit_test(test_layernorm), cmocka_unit_test(test_residual),
        cmocka_unit_test(test_embedding),     cmocka_unit_test(test_cross_entropy), cmocka_unit_test(test_optim),
        cmocka_unit_test(test_attention),     cmocka_unit_test(test_gelu_bf16_inputs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
