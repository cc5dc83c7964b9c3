// defines: the activations and dropout: GELU (erf and tanh forms; bf16 by table lookup) forward
// and backward, tanh (the fine-tuning pooler) forward and backward, dropout.
#include <math.h>
#include <pthread.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

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

void cpu_install_activation(Backend *be) {
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->tanh_forward = cpu_tanh_forward;
    be->tanh_backward = cpu_tanh_backward;
    be->dropout = cpu_dropout;
}
