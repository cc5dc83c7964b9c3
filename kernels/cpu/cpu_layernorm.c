// defines: LayerNorm forward and backward, and the fused forms around it: the residual step
// (s = x + dropout(r), y = LayerNorm(s): residual_layernorm_forward) and the backward that also
// writes the dropped-out branch gradient (layernorm_backward_dropout).  The fused forms reproduce
// the dropout op's mask and rounding (drop_bf16, ops.h's dropout hash), so they are bit for bit the
// unfused ops in fp32 and bf16 (tests/model/test_cpu_fused.c).
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

// A row's mean and 1/sqrt(var + eps) (biased variance), summed in double.
static inline void ln_stats(const float *xr, int C, float eps, float *mean, float *rstd) {
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += xr[c];
    double mu = s / C, v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (xr[c] - mu) * (xr[c] - mu);
    *rstd = (float)(1.0 / sqrt(v / C + eps));
    *mean = (float)mu;
}

static void cpu_layernorm_forward(Backend *be, const Act *x, const float *gamma,
                                  const float *beta, int N, int C, float eps, Act *y,
                                  float *mean, float *rstd) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    size_t stride = 0;
    float *rows = bf ? cpu_thread_floats(be, (size_t)C, &stride) : NULL;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        float m, rs;
        if (bf) {
            // The row in fp32 first: it is read three times, and y may alias x.
            float *xr = rows + (size_t)omp_get_thread_num() * stride;
            bf16_load(act_ch(x) + (size_t)r * C, (size_t)C, xr);
            ln_stats(xr, C, eps, &m, &rs);
            uint16_t *yr = act_h(y) + (size_t)r * C;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = to_bf16((xr[c] - m) * rs * gamma[c] + beta[c]);
        } else {
            const float *xr = act_cf(x) + (size_t)r * C;
            float *yr = act_f(y) + (size_t)r * C;
            ln_stats(xr, C, eps, &m, &rs);
            for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
        }
        mean[r] = m;
        rstd[r] = rs;
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// One row of LayerNorm's input gradient into dxr (= or +=), from fp32 rows of x and dy.
static inline void ln_dx_row(const float *xr, const float *dyr, const float *gamma, float mu,
                             float rs, int C, float *dxr, int accumulate) {
    double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int c = 0; c < C; c++) {
        double g = (double)dyr[c] * gamma[c];
        sg += g;
        sgx += g * (xr[c] - mu) * rs;
    }
    float mg = (float)(sg / C), mgx = (float)(sgx / C);
#pragma omp simd
    for (int c = 0; c < C; c++) {
        float xhat = (xr[c] - mu) * rs;
        float v = rs * (dyr[c] * gamma[c] - mg - xhat * mgx);
        dxr[c] = accumulate ? dxr[c] + v : v;
    }
}

// The dropout op's mask and scale (cpu_dropout, cpu_activation.c), for the ops that fuse it into a
// neighbour.
typedef struct {
    int on;  // p > 0 (else dropout is a copy)
    float inv;
    uint64_t key;
    uint32_t thr;
} Drop;
static Drop drop_of(float p, uint64_t seed, uint64_t offset) {
    if (p <= 0.0f) return (Drop){0, 1.0f, 0, 0};
    return (Drop){1, 1.0f / (1.0f - p), ops_dropout_key(seed, offset), ops_dropout_threshold(p)};
}

