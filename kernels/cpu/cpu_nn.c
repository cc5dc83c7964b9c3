// LayerNorm, GELU, dropout and embeddings of the CPU backend.
#include <math.h>
#include <pthread.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

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

// keep ? to_bf16(v) : 0, with the rounding made for every element and masked: as a conditional
// call GCC kept it a branch at x86-64-v3 (the dropout loops stayed scalar there); the same bits.
static inline uint16_t drop_bf16(int keep, float v) { return (uint16_t)(to_bf16(v) & (uint16_t)-(uint16_t)keep); }

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

// The dropout op's mask and scale (cpu_dropout), for the ops that fuse it into a neighbour.
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

#define GELU_K0 0.7978845608028654f  // sqrt(2/pi)
#define GELU_K1 0.044715f

static inline float gelu_erf(float v) { return 0.5f * v * (1.0f + cpu_erff(v * (float)M_SQRT1_2)); }
static inline float gelu_tanh(float v) {
    return 0.5f * v * (1.0f + cpu_tanhf(GELU_K0 * (v + GELU_K1 * v * v * v)));
}
// erf: gelu' = Φ(x) + x φ(x), where erf(v/√2) and φ(v) share one exp (cpu_erff's
// exp(-(v/√2)²) is φ's exp(-v²/2));  tanh: gelu' = ½(1+t) + ½ x (1-t²) k0 (1 + 3 k1 x²).
static inline float gelu_erf_grad(float v) {
    const float e = cpu_expf_noover(-0.5f * v * v);
    const float cdf = 0.5f * (1.0f + cpu_erff_with_exp(v * (float)M_SQRT1_2, e));
    const float pdf = e * 0.3989422804014327f;
    return cdf + v * pdf;
}
static inline float gelu_tanh_grad(float v) {
    float t = cpu_tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
    return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
}

// bf16 GELU by table: a bf16 input has 65,536 values, so GELU's bf16 result (128 KiB) and its
// fp32 derivative (256 KiB) are tabulated once per kind from the functions above and looked up:
// the same bits as evaluating them (the entries are those evaluations), at a gather per
// element instead of an exp, an erf and a division (the GELU passes were 9% of a small bf16
// step on an AMX Xeon, compute-bound at about half the memory's rate).
// y has one entry more than it needs: the AVX-512 forward gathers 32-bit words at 16-bit steps.
typedef struct {
    pthread_once_t once;
    uint16_t y[65536 + 1];
    float grad[65536];
} GeluTable;
static GeluTable gelu_tables[2] = {{PTHREAD_ONCE_INIT, {0}, {0}}, {PTHREAD_ONCE_INIT, {0}, {0}}};
static void gelu_table_fill(GeluKind kind) {
    GeluTable *t = &gelu_tables[kind];
    for (uint32_t h = 0; h < 65536; h++) {
        const float v = from_bf16((uint16_t)h);
        t->y[h] = to_bf16(kind == GELU_ERF ? gelu_erf(v) : gelu_tanh(v));
        t->grad[h] = kind == GELU_ERF ? gelu_erf_grad(v) : gelu_tanh_grad(v);
    }
}
static void gelu_fill_erf(void) { gelu_table_fill(GELU_ERF); }
static void gelu_fill_tanh(void) { gelu_table_fill(GELU_TANH); }
static const GeluTable *gelu_table(GeluKind kind) {
    GeluTable *t = &gelu_tables[kind == GELU_ERF ? GELU_ERF : GELU_TANH];
    pthread_once(&t->once, kind == GELU_ERF ? gelu_fill_erf : gelu_fill_tanh);
    return t;
}

