// The softmax cross-entropy of the CPU backend (ops.h cross_entropy_forward / _backward): the
// loss over the vocabulary head's logits, one row per scored token.
//
// The portable loops compute exp with cpu_expf_noover and round with to_bf16.  At the avx512 level
// on a CPU with AVX512-BF16, bf16 rows take the same arithmetic in intrinsics (ce_*_bf16 below):
// the same degree-7 polynomial, reduction and 2^k, but 2^k and the rounding one instruction each
// (vcvtneps2bf16: nearest even as to_bf16, fp32 subnormals, below 1.2e-38, flushed to 0) and the
// sum's terms widened to double 16 at a time.  GCC's vectorised loop spent ~1.8 cycles a logit
// there (the loss was 4% of a `small` bf16 step on an AMX Xeon: 614 rows x 30,522 logits).
#include <math.h>
#include <string.h>
#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define CE_AVX512 1
#endif

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_math.h"

#ifdef CE_AVX512
#define CE_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
static inline __m512 load16_bf16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
// cpu_expf_noover on 16 lanes, step for step (cpu_exp_reduce's unfused k, fmaf's fused steps).
CE_BF16 static inline __m512 exp16_noover(__m512 x) {
    const __m512 lo = _mm512_set1_ps(CPU_EXP_MIN), round = _mm512_set1_ps(CPU_EXP_ROUND);
    // x < -87.33 gives 0 (a NaN is not below it: it stays NaN, and so does a loss it enters).
    const __mmask16 live = (__mmask16)~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    const __m512 xc = _mm512_mask_blend_ps(live, lo, x);
    const __m512 k = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(CPU_EXP_LOG2E)), round), round);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-CPU_EXP_LN2_HI), xc);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(-CPU_EXP_LN2_LO), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(bits));
}
// A bf16 row's maximum and Σ exp(z - max) (in double), as ce_row_sum computes them.
CE_BF16 static double ce_row_sum_bf16(const uint16_t *z, int V, float *max_out) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    int v = 0;
    for (; v + 16 <= V; v += 16) m = _mm512_max_ps(m, load16_bf16(z + v));
    float mx = _mm512_reduce_max_ps(m);
    for (; v < V; v++) mx = from_bf16(z[v]) > mx ? from_bf16(z[v]) : mx;
    const __m512 mv = _mm512_set1_ps(mx);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (v = 0; v + 16 <= V; v += 16) {
        const __m512 e = exp16_noover(_mm512_sub_ps(load16_bf16(z + v), mv));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    double s = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
    for (; v < V; v++) s += cpu_expf_noover(from_bf16(z[v]) - mx);
    *max_out = mx;
    return s;
}
// g[v] = bf16(scale exp(z[v] - l)) over a bf16 row (g may alias z).
CE_BF16 static void ce_grad_row_bf16(const uint16_t *z, float l, float scale, int V, uint16_t *g) {
    const __m512 lv = _mm512_set1_ps(l), sv = _mm512_set1_ps(scale);
    int v = 0;
    for (; v + 16 <= V; v += 16) {
        const __m512 e = exp16_noover(_mm512_sub_ps(load16_bf16(z + v), lv));
        _mm256_storeu_si256((__m256i *)(g + v), (__m256i)_mm512_cvtneps_pbh(_mm512_mul_ps(sv, e)));
    }
    for (; v < V; v++) g[v] = to_bf16(scale * cpu_expf_noover(from_bf16(z[v]) - l));
}
// bf16 rows on a CPU with AVX512-BF16 (the avx512 level also runs on CPUs without it).
static int ce_fast(const Backend *be) { return act_bf16(be) && __builtin_cpu_supports("avx512bf16"); }
#endif

