// The fp32 reads of every op, declared from ops.h's contract (bf16 mode): the other half of the
// lean twins of cuda_mirror.cu.  A segment may only stop storing its fp32 data while nothing
// reads it, so each op, before it runs, names the fp32 inputs it reads (cuda_mirror_read widens
// any stale part and pins that segment dual).  Matmul operands are not fp32 reads in bf16 mode
// (they come from the twins); an accumulating output (beta != 0, `accumulate`, parameter
// gradients) is.  Where ops.h leaves an extent to device data (gathered rows, embedding rows),
// the whole allocation is declared.  The optimizer ops end an epoch: segments written lean-capably
// and never read in fp32 since the last one turn lean.
//
// The wrappers sit over the op table the other files install (ctx->inner keeps it) and pass the
// outer Backend on, so ops that call other ops (linear's fallback) are declared there too.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_internal.h"

static Backend *inner(Backend *be) { return cuda_ctx(be)->inner; }
static void rd(Backend *be, const void *p, size_t floats) {
    if (p && floats) cuda_mirror_read(be, p, floats * sizeof(float));
}
// The same for an input the op may read from its twin instead.
static void rt(Backend *be, const void *p, size_t floats) {
    cuda_mirror_read_or_twin(be, static_cast<const float *>(p), floats);
}
// A [rows, cols] operand with row stride ld: the floats it spans.
static size_t span(size_t rows, size_t cols, size_t ld) { return rows && cols ? (rows - 1) * ld + cols : 0; }