// The lookups over [i0, i1).  GCC turns a table lookup into scalar loads and inserts, not a
// gather (its generic tuning), ~3 cycles an element; the AVX-512 level gathers 16 at a time.
#ifdef __AVX512F__
// to_bf16 on 16 lanes: round to nearest even; a NaN keeps its top bits and stays a NaN.
static inline __m256i bf16_round16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
#endif
static void gelu_lookup_y(const uint16_t *restrict tab, const uint16_t *x, uint16_t *y, size_t i0,
                          size_t i1) {
    size_t i = i0;
#ifdef __AVX512F__
    for (; i + 16 <= i1; i += 16) {
        const __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m512i w = _mm512_i32gather_epi32(idx, (const void *)tab, 2);
        _mm256_storeu_si256((__m256i *)(y + i), _mm512_cvtepi32_epi16(w));  // the low 16 bits: tab[x]
    }
#endif
    for (; i < i1; i++) y[i] = tab[x[i]];
}
static void gelu_lookup_dx(const float *restrict tab, const uint16_t *restrict x, const uint16_t *dy, uint16_t *dx,
                           size_t i0, size_t i1) {
    size_t i = i0;
#ifdef __AVX512F__
    for (; i + 16 <= i1; i += 16) {
        const __m512 g = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(x + i))), tab, 4);
        const __m512 d = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(dy + i))), 16));
        _mm256_storeu_si256((__m256i *)(dx + i), bf16_round16(_mm512_mul_ps(d, g)));
    }
#endif
    for (; i < i1; i++) dx[i] = to_bf16(from_bf16(dy[i]) * tab[x[i]]);
}