// Row maximum and Σ exp(z - max) of one row of logits (either storage type), the terms in
// float and the sum in double.  In blocks through a buffer: GCC does not vectorise cpu_expf and
// the widening sum in one loop (it stayed scalar, ~3 ns per logit).
static double ce_row_sum(const Act *logits, int bf, size_t at, int V, float *max_out) {
    const float *zf = bf ? NULL : act_cf(logits) + at;
    const uint16_t *zh = bf ? act_ch(logits) + at : NULL;
    float mx;
    if (bf) {
        mx = from_bf16(zh[0]);
#pragma omp simd reduction(max : mx)
        for (int v = 1; v < V; v++) mx = from_bf16(zh[v]) > mx ? from_bf16(zh[v]) : mx;
    } else {
        mx = zf[0];
#pragma omp simd reduction(max : mx)
        for (int v = 1; v < V; v++) mx = zf[v] > mx ? zf[v] : mx;
    }
    double s = 0;
    float e[256];
    for (int v0 = 0; v0 < V; v0 += 256) {
        const int w = V - v0 < 256 ? V - v0 : 256;
        if (bf) {
#pragma omp simd
            for (int v = 0; v < w; v++) e[v] = cpu_expf_noover(from_bf16(zh[v0 + v]) - mx);
        } else {
#pragma omp simd
            for (int v = 0; v < w; v++) e[v] = cpu_expf_noover(zf[v0 + v] - mx);
        }
#pragma omp simd reduction(+ : s)
        for (int v = 0; v < w; v++) s += e[v];
    }
    *max_out = mx;
    return s;
}

// Logits of either storage type; the loss and lse are reduced and stored in fp32.
static void cpu_cross_entropy_forward(Backend *be, const Act *logits, const int32_t *labels,
                                      int N, int V, int ld, float *loss, float *lse) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
#ifdef CE_AVX512
    const int fast = ce_fast(be);
#endif
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * V >= CPU_PARALLEL_MIN)
    for (int r = 0; r < N; r++) {
        if (labels[r] < 0) {
            loss[r] = 0.0f;
            lse[r] = 0.0f;
            continue;
        }
        const size_t at = (size_t)r * ld;
        float mx;
        double s;
#ifdef CE_AVX512
        if (fast)
            s = ce_row_sum_bf16(act_ch(logits) + at, V, &mx);
        else
#endif
            s = ce_row_sum(logits, bf, at, V, &mx);
        const double l = mx + log(s);
        const float zl = bf ? from_bf16(act_ch(logits)[at + labels[r]]) : act_cf(logits)[at + labels[r]];
        lse[r] = (float)l;
        loss[r] = (float)(l - zl);
    }
    cpu_prof_end(be, OPC_LOSS, t0, 0);
}

static void cpu_cross_entropy_backward(Backend *be, const Act *logits, const float *lse,
                                       const int32_t *labels, int N, int V, int ld,
                                       float grad_scale, Act *dlogits) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
    const size_t es = dtype_size(be->act);
#ifdef CE_AVX512
    const int fast = ce_fast(be);
#endif
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)N * V >= CPU_PARALLEL_MIN)
    for (int r = 0; r < N; r++) {
        const size_t at = (size_t)r * ld;
        const int label = labels[r];
        const float l = lse[r];
        // The padding past V, and unlabelled rows whole, are zero in either storage type.
        char *row = (char *)dlogits + at * es;
        memset(row + (size_t)V * es, 0, (size_t)(ld - V) * es);
        if (label < 0) {
            memset(row, 0, (size_t)V * es);
            continue;
        }
        if (bf) {
            const uint16_t *z = act_ch(logits) + at;
            uint16_t *g = act_h(dlogits) + at;
            // The label's logit before g (which may alias the logits) overwrites it, so its
            // gradient is rounded once, after the one-hot is subtracted.
            const float zl = from_bf16(z[label]);
#ifdef CE_AVX512
            if (fast) {
                ce_grad_row_bf16(z, l, grad_scale, V, g);
            } else
#endif
            {
#pragma omp simd
                for (int v = 0; v < V; v++) g[v] = to_bf16(grad_scale * cpu_expf_noover(from_bf16(z[v]) - l));
            }
            g[label] = to_bf16(grad_scale * cpu_expf_noover(zl - l) - grad_scale);
        } else {
            const float *z = act_cf(logits) + at;
            float *g = act_f(dlogits) + at;
#pragma omp simd
            for (int v = 0; v < V; v++) g[v] = grad_scale * cpu_expf_noover(z[v] - l);
            g[label] -= grad_scale;
        }
    }
    cpu_prof_end(be, OPC_LOSS, t0, 0);
}

void cpu_install_loss(Backend *be) {
    be->cross_entropy_forward = cpu_cross_entropy_forward;
    be->cross_entropy_backward = cpu_cross_entropy_backward;
}
