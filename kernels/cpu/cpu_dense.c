// Dense algebra and elementwise ops of the CPU backend.
#include <string.h>

#include "common/error.h"

#include "kernels/cpu/cpu_internal.h"

// A matmul operand or result as cpu_gemm_ex takes it: activations of a bf16 backend are handed
// over in bf16 where they are (no rounding copy); fp32 memory stays fp32 (rounded per product
// in bf16 mode, as a weight).
static CpuOperand operand(const Backend *be, MatIn m) {
    if (m.is_act && act_bf16(be)) return (CpuOperand){NULL, m.p, m.ld};
    return (CpuOperand){m.p, NULL, m.ld};
}
static CpuResult result(const Backend *be, MatOut m) {
    if (m.is_act && act_bf16(be)) return (CpuResult){NULL, m.p, m.ld};
    return (CpuResult){m.p, NULL, m.ld};
}

static void cpu_matmul(Backend *be, int ta, int tb, int M, int N, int K, float alpha, MatIn A,
                       MatIn B, float beta, MatOut C) {
    double t0 = cpu_prof_begin(be);
    cpu_gemm_ex(cpu_ctx(be)->gemm, cpu_ctx(be)->bf16, ta, tb, M, N, K, alpha, operand(be, A),
                operand(be, B), NULL, beta, result(be, C));
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K);
}

static void cpu_matmul_batched(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, long sa, const float *B, int ldb, long sb,
                               float beta, float *C, int ldc, long sc, int batch) {
    double t0 = cpu_prof_begin(be);
    for (int i = 0; i < batch; i++)
        cpu_gemm_be(be, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K * batch);
}