static void w_download(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_mirror_read(be, src, bytes);
    inner(be)->download(be, dst, src, bytes);
}
static void w_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_mirror_read(be, src, bytes);
    inner(be)->copy(be, dst, src, bytes);
}
// An accumulation into a C held only by its twin adds into the twin (cuda_backend.cu): not an
// fp32 read for the lean decision.
static void w_matmul(Backend *be, int ta, int tb, int M, int N, int K, float alpha, MatIn A, MatIn B, float beta,
                     MatOut C) {
    if (beta != 0.0f) rt(be, C.p, span(M, N, C.ld));
    inner(be)->matmul(be, ta, tb, M, N, K, alpha, A, B, beta, C);
}
static void w_matmul_batched(Backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A,
                             int lda, long sa, const float *B, int ldb, long sb, float beta, float *C, int ldc,
                             long sc, int batch) {
    if (beta != 0.0f && batch > 0) rd(be, C, (size_t)(batch - 1) * sc + span(M, N, ldc));
    inner(be)->matmul_batched(be, ta, tb, M, N, K, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, batch);
}
static void w_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                             Act *y) {
    rd(be, b, out);
    inner(be)->linear_forward(be, x, W, b, N, in, out, y);
}
static void w_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
                              Act *dx, int accumulate, float *dW, float *db) {
    rd(be, dW, (size_t)out * in);
    rd(be, db, out);
    inner(be)->linear_backward(be, dy, x, W, N, in, out, dx, accumulate, dW, db);
}
// The fused paths read the bias and u from twins; their fallbacks call the wrapped ops.
static void w_linear_gelu_forward(Backend *be, GeluKind kind, const Act *x, const float *W, const float *b, int N,
                                  int in, int out, Act *u, Act *g) {
    rd(be, b, out);
    inner(be)->linear_gelu_forward(be, kind, x, W, b, N, in, out, u, g);
}
static void w_linear_backward_gelu(Backend *be, GeluKind kind, const Act *dy, const Act *x, const float *W, int N,
                                   int in, int out, const Act *u, Act *dx, float *dW, float *db) {
    rd(be, dW, (size_t)out * in);
    rd(be, db, out);
    inner(be)->linear_backward_gelu(be, kind, dy, x, W, N, in, out, u, dx, dW, db);
}
static void w_bias_add(Backend *be, Act *y, const float *bias, int N, int C) {
    rd(be, y, (size_t)N * C);
    rd(be, bias, C);
    inner(be)->bias_add(be, y, bias, N, C);
}
static void w_bias_backward(Backend *be, const Act *dy, int N, int C, float *dbias) {
    rd(be, dy, (size_t)N * C);
    rd(be, dbias, C);
    inner(be)->bias_backward(be, dy, N, C, dbias);
}
static void w_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) {
    rd(be, a, n);
    rd(be, b, n);
    inner(be)->add(be, a, b, out, n);
}
static void w_axpy(Backend *be, float alpha, const float *x, float *y, size_t n) {
    rd(be, x, n);
    rd(be, y, n);
    inner(be)->axpy(be, alpha, x, y, n);
}
static void w_scale(Backend *be, float *x, float alpha, size_t n) {
    rd(be, x, n);
    inner(be)->scale(be, x, alpha, n);
}
static void w_add_scalar(Backend *be, const float *x, float c, float *out, size_t n) {
    rd(be, x, n);
    inner(be)->add_scalar(be, x, c, out, n);
}
static void w_mul(Backend *be, const float *a, const float *b, float *out, size_t n) {
    rd(be, a, n);
    rd(be, b, n);
    inner(be)->mul(be, a, b, out, n);
}
static void w_mul_acc(Backend *be, const float *a, const float *b, float *out, size_t n) {
    rd(be, a, n);
    rd(be, b, n);
    rd(be, out, n);
    inner(be)->mul_acc(be, a, b, out, n);
}
// head_expand(_backward(_prod)) read x and dout from their twins once those are stale
// (cuda_elementwise.cu).
static void w_head_expand(Backend *be, const Act *x, int ldx, const float *mul, const float *add, int N, int n,
                          int d, Act *out) {
    rt(be, x, span(N, d, ldx));
    rd(be, mul, (size_t)n * d);
    rd(be, add, (size_t)n * d);
    inner(be)->head_expand(be, x, ldx, mul, add, N, n, d, out);
}
static void w_head_expand_backward(Backend *be, const Act *dout, const Act *x, int ldx, const float *mul, int N,
                                   int n, int d, Act *dx, int accumulate, float *dmul, float *dadd) {
    rt(be, dout, (size_t)N * n * d);
    if (dmul) rt(be, x, span(N, d, ldx));
    rd(be, mul, (size_t)n * d);
    if (accumulate) rd(be, dx, span(N, d, ldx));
    rd(be, dmul, (size_t)n * d);
    rd(be, dadd, (size_t)n * d);
    inner(be)->head_expand_backward(be, dout, x, ldx, mul, N, n, d, dx, accumulate, dmul, dadd);
}
static void w_head_expand_backward_prod(Backend *be, const Act *dout, const Act *x, int ldx, const float *mul,
                                        const float *f, const float *g, int N, int n, int d, Act *dx, int accumulate,
                                        float *df, float *dg) {
    rt(be, dout, (size_t)N * n * d);
    if (df || dg) {
        rt(be, x, span(N, d, ldx));
        rd(be, f, (size_t)n * d);
        rd(be, g, (size_t)n * d);
    }
    rd(be, mul, (size_t)n * d);
    if (accumulate) rd(be, dx, span(N, d, ldx));
    rd(be, df, (size_t)n * d);
    rd(be, dg, (size_t)n * d);
    inner(be)->head_expand_backward_prod(be, dout, x, ldx, mul, f, g, N, n, d, dx, accumulate, df, dg);
}
static void w_head_scales(Backend *be, const float *e, size_t lde, int rows, int w, int prod, float *s, size_t lds) {
    for (int r = 0; r < rows; r++) rd(be, e + (size_t)r * lde, 3 * (size_t)w);
    inner(be)->head_scales(be, e, lde, rows, w, prod, s, lds);
}
static void w_gather_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst,
                          int src_rows) {
    rd(be, src, (size_t)src_rows * C);
    inner(be)->gather_rows(be, src, rows, M, C, dst, src_rows);
}
static void w_scatter_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst,
                           int dst_rows) {
    rd(be, src, (size_t)M * C);
    inner(be)->scatter_rows(be, src, rows, M, C, dst, dst_rows);
}
static void w_layernorm_forward(Backend *be, const Act *x, const float *gamma, const float *beta, int N, int C,
                                float eps, Act *y, float *mean, float *rstd) {
    rd(be, x, (size_t)N * C);
    rd(be, gamma, C);
    rd(be, beta, C);
    inner(be)->layernorm_forward(be, x, gamma, beta, N, C, eps, y, mean, rstd);
}
static void w_residual_layernorm_forward(Backend *be, const Act *x, const Act *r, float p, uint64_t seed,
                                         uint64_t offset, const float *gamma, const float *beta, int N, int C,
                                         float eps, Act *s, Act *y, float *mean, float *rstd) {
    // x and r may come from lean twins (cuda_norm_loss.cu)
    rt(be, x, (size_t)N * C);
    rt(be, r, (size_t)N * C);
    rd(be, gamma, C);
    rd(be, beta, C);
    inner(be)->residual_layernorm_forward(be, x, r, p, seed, offset, gamma, beta, N, C, eps, s, y, mean, rstd);
}
static void ln_bw_reads(Backend *be, const Act *dy, const Act *x, const float *gamma, const float *mean,
                        const float *rstd, int N, int C, const Act *dx, int accumulate, const float *dgamma,
                        const float *dbeta) {
    // dy and x may come from lean twins (cuda_norm_loss.cu)
    rt(be, dy, (size_t)N * C);
    rt(be, x, (size_t)N * C);
    rd(be, gamma, C);
    rd(be, mean, N);
    rd(be, rstd, N);
    if (accumulate) rd(be, dx, (size_t)N * C);
    rd(be, dgamma, C);
    rd(be, dbeta, C);
}
static void w_layernorm_backward(Backend *be, const Act *dy, const Act *x, const float *gamma, const float *mean,
                                 const float *rstd, int N, int C, Act *dx, int accumulate, float *dgamma,
                                 float *dbeta) {
    ln_bw_reads(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta);
    inner(be)->layernorm_backward(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta);
}
static void w_layernorm_backward_dropout(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                         const float *mean, const float *rstd, int N, int C, Act *dx, int accumulate,
                                         float *dgamma, float *dbeta, float p, uint64_t seed, uint64_t offset,
                                         Act *dr) {
    ln_bw_reads(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta);
    inner(be)->layernorm_backward_dropout(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta, p, seed,
                                          offset, dr);
}
// GELU may read its inputs from lean twins (cuda_elementwise.cu): not fp32 reads for the decision.
static void w_gelu_forward(Backend *be, GeluKind kind, const Act *x, Act *y, size_t n) {
    rt(be, x, n);
    inner(be)->gelu_forward(be, kind, x, y, n);
}
static void w_gelu_backward(Backend *be, GeluKind kind, const Act *x, const Act *dy, Act *dx, size_t n) {
    rt(be, x, n);
    rt(be, dy, n);
    inner(be)->gelu_backward(be, kind, x, dy, dx, n);
}
static void w_tanh_forward(Backend *be, const Act *x, Act *y, size_t n) {
    rd(be, x, n);
    inner(be)->tanh_forward(be, x, y, n);
}
static void w_tanh_backward(Backend *be, const Act *y, const Act *dy, Act *dx, size_t n) {
    rd(be, y, n);
    rd(be, dy, n);
    inner(be)->tanh_backward(be, y, dy, dx, n);
}
static void w_dropout(Backend *be, const Act *x, Act *y, size_t n, float p, uint64_t seed, uint64_t offset) {
    rt(be, x, n);  // x may come from a lean twin (cuda_elementwise.cu)
    inner(be)->dropout(be, x, y, n, p, seed, offset);
}
static void w_embedding_forward(Backend *be, const int32_t *ids, const int32_t *type_ids, const float *word,
                                const float *pos, const float *type, int B, int T, int D, Act *out) {
    cuda_mirror_read_alloc(be, word);
    rd(be, pos, (size_t)T * D);
    if (type) cuda_mirror_read_alloc(be, type);
    inner(be)->embedding_forward(be, ids, type_ids, word, pos, type, B, T, D, out);
}
static void w_embedding_layernorm_forward(Backend *be, const int32_t *ids, const int32_t *type_ids, const float *word,
                                          const float *pos, const float *type, const float *gamma, const float *beta,
                                          int B, int T, int D, float eps, float p, uint64_t seed, uint64_t offset,
                                          Act *e, Act *y, float *mean, float *rstd) {
    cuda_mirror_read_alloc(be, word);
    rd(be, pos, (size_t)T * D);
    if (type) cuda_mirror_read_alloc(be, type);
    rd(be, gamma, D);
    rd(be, beta, D);
    inner(be)->embedding_layernorm_forward(be, ids, type_ids, word, pos, type, gamma, beta, B, T, D, eps, p, seed,
                                           offset, e, y, mean, rstd);
}
static void w_embedding_backward(Backend *be, const Act *dout, const int32_t *ids, const int32_t *type_ids, int B,
                                 int T, int D, float *dword, float *dpos, float *dtype) {
    rd(be, dout, (size_t)B * T * D);
    if (dword) cuda_mirror_read_alloc(be, dword);
    if (dtype) cuda_mirror_read_alloc(be, dtype);
    rd(be, dpos, (size_t)T * D);
    inner(be)->embedding_backward(be, dout, ids, type_ids, B, T, D, dword, dpos, dtype);
}
// The logits may be read from their twin (cuda_loss.cu): not an fp32 read for the lean decision.
static void w_cross_entropy_forward(Backend *be, const Act *logits, const int32_t *labels, int N, int V,
                                    float *loss, float *lse) {
    rt(be, logits, (size_t)N * V);
    inner(be)->cross_entropy_forward(be, logits, labels, N, V, loss, lse);
}
static void w_cross_entropy_backward(Backend *be, const Act *logits, const float *lse, const int32_t *labels,
                                     int N, int V, float grad_scale, Act *dlogits) {
    rt(be, logits, (size_t)N * V);
    rd(be, lse, N);
    inner(be)->cross_entropy_backward(be, logits, lse, labels, N, V, grad_scale, dlogits);
}
// Q, K, V, key_bias, out_scale/shift, q_scale of an attention call (Q/K/V only off the tensor-core path).
static void attention_inputs(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v) {
    const size_t rows = (size_t)s->B * s->T;
    if (!cuda_attention_reads_twins(be, s)) {
        rd(be, q, span(rows, (size_t)s->q_heads * s->qk_dim, s->ldq));
        rd(be, k, span(rows, (size_t)s->k_heads * s->qk_dim, s->ldk));
        rd(be, v, span(rows, (size_t)s->v_heads * s->v_dim, s->ldv));
    }
    rd(be, s->key_bias, rows * s->n_heads);
    rd(be, s->out_scale, (size_t)s->n_heads * s->v_dim);
    rd(be, s->out_shift, (size_t)s->n_heads * s->v_dim);
    rd(be, s->q_scale, (size_t)s->n_heads * s->qk_dim);
}
static void w_attention_forward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                                Act *out, float *saved, float *scratch) {
    attention_inputs(be, s, q, k, v);
    inner(be)->attention_forward(be, s, q, k, v, out, saved, scratch);
}
static void w_attention_backward(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                                 const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv,
                                 Act *dkey_bias, float *dout_scale, float *dout_shift, float *scratch) {
    attention_inputs(be, s, q, k, v);
    size_t sv = 0, sc = 0;
    be->attention_sizes(be, s, &sv, &sc);
    rd(be, saved, sv);
    // The tensor-core path reads dout from its twin only (cuda_flash.cu: the row dots, with them
    // the output scale/shift gradients' sums and, with out_scale, the scaled G they store).
    if (!cuda_attention_reads_twins(be, s))
        rd(be, dout, (size_t)s->B * s->T * s->n_heads * s->v_dim);
    rd(be, dout_scale, (size_t)s->n_heads * s->v_dim);
    rd(be, dout_shift, (size_t)s->n_heads * s->v_dim);
    inner(be)->attention_backward(be, s, q, k, v, saved, dout, dq, dk, dv, dkey_bias, dout_scale, dout_shift,
                                  scratch);
}
static double w_sum_squares(Backend *be, const float *x, size_t n) {
    rd(be, x, n);
    return inner(be)->sum_squares(be, x, n);
}
static void w_adamw_update(Backend *be, float *p, const float *grad, float *m, float *v, size_t n, float b1, float b2,
                           float eps, float step_size, float decay, float bc2_sqrt, float grad_scale) {
    rd(be, p, n);
    rd(be, grad, n);
    rd(be, m, n);
    rd(be, v, n);
    inner(be)->adamw_update(be, p, grad, m, v, n, b1, b2, eps, step_size, decay, bc2_sqrt, grad_scale);
    cuda_mirror_epoch(be);
}
// The optimizer's ranges: p and grad at start[r], the moments (and u) at start[r] - m_base.
static void ranges(Backend *be, const float *p, const float *grad, size_t m_base, int count, const size_t *start,
                   const size_t *len, const float *const *moments, int n_moments) {
    for (int r = 0; r < count; r++) {
        rd(be, p + start[r], len[r]);
        if (grad) rd(be, grad + start[r], len[r]);
        for (int i = 0; i < n_moments; i++) rd(be, moments[i] + (start[r] - m_base), len[r]);
    }
}
static void w_adamw_update_ranges(Backend *be, float *p, const float *grad, float *m, float *v, size_t m_base,
                                  int count, const size_t *start, const size_t *len, const unsigned char *decays,
                                  float b1, float b2, float eps, float step_size, float decay, float bc2_sqrt,
                                  float grad_scale) {
    const float *mv[2] = {m, v};
    ranges(be, p, grad, m_base, count, start, len, mv, 2);
    inner(be)->adamw_update_ranges(be, p, grad, m, v, m_base, count, start, len, decays, b1, b2, eps, step_size,
                                   decay, bc2_sqrt, grad_scale);
    cuda_mirror_epoch(be);
}
static void w_lamb_direction(Backend *be, const float *p, const float *grad, float *m, float *v, float *u, size_t n,
                             float b1, float b2, float eps, float wd, float bc1, float bc2, float grad_scale) {
    rd(be, p, n);
    rd(be, grad, n);
    rd(be, m, n);
    rd(be, v, n);
    inner(be)->lamb_direction(be, p, grad, m, v, u, n, b1, b2, eps, wd, bc1, bc2, grad_scale);
    cuda_mirror_epoch(be);
}
static void w_lamb_direction_ranges(Backend *be, const float *p, const float *grad, float *m, float *v, float *u,
                                    size_t m_base, int count, const size_t *start, const size_t *len,
                                    const float *wds, float b1, float b2, float eps, float bc1, float bc2,
                                    float grad_scale, double *sq) {
    const float *mv[2] = {m, v};
    ranges(be, p, grad, m_base, count, start, len, mv, 2);
    inner(be)->lamb_direction_ranges(be, p, grad, m, v, u, m_base, count, start, len, wds, b1, b2, eps, bc1, bc2,
                                     grad_scale, sq);
    cuda_mirror_epoch(be);
}
static void w_axpy_ranges(Backend *be, float *p, const float *u, size_t m_base, int count, const size_t *start,
                          const size_t *len, const float *coef) {
    const float *uu[1] = {u};
    ranges(be, p, nullptr, m_base, count, start, len, uu, 1);
    inner(be)->axpy_ranges(be, p, u, m_base, count, start, len, coef);
}

