// LayerNorm, GELU, dropout, embeddings and the softmax cross-entropy of the CPU backend.
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

static void cpu_layernorm_forward(Backend *be, const Act *xa, const float *gamma,
                                  const float *beta, int N, int C, float eps, Act *ya,
                                  float *mean, float *rstd) {
    const float *x = act_cf(xa);
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
    for (int r = 0; r < N; r++) {
        const float *xr = x + (size_t)r * C;
        float *yr = y + (size_t)r * C;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += xr[c];
        double mu = s / C, v = 0;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (xr[c] - mu) * (xr[c] - mu);
        float rs = (float)(1.0 / sqrt(v / C + eps));
        float m = (float)mu;
        for (int c = 0; c < C; c++) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
        mean[r] = m;
        rstd[r] = rs;
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// g = dy*gamma; dx = rstd * (g - mean(g) - xhat * mean(g*xhat)); dgamma += Σ dy*xhat; dbeta += Σ dy
static void cpu_layernorm_backward(Backend *be, const Act *dya, const Act *xa,
                                   const float *gamma, const float *mean, const float *rstd,
                                   int N, int C, Act *dxa, int accumulate, float *dgamma,
                                   float *dbeta) {
    const float *dy = act_cf(dya), *x = act_cf(xa);
    float *dx = act_f(dxa);
    double t0 = cpu_prof_begin(be);
    if (dgamma || dbeta) {
        // Threads own blocks of 64 columns (one writer per element); rows run inside so each
        // row's block is read contiguously.
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
        for (int c0 = 0; c0 < C; c0 += 64) {
            const int w = C - c0 < 64 ? C - c0 : 64;
            double sg[64] = {0}, sb[64] = {0};
            for (int r = 0; r < N; r++) {
                const float *dyr = dy + (size_t)r * C + c0, *xr = x + (size_t)r * C + c0;
                const float mu = mean[r], rs = rstd[r];
#pragma omp simd
                for (int c = 0; c < w; c++) {
                    sg[c] += (double)dyr[c] * ((xr[c] - mu) * rs);
                    sb[c] += dyr[c];
                }
            }
            for (int c = 0; c < w; c++) {
                if (dgamma) dgamma[c0 + c] += (float)sg[c];
                if (dbeta) dbeta[c0 + c] += (float)sb[c];
            }
        }
    }
    if (dx) {
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * C >= CPU_PARALLEL_MIN_MEM)
        for (int r = 0; r < N; r++) {
            const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
            float *dxr = dx + (size_t)r * C;
            float mu = mean[r], rs = rstd[r];
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
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

#define GELU_K0 0.7978845608028654f  // sqrt(2/pi)
#define GELU_K1 0.044715f

static void cpu_gelu_forward(Backend *be, GeluKind kind, const Act *xa, Act *ya, size_t n) {
    const float *x = act_cf(xa);
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
    if (kind == GELU_ERF) {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + cpu_erff(x[i] * (float)M_SQRT1_2));
    } else {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + cpu_tanhf(GELU_K0 * (v + GELU_K1 * v * v * v)));
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_tanh_forward(Backend *be, const Act *xa, Act *ya, size_t n) {
    const float *x = act_cf(xa);
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// tanh' = 1 - tanh², from the saved output.
static void cpu_tanh_backward(Backend *be, const Act *ya, const Act *dya, Act *dxa, size_t n) {
    const float *y = act_cf(ya), *dy = act_cf(dya);
    float *dx = act_f(dxa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// erf: gelu' = Φ(x) + x φ(x);  tanh: gelu' = ½(1+t) + ½ x (1-t²) k0 (1 + 3 k1 x²).
static void cpu_gelu_backward(Backend *be, GeluKind kind, const Act *xa, const Act *dya,
                              Act *dxa, size_t n) {
    const float *x = act_cf(xa), *dy = act_cf(dya);
    float *dx = act_f(dxa);
    double t0 = cpu_prof_begin(be);
    if (kind == GELU_ERF) {
        // erf(v/√2) and φ(v) share one exp: cpu_erff's exp(-(v/√2)²) is φ's exp(-v²/2).
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = x[i];
            const float e = cpu_expf_noover(-0.5f * v * v);
            const float cdf = 0.5f * (1.0f + cpu_erff_with_exp(v * (float)M_SQRT1_2, e));
            const float pdf = e * 0.3989422804014327f;
            dx[i] = dy[i] * (cdf + v * pdf);
        }
    } else {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) {
            float v = x[i];
            float t = cpu_tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
            float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
            dx[i] = dy[i] * g;
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_dropout(Backend *be, const Act *xa, Act *ya, size_t n, float p, uint64_t seed,
                        uint64_t offset) {
    const float *x = act_cf(xa);
    float *y = act_f(ya);
    double t0 = cpu_prof_begin(be);
    if (p <= 0.0f) {
        if (y != x) memcpy(y, x, n * sizeof *y);
    } else {
        const float inv = 1.0f / (1.0f - p);
        const uint64_t key = ops_dropout_key(seed, offset);
        const uint32_t thr = ops_dropout_threshold(p);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
        for (size_t i = 0; i < n; i++) y[i] = ops_dropout_keep_fast(key, i, thr) ? x[i] * inv : 0.0f;
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_embedding_forward(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                  const float *word, const float *pos, const float *type, int B,
                                  int T, int D, Act *outa) {
    float *out = act_f(outa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *w = word + (size_t)ids[bt] * D, *p = pos + (size_t)t * D;
        const float *ty = type ? type + (size_t)(type_ids ? type_ids[bt] : 0) * D : NULL;
        float *o = out + (size_t)bt * D;
        for (int c = 0; c < D; c++) o[c] = w[c] + p[c] + (ty ? ty[c] : 0.0f);
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// Scatter-add: threads split the D columns (blocks of 64), so rows hit twice never race.
static void cpu_embedding_backward(Backend *be, const Act *douta, const int32_t *ids,
                                   const int32_t *type_ids, int B, int T, int D, float *dword,
                                   float *dpos, float *dtype) {
    const float *dout = act_cf(douta);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < D; c0 += 64) {
        const int w = D - c0 < 64 ? D - c0 : 64;
        for (int bt = 0; bt < B * T; bt++) {
            const float *g = dout + (size_t)bt * D + c0;
            float *dw = dword + (size_t)ids[bt] * D + c0;
            float *dp = dpos ? dpos + (size_t)(bt % T) * D + c0 : NULL;
            float *dt = dtype ? dtype + (size_t)(type_ids ? type_ids[bt] : 0) * D + c0 : NULL;
            for (int c = 0; c < w; c++) dw[c] += g[c];
            if (dp)
                for (int c = 0; c < w; c++) dp[c] += g[c];
            if (dt)
                for (int c = 0; c < w; c++) dt[c] += g[c];
        }
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

static void cpu_cross_entropy_forward(Backend *be, const Act *logitsa, const int32_t *labels,
                                      int N, int V, float *loss, float *lse) {
    const float *logits = act_cf(logitsa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * V >= CPU_PARALLEL_MIN)
    for (int r = 0; r < N; r++) {
        if (labels[r] < 0) {
            loss[r] = 0.0f;
            lse[r] = 0.0f;
            continue;
        }
        const float *z = logits + (size_t)r * V;
        float mx = z[0];
#pragma omp simd reduction(max : mx)
        for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
        // Terms in float, sum in double.  In blocks through a buffer: GCC does not vectorise
        // cpu_expf and the widening sum in one loop (it stayed scalar, ~3 ns per logit).
        double s = 0;
        float e[256];
        for (int v0 = 0; v0 < V; v0 += 256) {
            const int w = V - v0 < 256 ? V - v0 : 256;
#pragma omp simd
            for (int v = 0; v < w; v++) e[v] = cpu_expf_noover(z[v0 + v] - mx);
#pragma omp simd reduction(+ : s)
            for (int v = 0; v < w; v++) s += e[v];
        }
        double l = mx + log(s);
        lse[r] = (float)l;
        loss[r] = (float)(l - z[labels[r]]);
    }
    cpu_prof_end(be, OPC_LOSS, t0, 0);
}

static void cpu_cross_entropy_backward(Backend *be, const Act *logitsa, const float *lse,
                                       const int32_t *labels, int N, int V, float grad_scale,
                                       Act *dlogitsa) {
    const float *logits = act_cf(logitsa);
    float *dlogits = act_f(dlogitsa);
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * V >= CPU_PARALLEL_MIN)
    for (int r = 0; r < N; r++) {
        const float *z = logits + (size_t)r * V;
        float *g = dlogits + (size_t)r * V;
        if (labels[r] < 0) {
            memset(g, 0, (size_t)V * sizeof *g);
            continue;
        }
        float l = lse[r];
#pragma omp simd
        for (int v = 0; v < V; v++) g[v] = grad_scale * cpu_expf_noover(z[v] - l);
        g[labels[r]] -= grad_scale;
    }
    cpu_prof_end(be, OPC_LOSS, t0, 0);
}

void cpu_install_nn(Backend *be) {
    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->tanh_forward = cpu_tanh_forward;
    be->tanh_backward = cpu_tanh_backward;
    be->dropout = cpu_dropout;
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
    be->cross_entropy_forward = cpu_cross_entropy_forward;
    be->cross_entropy_backward = cpu_cross_entropy_backward;
}