static void cpu_bias_add(Backend *be, Act *y, const float *bias, int N, int C) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        if (bf) {
            uint16_t *row = act_h(y) + (size_t)r * C;
#pragma omp simd
            for (int c = 0; c < C; c++) row[c] = to_bf16(from_bf16(row[c]) + bias[c]);
        } else {
            float *row = act_f(y) + (size_t)r * C;
            for (int c = 0; c < C; c++) row[c] += bias[c];
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dbias[c] += sum_r dy[r, c] (store: = instead, dbias being zero): threads own column blocks so
// no reduction races; the sums are in double over the rows in order, so they do not depend on the
// thread count.
static void bias_backward_ld(Backend *be, const Act *dy, int N, int C, int ld, float *dbias, int store) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    // Threads own blocks of CPU_COLSUM_COLS columns, rows summed in order.
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < C; c0 += CPU_COLSUM_COLS) {
        int c1 = c0 + CPU_COLSUM_COLS < C ? c0 + CPU_COLSUM_COLS : C;
        double acc[CPU_COLSUM_COLS] = {0};
        for (int r = 0; r < N; r++) {
            if (bf) {
                const uint16_t *row = act_ch(dy) + (size_t)r * ld;
                for (int c = c0; c < c1; c++) acc[c - c0] += from_bf16(row[c]);
            } else {
                const float *row = act_cf(dy) + (size_t)r * ld;
                for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
            }
        }
        for (int c = c0; c < c1; c++) dbias[c] = (store ? 0.0f : dbias[c]) + (float)acc[c - c0];
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_bias_backward(Backend *be, const Act *dy, int N, int C, float *dbias) {
    bias_backward_ld(be, dy, N, C, C, dbias, 0);
}

static void cpu_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) {
    double t0 = cpu_prof_begin(be);
    if (act_bf16(be)) {
        const uint16_t *ah = act_ch(a), *bh = act_ch(b);
        uint16_t *oh = act_h(out);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
        for (size_t i = 0; i < n; i++) oh[i] = to_bf16(from_bf16(ah[i]) + from_bf16(bh[i]));
    } else {
        const float *af = act_cf(a), *bf = act_cf(b);
        float *of = act_f(out);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
        for (size_t i = 0; i < n; i++) of[i] = af[i] + bf[i];
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_axpy(Backend *be, float alpha, const float *x, float *y, size_t n) {
    double t0 = cpu_prof_begin(be);
    cpu_wrote(be, y, n * sizeof *y);  // LAMB's step on the parameters
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_scale(Backend *be, float *x, float alpha, size_t n) {
    double t0 = cpu_prof_begin(be);
    cpu_wrote(be, x, n * sizeof *x);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_add_scalar(Backend *be, const float *x, float c, float *out, size_t n) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) out[i] = x[i] + c;
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_mul(Backend *be, const float *a, const float *b, float *out, size_t n) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) out[i] = a[i] * b[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_mul_acc(Backend *be, const float *a, const float *b, float *out, size_t n) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) out[i] += a[i] * b[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_head_expand(Backend *be, const Act *x, int ldx, const float *mul,
                            const float *add, int N, int n, int d, Act *out) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * n * d >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        for (int h = 0; h < n; h++) {
            const float *m = mul ? mul + (size_t)h * d : NULL;
            const float *a = add ? add + (size_t)h * d : NULL;
            if (bf) {
                const uint16_t *xr = act_ch(x) + (size_t)r * ldx;
                uint16_t *o = act_h(out) + ((size_t)r * n + h) * d;
                for (int c = 0; c < d; c++) {
                    const float v = from_bf16(xr[c]);
                    o[c] = to_bf16((m ? v * m[c] : v) + (a ? a[c] : 0.0f));
                }
            } else {
                const float *xr = act_cf(x) + (size_t)r * ldx;
                float *o = act_f(out) + ((size_t)r * n + h) * d;
                for (int c = 0; c < d; c++) o[c] = (m ? xr[c] * m[c] : xr[c]) + (a ? a[c] : 0.0f);
            }
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dx[r, :] (bf16 activations): the heads' terms summed in fp32 in the order the fp32 loop adds
// them, over blocks of columns, and rounded once.
#define HE_BLOCK 256
static void head_expand_dx_bf16(const uint16_t *dout, const float *mul, int n, int d,
                                uint16_t *g, int accumulate) {
    for (int c0 = 0; c0 < d; c0 += HE_BLOCK) {
        const int w = d - c0 < HE_BLOCK ? d - c0 : HE_BLOCK;
        float acc[HE_BLOCK];
        for (int c = 0; c < w; c++) acc[c] = accumulate ? from_bf16(g[c0 + c]) : 0.0f;
        for (int h = 0; h < n; h++) {
            const uint16_t *o = dout + (size_t)h * d + c0;
            const float *m = mul ? mul + (size_t)h * d + c0 : NULL;
            for (int c = 0; c < w; c++) acc[c] += m ? from_bf16(o[c]) * m[c] : from_bf16(o[c]);
        }
        bf16_store(acc, (size_t)w, g + c0);
    }
}

// dx = sum_h dout_h ⊙ mul_h;  dmul_h += sum_r dout_h ⊙ x;  dadd_h += sum_r dout_h.
static void cpu_head_expand_backward(Backend *be, const Act *dout, const Act *x, int ldx,
                                     const float *mul, int N, int n, int d, Act *dx,
                                     int accumulate, float *dmul, float *dadd) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    if (dx) {
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * n * d >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < N; r++) {
            if (bf) {
                head_expand_dx_bf16(act_ch(dout) + (size_t)r * n * d, mul, n, d,
                                    act_h(dx) + (size_t)r * ldx, accumulate);
                continue;
            }
            float *g = act_f(dx) + (size_t)r * ldx;
            if (!accumulate) memset(g, 0, (size_t)d * sizeof *g);
            for (int h = 0; h < n; h++) {
                const float *o = act_cf(dout) + ((size_t)r * n + h) * d;
                const float *m = mul ? mul + (size_t)h * d : NULL;
                for (int c = 0; c < d; c++) g[c] += m ? o[c] * m[c] : o[c];
            }
        }
    }
    if (dmul || dadd) {
        // One (head, block of 64 columns) per iteration: each output element has a single
        // writer, and the rows run inside so every row's block is read contiguously.
        const int cb = (d + 63) / 64;
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)N * n * d >= CPU_PARALLEL_MIN_MEM)
        for (int it = 0; it < n * cb; it++) {
            const int h = it / cb, c0 = (it % cb) * 64, w = d - c0 < 64 ? d - c0 : 64;
            double sm[64] = {0}, sa[64] = {0};
            for (int r = 0; r < N; r++) {
                const size_t oo = ((size_t)r * n + h) * d + c0, xo = (size_t)r * ldx + c0;
                if (bf) {
                    const uint16_t *o = act_ch(dout) + oo, *xr = act_ch(x) + xo;
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        const float oc = from_bf16(o[c]);
                        sm[c] += (double)oc * from_bf16(xr[c]);
                        sa[c] += oc;
                    }
                } else {
                    const float *o = act_cf(dout) + oo, *xr = act_cf(x) + xo;
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        sm[c] += (double)o[c] * xr[c];
                        sa[c] += o[c];
                    }
                }
            }
            for (int c = 0; c < w; c++) {
                if (dmul) dmul[(size_t)h * d + c0 + c] += (float)sm[c];
                if (dadd) dadd[(size_t)h * d + c0 + c] += (float)sa[c];
            }
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// Rows are copied as bytes: the same code for either element type.
static void cpu_gather_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C,
                            Act *dst, int src_rows) {
    (void)src_rows;  // the extent is for backends that track what each op reads
    double t0 = cpu_prof_begin(be);
    const size_t rb = (size_t)C * dtype_size(be->act);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)M * C >= CPU_PARALLEL_MIN_MEM)
    for (int i = 0; i < M; i++)
        memcpy((char *)dst + (size_t)i * rb, (const char *)src + (size_t)rows[i] * rb, rb);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_scatter_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C,
                             Act *dst, int dst_rows) {
    (void)dst_rows;  // the extent is for backends that track what each op writes
    double t0 = cpu_prof_begin(be);
    const size_t rb = (size_t)C * dtype_size(be->act);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)M * C >= CPU_PARALLEL_MIN_MEM)
    for (int i = 0; i < M; i++)
        memcpy((char *)dst + (size_t)rows[i] * rb, (const char *)src + (size_t)i * rb, rb);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// y = x Wᵀ + b: the bias goes into the product (oneDNN's bias argument), no second pass; in
