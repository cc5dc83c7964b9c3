// Vectorisable float exp, erf and tanh for the CPU backend's loops.  glibc's expf/erff/tanhf
// are scalar calls that stop GCC from vectorising a loop; these are plain arithmetic that it
// turns into AVX/AVX-512 code.
//
// Accuracy (checked against double in tests/model/test_cpu_ops.c):
//   cpu_expf   relative error < 3e-7 for x in [-87, 88]; 0 below -87.33, +inf above 88.72
//   cpu_expf_noover  cpu_expf's value for x <= 88.72 (no overflow select: softmax, loss)
//   cpu_expf_bf16    relative error < 6e-6 on [-87, 88], 0 below -87.33 (values stored in bf16;
//                    no overflow select, as cpu_expf_noover)
//   cpu_erff   absolute error < 5e-7 (Abramowitz & Stegun 7.1.26 with cpu_expf)
//   cpu_tanhf  absolute error < 3e-7 (1 - 2 / (exp(2x) + 1))
#ifndef MHE_KERNELS_CPU_MATH_H
#define MHE_KERNELS_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

// The exp functions' constants, named so the AMX path's vector exp (cpu_attention_rows.c) is
// this one: the lowest argument (exp is 0 below it), 1.5 * 2^23 (adding and subtracting it
// rounds to an integer), log2(e), ln 2 in two parts, and cpu_expf_bf16's polynomial.
#define CPU_EXP_MIN (-87.33f)
#define CPU_EXP_ROUND 12582912.0f
#define CPU_EXP_LOG2E 1.44269504088896341f
#define CPU_EXP_LN2_HI 0.693145751953125f
#define CPU_EXP_LN2_LO 1.428606765330187045e-6f
#define CPU_EXP_BF16_C4 0.041277747601270676f
#define CPU_EXP_BF16_C3 0.16753514111042023f
#define CPU_EXP_BF16_C2 0.5000511407852173f
// The AMX attention rows' 2^f on [-1/2, 1/2] (cpu_attention_rows.c exp2_16): degree 4, fitted
// for relative error (2.9e-6 evaluated in fp32), the constant term 1 so 2^0 is exact.
#define CPU_EXP2_C1 6.931241751e-01f
#define CPU_EXP2_C2 2.402409911e-01f
#define CPU_EXP2_C3 5.590640008e-02f
#define CPU_EXP2_C4 9.582829662e-03f
// log2 of the smallest normal float: exp2_16 is 0 below it, as cpu_expf_bf16 below CPU_EXP_MIN.
#define CPU_EXP2_MIN (-126.0f)

// The exp functions' range reduction: x = k ln2 + r with |r| <= ln2/2 (ln2 split in two so
// k ln2 is exact); returns r and sets *k.
static inline float cpu_exp_reduce(float x, float *k) {
    // Selects, not fminf/fmaxf: those are library calls (NaN rules) that block vectorising.
    const float xc = x < CPU_EXP_MIN ? CPU_EXP_MIN : x;
    // Round to nearest by adding 1.5 * 2^23 (floorf does not vectorise without -ffast-math).
    *k = (xc * CPU_EXP_LOG2E + CPU_EXP_ROUND) - CPU_EXP_ROUND;
    const float r = fmaf(*k, -CPU_EXP_LN2_HI, xc);
    return fmaf(*k, -CPU_EXP_LN2_LO, r);
}

// exp(x) = p 2^k from exp(r) = p, 2^k from the exponent bits; 0 below -87.33.
static inline float cpu_exp_scale(float p, float k, float x) {
    const int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    const float y = p * scale;
    return x < CPU_EXP_MIN ? 0.0f : y;
}

// exp(r) by its degree-7 Taylor polynomial (truncation < 1e-8 relative for |r| <= ln2/2).  For
// arguments that cannot overflow (x <= 88.72: softmax's x - max and x - lse, which are <= 0);
// cpu_expf below adds the overflow select.
static inline float cpu_expf_noover(float x) {
    float k;
    const float r = cpu_exp_reduce(x, &k);
    float p = 1.0f / 5040.0f;
    p = fmaf(p, r, 1.0f / 720.0f);
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return cpu_exp_scale(p, k, x);
}

// cpu_expf_noover for values stored in bf16 (the fused attention core's probabilities in bf16
// runs): exp(r) by a degree-4 polynomial fitted for relative error over |r| <= ln2/2 (max
// 5.4e-6, measured in fp32 over 4e5 points), 1/360 of bf16's half-ulp (2^-9): it moves about
// one stored value in 300 by one bf16 ulp, against three fused multiply-adds fewer than the
// degree-7 one.  The fp32 results that feed the row sums carry the same 5.4e-6.
static inline float cpu_expf_bf16(float x) {
    float k;
    const float r = cpu_exp_reduce(x, &k);
    float p = CPU_EXP_BF16_C4;
    p = fmaf(p, r, CPU_EXP_BF16_C3);
    p = fmaf(p, r, CPU_EXP_BF16_C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return cpu_exp_scale(p, k, x);
}

static inline float cpu_expf(float x) {
    const float y = cpu_expf_noover(x > 88.72f ? 88.72f : x);
    return x > 88.72f ? INFINITY : y;
}

// erf(x) = 1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-x²), t = 1 / (1 + p|x|), odd;
// cpu_erff_with_exp takes exp(-x²) from the caller (GELU's backward has it already).
static inline float cpu_erff_with_exp(float x, float exp_mx2) {
    const float ax = fabsf(x);
    const float t = 1.0f / fmaf(0.3275911f, ax, 1.0f);
    float q = 1.061405429f;
    q = fmaf(q, t, -1.453152027f);
    q = fmaf(q, t, 1.421413741f);
    q = fmaf(q, t, -0.284496736f);
    q = fmaf(q, t, 0.254829592f);
    const float y = 1.0f - q * t * exp_mx2;
    return copysignf(y, x);
}
static inline float cpu_erff(float x) { return cpu_erff_with_exp(x, cpu_expf_noover(-x * x)); }

static inline float cpu_tanhf(float x) {
    // Saturates to ±1 through exp overflow/underflow; no NaN for large |x|.
    return 1.0f - 2.0f / (cpu_expf(2.0f * x) + 1.0f);
}

#endif