// g = dy*gamma; dx = rstd * (g - mean(g) - xhat * mean(g*xhat)); dgamma += Σ dy*xhat; dbeta += Σ dy;
// with dr != NULL also dr = dropout(dx) of the values dx holds after the row is stored, in the
// same pass (the residual branch's gradient): exactly the dropout op run afterwards, in bf16 too
// (it reads the rounded dx back), without the second pass over dx.
static void layernorm_backward_body(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                    const float *mean, const float *rstd, int N, int C, Act *dx,
                                    int accumulate, float *dgamma, float *dbeta, Drop d, Act *dr) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    if (dgamma || dbeta) {
        // Threads own blocks of CPU_COLSUM_COLS columns (one writer per element); rows run
        // inside, in order, so each row's block is read contiguously.
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
        for (int c0 = 0; c0 < C; c0 += CPU_COLSUM_COLS) {
            const int w = C - c0 < CPU_COLSUM_COLS ? C - c0 : CPU_COLSUM_COLS;
            double sg[CPU_COLSUM_COLS] = {0}, sb[CPU_COLSUM_COLS] = {0};
            for (int r = 0; r < N; r++) {
                const size_t o = (size_t)r * C + c0;
                const float mu = mean[r], rs = rstd[r];
                if (bf) {
                    const uint16_t *dyr = act_ch(dy) + o, *xr = act_ch(x) + o;
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        const float d = from_bf16(dyr[c]);
                        sg[c] += (double)d * ((from_bf16(xr[c]) - mu) * rs);
                        sb[c] += d;
                    }
                } else {
                    const float *dyr = act_cf(dy) + o, *xr = act_cf(x) + o;
#pragma omp simd
                    for (int c = 0; c < w; c++) {
                        sg[c] += (double)dyr[c] * ((xr[c] - mu) * rs);
                        sb[c] += dyr[c];
                    }
                }
            }
            for (int c = 0; c < w; c++) {
                if (dgamma) dgamma[c0 + c] += (float)sg[c];
                if (dbeta) dbeta[c0 + c] += (float)sb[c];
            }
        }
    }
    if (dx) {
        size_t stride = 0;
        float *rows = bf ? cpu_thread_floats(be, 3 * (size_t)C, &stride) : NULL;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < N; r++) {
            const size_t o = (size_t)r * C;
            if (bf) {
                // x, dy and (accumulating) dx in fp32; dx may alias dy (accumulate == 0): dy is
                // read whole before dx is stored.
                float *xr = rows + (size_t)omp_get_thread_num() * stride, *dyr = xr + C, *dxr = dyr + C;
                bf16_load(act_ch(x) + o, (size_t)C, xr);
                bf16_load(act_ch(dy) + o, (size_t)C, dyr);
                if (accumulate) bf16_load(act_h(dx) + o, (size_t)C, dxr);
                ln_dx_row(xr, dyr, gamma, mean[r], rstd[r], C, dxr, accumulate);
                uint16_t *dxh = act_h(dx) + o;
                bf16_store(dxr, (size_t)C, dxh);
                if (dr) {
                    uint16_t *drh = act_h(dr) + o;
                    if (d.on) {
#pragma omp simd
                        for (int c = 0; c < C; c++)
                            drh[c] = drop_bf16(ops_dropout_keep_fast(d.key, o + c, d.thr), from_bf16(dxh[c]) * d.inv);
                    } else {
                        memcpy(drh, dxh, (size_t)C * sizeof *drh);
                    }
                }
            } else {
                float *dxf = act_f(dx) + o;
                ln_dx_row(act_cf(x) + o, act_cf(dy) + o, gamma, mean[r], rstd[r], C, dxf, accumulate);
                if (dr) {
                    float *drf = act_f(dr) + o;
                    if (d.on) {
#pragma omp simd
                        for (int c = 0; c < C; c++)
                            drf[c] = ops_dropout_keep_fast(d.key, o + c, d.thr) ? dxf[c] * d.inv : 0.0f;
                    } else {
                        memcpy(drf, dxf, (size_t)C * sizeof *drf);
                    }
                }
            }
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_layernorm_backward(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                   const float *mean, const float *rstd, int N, int C, Act *dx,
                                   int accumulate, float *dgamma, float *dbeta) {
    layernorm_backward_body(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta, drop_of(0, 0, 0),
                            NULL);
}
static void cpu_layernorm_backward_dropout(Backend *be, const Act *dy, const Act *x, const float *gamma,
                                           const float *mean, const float *rstd, int N, int C, Act *dx,
                                           int accumulate, float *dgamma, float *dbeta, float p, uint64_t seed,
                                           uint64_t offset, Act *dr) {
    layernorm_backward_body(be, dy, x, gamma, mean, rstd, N, C, dx, accumulate, dgamma, dbeta,
                            drop_of(p, seed, offset), dr);
}

// s = x + dropout(r), y = LayerNorm(s), one row at a time: each element as dropout, add and
// layernorm_forward would compute and store it (bf16: the dropped value rounded as dropout
// stores it, the sum rounded as add stores it, LayerNorm from the stored s), so the results
// are theirs bit for bit, in one pass over x and r instead of four over [N, C].  s may alias r
// (each element is read before it is written), y may alias s (the row is whole before y).
static void cpu_residual_layernorm_forward(Backend *be, const Act *x, const Act *r, float p, uint64_t seed,
                                           uint64_t offset, const float *gamma, const float *beta, int N,
                                           int C, float eps, Act *s, Act *y, float *mean, float *rstd) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    const Drop d = drop_of(p, seed, offset);
    size_t stride = 0;
    float *rows = bf ? cpu_thread_floats(be, (size_t)C, &stride) : NULL;
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int i = 0; i < N; i++) {
        const size_t o = (size_t)i * C;
        float m, rs;
        if (bf) {
            const uint16_t *xh = act_ch(x) + o, *rh = act_ch(r) + o;
            uint16_t *sh = act_h(s) + o;
            float *sr = rows + (size_t)omp_get_thread_num() * stride;  // s as stored, in fp32
            if (d.on) {
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    const float kept = from_bf16(to_bf16(from_bf16(rh[c]) * d.inv));
                    const uint16_t v = to_bf16(from_bf16(xh[c]) + (ops_dropout_keep_fast(d.key, o + c, d.thr) ? kept : 0.0f));
                    sh[c] = v;
                    sr[c] = from_bf16(v);
                }
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++) {
                    const uint16_t v = to_bf16(from_bf16(xh[c]) + from_bf16(rh[c]));
                    sh[c] = v;
                    sr[c] = from_bf16(v);
                }
            }
            ln_stats(sr, C, eps, &m, &rs);
            uint16_t *yr = act_h(y) + o;
#pragma omp simd
            for (int c = 0; c < C; c++) yr[c] = to_bf16((sr[c] - m) * rs * gamma[c] + beta[c]);
        } else {
            const float *xr = act_cf(x) + o, *rr = act_cf(r) + o;
            float *sr = act_f(s) + o;
            if (d.on) {
#pragma omp simd
                for (int c = 0; c < C; c++)
                    sr[c] = xr[c] + (ops_dropout_keep_fast(d.key, o + c, d.thr) ? rr[c] * d.inv : 0.0f);
            } else {
#pragma omp simd
                for (int c = 0; c < C; c++) sr[c] = xr[c] + rr[c];
            }
            ln_stats(sr, C, eps, &m, &rs);
            float *yr = act_f(y) + o;
            for (int c = 0; c < C; c++) yr[c] = (sr[c] - m) * rs * gamma[c] + beta[c];
        }
        mean[i] = m;
        rstd[i] = rs;
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

void cpu_install_layernorm(Backend *be) {
    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->residual_layernorm_forward = cpu_residual_layernorm_forward;
    be->layernorm_backward_dropout = cpu_layernorm_backward_dropout;
}