static void cpu_gelu_forward(Backend *be, GeluKind kind, const Act *x, Act *y, size_t n) {
    double t0 = cpu_prof_begin(be);
    if (act_bf16(be)) {
        const uint16_t *xh = act_ch(x), *tab = gelu_table(kind)->y;
        uint16_t *yh = act_h(y);
#pragma omp parallel for schedule(dynamic, 1) if (n >= CPU_PARALLEL_MIN_MEM)
        for (size_t i = 0; i < n; i += 16384) gelu_lookup_y(tab, xh, yh, i, i + 16384 < n ? i + 16384 : n);
    } else {
        const float *xf = act_cf(x);
        float *yf = act_f(y);
        if (kind == GELU_ERF) {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
            for (size_t i = 0; i < n; i++) yf[i] = gelu_erf(xf[i]);
        } else {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
            for (size_t i = 0; i < n; i++) yf[i] = gelu_tanh(xf[i]);
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_gelu_backward(Backend *be, GeluKind kind, const Act *x, const Act *dy,
                              Act *dx, size_t n) {
    double t0 = cpu_prof_begin(be);
    if (act_bf16(be)) {
        const uint16_t *xh = act_ch(x), *dyh = act_ch(dy);
        const float *tab = gelu_table(kind)->grad;
        uint16_t *dxh = act_h(dx);
#pragma omp parallel for schedule(dynamic, 1) if (n >= CPU_PARALLEL_MIN_MEM)
        for (size_t i = 0; i < n; i += 16384) gelu_lookup_dx(tab, xh, dyh, dxh, i, i + 16384 < n ? i + 16384 : n);
    } else {
        const float *xf = act_cf(x), *dyf = act_cf(dy);
        float *dxf = act_f(dx);
        if (kind == GELU_ERF) {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
            for (size_t i = 0; i < n; i++) dxf[i] = dyf[i] * gelu_erf_grad(xf[i]);
        } else {
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN)
            for (size_t i = 0; i < n; i++) dxf[i] = dyf[i] * gelu_tanh_grad(xf[i]);
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_tanh_forward(Backend *be, const Act *x, Act *y, size_t n) {
    double t0 = cpu_prof_begin(be);
    if (act_bf16(be)) {
        const uint16_t *xh = act_ch(x);
        uint16_t *yh = act_h(y);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) yh[i] = to_bf16(tanhf(from_bf16(xh[i])));
    } else {
        const float *xf = act_cf(x);
        float *yf = act_f(y);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) yf[i] = tanhf(xf[i]);
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// tanh' = 1 - tanh², from the saved output.
static void cpu_tanh_backward(Backend *be, const Act *y, const Act *dy, Act *dx, size_t n) {
    double t0 = cpu_prof_begin(be);
    if (act_bf16(be)) {
        const uint16_t *yh = act_ch(y), *dyh = act_ch(dy);
        uint16_t *dxh = act_h(dx);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) {
            const float v = from_bf16(yh[i]);
            dxh[i] = to_bf16(from_bf16(dyh[i]) * (1.0f - v * v));
        }
    } else {
        const float *yf = act_cf(y), *dyf = act_cf(dy);
        float *dxf = act_f(dx);
#pragma omp parallel for schedule(static) if (n >= CPU_PARALLEL_MIN)
        for (size_t i = 0; i < n; i++) dxf[i] = dyf[i] * (1.0f - yf[i] * yf[i]);
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_dropout(Backend *be, const Act *x, Act *y, size_t n, float p, uint64_t seed,
                        uint64_t offset) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    if (p <= 0.0f) {
        if (y != x) memcpy(y, x, n * dtype_size(be->act));
    } else {
        const float inv = 1.0f / (1.0f - p);
        const uint64_t key = ops_dropout_key(seed, offset);
        const uint32_t thr = ops_dropout_threshold(p);
        if (bf) {
            const uint16_t *xh = act_ch(x);
            uint16_t *yh = act_h(y);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
            for (size_t i = 0; i < n; i++)
                yh[i] = drop_bf16(ops_dropout_keep_fast(key, i, thr), from_bf16(xh[i]) * inv);
        } else {
            const float *xf = act_cf(x);
            float *yf = act_f(y);
#pragma omp parallel for schedule(dynamic, 16384) if (n >= CPU_PARALLEL_MIN_MEM)
            for (size_t i = 0; i < n; i++) yf[i] = ops_dropout_keep_fast(key, i, thr) ? xf[i] * inv : 0.0f;
        }
    }
    cpu_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void cpu_embedding_forward(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                  const float *word, const float *pos, const float *type, int B,
                                  int T, int D, Act *out) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *w = word + (size_t)ids[bt] * D, *p = pos + (size_t)t * D;
        const float *ty = type ? type + (size_t)(type_ids ? type_ids[bt] : 0) * D : NULL;
        if (bf) {
            uint16_t *o = act_h(out) + (size_t)bt * D;
            for (int c = 0; c < D; c++) o[c] = to_bf16(w[c] + p[c] + (ty ? ty[c] : 0.0f));
        } else {
            float *o = act_f(out) + (size_t)bt * D;
            for (int c = 0; c < D; c++) o[c] = w[c] + p[c] + (ty ? ty[c] : 0.0f);
        }
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// g[0, w) of one row of dout as fp32: the row itself (fp32) or its conversion into buf.
static inline const float *dout_block(const Backend *be, const Act *dout, size_t at, int w, float *buf) {
    if (!act_bf16(be)) return act_cf(dout) + at;
    bf16_load(act_ch(dout) + at, (size_t)w, buf);
    return buf;
}

// Scatter-add: threads split the D columns (blocks of 64), so rows hit twice never race.
static void cpu_embedding_backward(Backend *be, const Act *dout, const int32_t *ids,
                                   const int32_t *type_ids, int B, int T, int D, float *dword,
                                   float *dpos, float *dtype) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < D; c0 += 64) {
        const int w = D - c0 < 64 ? D - c0 : 64;
        float buf[64];
        for (int bt = 0; bt < B * T; bt++) {
            const float *g = dout_block(be, dout, (size_t)bt * D + c0, w, buf);
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

void cpu_install_nn(Backend *be) {
    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->residual_layernorm_forward = cpu_residual_layernorm_forward;
    be->layernorm_backward_dropout = cpu_layernorm_backward_dropout;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->tanh_forward = cpu_tanh_forward;
    be->tanh_backward = cpu_tanh_backward;
    be->dropout = cpu_dropout;
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
}