void cuda_install_lean(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    Backend *in = static_cast<Backend *>(std::malloc(sizeof(Backend)));
    if (!in) mhe_fatal("out of memory creating the CUDA backend");
    std::memcpy(in, be, sizeof *be);
    c->inner = in;
    // Every op of ops.h that reads device data is wrapped; a new op must be added here too (an
    // unwrapped op reading a lean buffer would read NaN in the emulated build: every bf16 test
    // that runs three or more steps shows it).
#define WRAP(op) \
    if (be->op) be->op = w_##op
    WRAP(download);
    WRAP(copy);
    WRAP(matmul);
    WRAP(matmul_batched);
    WRAP(linear_forward);
    WRAP(linear_backward);
    WRAP(linear_gelu_forward);
    WRAP(linear_backward_gelu);
    WRAP(bias_add);
    WRAP(bias_backward);
    WRAP(add);
    WRAP(axpy);
    WRAP(scale);
    WRAP(add_scalar);
    WRAP(mul);
    WRAP(mul_acc);
    WRAP(head_expand);
    WRAP(head_expand_backward);
    WRAP(head_expand_backward_prod);
    WRAP(head_scales);
    WRAP(gather_rows);
    WRAP(scatter_rows);
    WRAP(layernorm_forward);
    WRAP(residual_layernorm_forward);
    WRAP(layernorm_backward);
    WRAP(layernorm_backward_dropout);
    WRAP(gelu_forward);
    WRAP(gelu_backward);
    WRAP(tanh_forward);
    WRAP(tanh_backward);
    WRAP(dropout);
    WRAP(embedding_forward);
    WRAP(embedding_layernorm_forward);
    WRAP(embedding_backward);
    WRAP(cross_entropy_forward);
    WRAP(cross_entropy_backward);
    WRAP(attention_forward);
    WRAP(attention_backward);
    WRAP(sum_squares);
    WRAP(adamw_update);
    WRAP(adamw_update_ranges);
    WRAP(lamb_direction);
    WRAP(lamb_direction_ranges);
    WRAP(axpy_ranges);
#undef WRAP
}
