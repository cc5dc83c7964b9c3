// Dense algebra and elementwise ops of the CPU backend.
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

static void cpu_matmul(Backend *be, int ta, int tb, int M, int N, int K, float alpha, MatIn A,
                       MatIn B, float beta, MatOut C) {
    double t0 = cpu_prof_begin(be);
    cpu_gemm_be(be, ta, tb, M, N, K, alpha, A.p, A.ld, B.p, B.ld, beta, C.p, C.ld);
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K);
}

static void cpu_matmul_batched(Backend *be, int ta, int tb, int M, int N, int K, float alpha,
                               const float *A, int lda, long sa, const float *B, int ldb, long sb,
                               float beta, float *C, int ldc, long sc, int batch) {
    double t0 = cpu_prof_begin(be);
    OpProfile *saved = be->profile;
    be->profile = NULL;
    for (int i = 0; i < batch; i++)
        cpu_gemm_be(be, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc);
    be->profile = saved;
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * M * N * K * batch);
}

static void cpu_bias_add(Backend *be, Act *ya, const float *bias, int N, int C) {
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        float *row = y + (size_t)r * C;
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dbias[c] += sum_r dy[r, c]: threads own column blocks so no reduction races.
static void cpu_bias_backward(Backend *be, const Act *dya, int N, int C, float *dbias) {
    const float *dy = act_cf(dya);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        double acc[64] = {0};
        for (int r = 0; r < N; r++) {
            const float *row = dy + (size_t)r * C;
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += (float)acc[c - c0];
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_add(Backend *be, const Act *aa, const Act *ba, Act *outa, size_t n) {
    const float *a = act_cf(aa), *b = act_cf(ba);
    float *out = act_f(outa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_axpy(Backend *be, float alpha, const float *x, float *y, size_t n) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_scale(Backend *be, float *x, float alpha, size_t n) {
    double t0 = cpu_prof_begin(be);
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

static void cpu_head_expand(Backend *be, const Act *xa, int ldx, const float *mul,
                            const float *add, int N, int n, int d, Act *outa) {
    const float *x = act_cf(xa);
    float *out = act_f(outa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * n * d >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * ldx;
        for (int h = 0; h < n; h++) {
            float *o = out + ((size_t)r * n + h) * d;
            const float *m = mul ? mul + (size_t)h * d : NULL;
            const float *a = add ? add + (size_t)h * d : NULL;
            for (int c = 0; c < d; c++) o[c] = (m ? xr[c] * m[c] : xr[c]) + (a ? a[c] : 0.0f);
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dx = sum_h dout_h ⊙ mul_h;  dmul_h += sum_r dout_h ⊙ x;  dadd_h += sum_r dout_h.
static void cpu_head_expand_backward(Backend *be, const Act *douta, const Act *xa, int ldx,
                                     const float *mul, int N, int n, int d, Act *dxa,
                                     int accumulate, float *dmul, float *dadd) {
    const float *dout = act_cf(douta), *x = act_cf(xa);
    float *dx = act_f(dxa);
    double t0 = cpu_prof_begin(be);
    if (dx) {
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * n * d >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < N; r++) {
            float *g = dx + (size_t)r * ldx;
            if (!accumulate) memset(g, 0, (size_t)d * sizeof *g);
            for (int h = 0; h < n; h++) {
                const float *o = dout + ((size_t)r * n + h) * d;
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
                const float *o = dout + ((size_t)r * n + h) * d + c0, *xr = x + (size_t)r * ldx + c0;
#pragma omp simd
                for (int c = 0; c < w; c++) {
                    sm[c] += (double)o[c] * xr[c];
                    sa[c] += o[c];
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

static void cpu_gather_rows(Backend *be, const Act *srca, const int32_t *rows, int M, int C,
                            Act *dsta, int src_rows) {
    const float *src = act_cf(srca);
    float *dst = act_f(dsta);
    (void)src_rows;  // the extent is for backends that track what each op reads
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)M * C >= CPU_PARALLEL_MIN_MEM)
    for (int i = 0; i < M; i++)
        memcpy(dst + (size_t)i * C, src + (size_t)rows[i] * C, (size_t)C * sizeof *dst);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_scatter_rows(Backend *be, const Act *srca, const int32_t *rows, int M, int C,
                             Act *dsta, int dst_rows) {
    const float *src = act_cf(srca);
    float *dst = act_f(dsta);
    (void)dst_rows;  // the extent matters to backends that track writes (CUDA's bf16 twins)
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)M * C >= CPU_PARALLEL_MIN_MEM)
    for (int i = 0; i < M; i++)
        memcpy(dst + (size_t)rows[i] * C, src + (size_t)i * C, (size_t)C * sizeof *dst);
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// y = x Wᵀ + b: the bias goes into the product (oneDNN's bias argument), no second pass.
static void cpu_linear_forward(Backend *be, const Act *xa, const float *W, const float *b, int N,
                               int in, int out, Act *ya) {
    const float *x = act_cf(xa);
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
    CpuContext *c = cpu_ctx(be);
    cpu_gemm_ex(c->gemm, c->bf16, 0, 1, N, out, in, 1.0f, (CpuOperand){x, NULL, in},
                (CpuOperand){W, NULL, in}, b, 0.0f, y, out);
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in);
}

// dx = dy W, dW += dyᵀ x, db += Σ_rows dy.  In bf16 dy is rounded once for both products and
// its column sums (db) are taken in the same pass; in fp32 the two products and the bias sum
// are exactly those of the unfused ops.
static void cpu_linear_backward(Backend *be, const Act *dya, const Act *xa, const float *W, int N,
                                int in, int out, Act *dxa, int accumulate, float *dW, float *db) {
    CpuContext *c = cpu_ctx(be);
    const float *dy = act_cf(dya), *x = act_cf(xa);
    float *dx = act_f(dxa);
    if (!c->bf16 || omp_in_parallel()) {
        if (dx)
            cpu_matmul(be, 0, 0, N, in, out, 1.0f, mat_act(dya, out), mat_f32(W, in),
                       accumulate ? 1.0f : 0.0f, out_act(dxa, in));
        cpu_matmul(be, 1, 0, out, in, N, 1.0f, mat_act(dya, out), mat_act(xa, in), 1.0f, out_f32(dW, in));
        if (db) cpu_bias_backward(be, dya, N, out, db);
        return;
    }
    double t0 = cpu_prof_begin(be);
    const CpuOperand hdy = {NULL, cpu_gemm_pack(c->gemm, dy, N, out, db), out};
    if (dx)
        cpu_gemm_ex(c->gemm, 1, 0, 0, N, in, out, 1.0f, hdy, (CpuOperand){W, NULL, in}, NULL,
                    accumulate ? 1.0f : 0.0f, dx, in);
    cpu_gemm_ex(c->gemm, 1, 1, 0, out, in, N, 1.0f, hdy, (CpuOperand){x, NULL, in}, NULL, 1.0f, dW, in);
    cpu_prof_end(be, OPC_MATMUL, t0, 2.0 * N * out * in * (dx ? 2 : 1));
}

void cpu_install_dense(Backend *be) {
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
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