// bf16 x is read and y written in bf16 by the primitive, W is rounded per call.
static void cpu_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N,
                               int in, int out, Act *y) {
    double t0 = cpu_prof_begin(be);
    CpuContext *c = cpu_ctx(be);
    cpu_gemm_ex(c->gemm, c->bf16, 0, 1, N, out, in, 1.0f, operand(be, mat_act(x, in)),
                (CpuOperand){W, NULL, in}, b, 0.0f, result(be, out_act(y, out)));
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
}

// dW (+)= dyᵀ x and db (+)= Σ_rows dy: on AMX in one pass over dy where cpu_gemm_weight_grad
// takes the shape (bf16 activations at the avx512 level of an AMX CPU), the product and the
// column sums apart otherwise.
static void weight_grad(Backend *be, const Act *dy, int ldy, const Act *x, int N, int in, int out, float *dW,
                        float *db, int dW_zero) {
    if (act_bf16(be)) {
        double t0 = cpu_prof_begin(be);
        if (cpu_gemm_weight_grad(cpu_ctx(be)->gemm, out, in, N, act_ch(dy), ldy, act_ch(x), in, dW_zero ? 0.0f : 1.0f,
                                 dW, in, db, dW_zero)) {
            cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
            return;
        }
    }
    cpu_matmul(be, 1, 0, out, in, N, 1.0f, mat_act(dy, ldy), mat_act(x, in), dW_zero ? 0.0f : 1.0f, out_f32(dW, in));
    if (db) bias_backward_ld(be, dy, N, out, ldy, db, dW_zero);
}

// dx = dy W, dW += dyᵀ x, db += Σ_rows dy: the unfused ops.  In bf16 both products read dy and
// x where they are (no rounding copy left to share between them), and dx is stored in bf16.  With
// dW_zero the product is stored (beta 0: oneDNN without its sum post-op, dW not read).
static void cpu_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N,
                                int in, int out, Act *dx, int accumulate, float *dW, float *db,
                                int dW_zero) {
    if (dx)
        cpu_matmul(be, 0, 0, N, in, out, 1.0f, mat_act(dy, out), mat_f32(W, in),
                   accumulate ? 1.0f : 0.0f, out_act(dx, in));
    weight_grad(be, dy, out, x, N, in, out, dW, db, dW_zero);
}

// The vocabulary head with its rows ldy apart (ops.h ops_head_ld).  The forward's product is as
// wide as ldy over the weight's copy grown by zero rows (cpu_gemm_padded_weight); the backward's
// two products keep K (dx) and M (dW) = out and read dy with leading dimension ldy, the layouts
// oneDNN ran fastest (2026-11-29, AMX Xeon: 30522 x 256 x 2560, 123 -> 89 ms for the three).
static void cpu_linear_forward_ld(Backend *be, const Act *x, const float *W, const float *b, int N,
                                  int in, int out, int ldy, Act *y) {
    if (ldy < out) mhe_fatal("linear_forward_ld: row stride %d below the width %d", ldy, out);
    double t0 = cpu_prof_begin(be);
    CpuContext *c = cpu_ctx(be);
    cpu_gemm_padded_weight(c->gemm, c->bf16, N, out, ldy, in, operand(be, mat_act(x, in)), W, b,
                           result(be, out_act(y, ldy)));
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
}

static void cpu_linear_backward_ld(Backend *be, const Act *dy, const Act *x, const float *W, int N,
                                   int in, int out, int ldy, Act *dx, int accumulate, float *dW,
                                   float *db, int dW_zero) {
    if (ldy < out) mhe_fatal("linear_backward_ld: row stride %d below the width %d", ldy, out);
    if (dx)
        cpu_matmul(be, 0, 0, N, in, out, 1.0f, mat_act(dy, ldy), mat_f32(W, in),
                   accumulate ? 1.0f : 0.0f, out_act(dx, in));
    weight_grad(be, dy, ldy, x, N, in, out, dW, db, dW_zero);
}

void cpu_install_dense(Backend *be) {
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
    be->linear_forward_ld = cpu_linear_forward_ld;
    be->linear_backward_ld = cpu_linear_backward_ld;
    be->gather_rows = cpu_gather_rows;
    be->scatter_rows = cpu_scatter_rows;
    be->matmul = cpu_matmul;
    be->matmul_batched = cpu_matmul_batched;
    be->bias_add = cpu_bias_add;
    be->bias_backward = cpu_bias_backward;
    be->add = cpu_add;
    be->axpy = cpu_axpy;
    be->scale = cpu_scale;
    be->add_scalar = cpu_add_scalar;
    be->mul = cpu_mul;
    be->mul_acc = cpu_mul_acc;
    be->head_expand = cpu_head_expand;
    be->head_expand_backward = cpu_head_expand_backward;
}
