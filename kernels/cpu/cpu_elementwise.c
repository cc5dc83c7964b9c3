// defines: the elementwise arithmetic (add on activations; axpy, scale, add_scalar, mul, mul_acc on
// fp32 parameters, gradients and optimizer state), the per-head broadcast (head_expand and its
// backward: head embeddings, collab mixing, mhe_mul's query scale) and the MLM head's row gather /
// scatter.
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

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

void cpu_install_elementwise(Backend *be) {
    be->gather_rows = cpu_gather_rows;
    be->scatter_rows = cpu_scatter_rows;
    be->add = cpu_add;
    be->axpy = cpu_axpy;
    be->scale = cpu_scale;
    be->add_scalar = cpu_add_scalar;
    be->mul = cpu_mul;
    be->mul_acc = cpu_mul_acc;
    be->head_expand = cpu_head_expand;
    be->head_expand_backward = cpu_head_expand_backward;
}
