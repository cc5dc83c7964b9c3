// defines: the products: matmul and matmul_batched (MatIn / MatOut handed to cpu_gemm_ex), the
// linear layer forward and backward (also with rows ldy apart: the padded vocabulary head), and the
// bias's add and backward.  The bias lives here, not with the elementwise ops, because its column
// sums are also the linear backward's db where the product does not take them (weight_grad).
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

void cpu_install_linear(Backend *be) {
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
    be->linear_forward_ld = cpu_linear_forward_ld;
    be->linear_backward_ld = cpu_linear_backward_ld;
    be->matmul = cpu_matmul;
    be->matmul_batched = cpu_matmul_batched;
    be->bias_add = cpu_bias_add;
    be->bias_backward = cpu_bias_backward;
}
