// The fused attention core's element passes over one block of scores (cpu_attention.c tiles):
// the forward's softmax numerators, the backward's probabilities and dS.  Plain C under
// `omp simd` (masks as selects), checked with -fopt-info-vec: every loop here vectorises.  One
// exception: the forward's mask at the avx512 level (mask_chunks_avx512, intrinsics).
//
// Dropout: the forward draws each element's mask with ops_dropout_keep_fast (the position hash
// CUDA and the reference core use) and saves it as bits (cpu_attention_fused.h mask_row); the
// backward reads the bits.  Rows go in chunks of 32 keys, one mask word each.
//
// bf16 mode computes exp with cpu_expf_bf16 (degree 4, relative error < 6e-6): its results are
// stored in bf16, where the degree-7 polynomial's extra digits do not survive; fp32 mode keeps
// cpu_expf_noover.
#include <math.h>
#include <string.h>
#include "kernels/cpu/cpu_attention_fused.h"
#ifdef FUSED_AMX
#include <immintrin.h>
#define MASK_AVX512 1
#endif

#include "kernels/cpu/cpu_bf16.h"
#include "kernels/cpu/cpu_math.h"

#define CHUNK 32

// Rows are split into whole chunks of CHUNK keys and a last partial one: the helpers below are
// inlined with n = CHUNK (a constant trip count: no loop prologue or epilogue per chunk) or the
// remainder.

// The mask word of n <= CHUNK keys whose first element index is `at`: bit k = keep(at + k).
static inline uint32_t keep_word(const Fused *a, uint64_t at, int n) {
    const uint64_t key = a->key;
    const uint32_t thr = a->thr;
    uint32_t w = 0;
#pragma omp simd reduction(| : w)
    for (int k = 0; k < n; k++) w |= (uint32_t)ops_dropout_keep_fast(key, at + (uint64_t)k, thr) << k;
    return w;
}
// The forward's dropout on n stored numerators (bf16 or fp32): zero where bit k of w is clear.
// to_bf16(0) is 0, so dropping after the rounding gives the bits rounding after dropping would.
static inline void drop_h(uint16_t *x, uint32_t w, int n) {
#pragma omp simd
    for (int k = 0; k < n; k++) x[k] = (w >> k) & 1u ? x[k] : 0;
}
static inline void drop_f(float *x, uint32_t w, int n) {
#pragma omp simd
    for (int k = 0; k < n; k++) x[k] = (w >> k) & 1u ? x[k] : 0.0f;
}
static inline void mask_chunk(const Fused *a, uint64_t at, int n, uint32_t *word, uint16_t *ph, float *row) {
    const uint32_t w = keep_word(a, at, n);
    *word = w;
    if (ph) drop_h(ph, w, n);
    else drop_f(row, w, n);
}
#ifdef MASK_AVX512
// ops_dropout_keep_fast on 8 consecutive keys a vector, from element index `at` on: both mask
// passes below draw through this one copy of the hash.  keep <=> (x >> 40) >= thr <=> x >= thr
// << 40 (thr < 2^24, unsigned): one shift fewer.
typedef struct {
    __m512i x, m1, m2, t, step;
} KeepHash8;
static inline __attribute__((always_inline)) KeepHash8 keep_hash8_at(const Fused *a, uint64_t at) {
    KeepHash8 h = {_mm512_add_epi64(_mm512_set1_epi64((long long)(a->key + at + OPS_MIX64_GOLDEN)),
                                    _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0)),
                   _mm512_set1_epi64((long long)OPS_MIX64_M1), _mm512_set1_epi64((long long)OPS_MIX64_M2),
                   _mm512_set1_epi64((long long)((uint64_t)a->thr << 40)), _mm512_set1_epi64(8)};
    return h;
}
// The next 8 keys' keep bits.
static inline __attribute__((always_inline)) __mmask8 keep_hash8_next(KeepHash8 *h) {
    __m512i x = _mm512_mullo_epi64(_mm512_xor_si512(h->x, _mm512_srli_epi64(h->x, 30)), h->m1);
    x = _mm512_mullo_epi64(_mm512_xor_si512(x, _mm512_srli_epi64(x, 27)), h->m2);
    h->x = _mm512_add_epi64(h->x, h->step);
    return _mm512_cmpge_epu64_mask(x, h->t);
}

// mask_chunk over `chunks` whole chunks at once (the avx512 level): ops_dropout_keep_fast on 8
// keys a vector, each comparison's mask register stored as a byte of the words (little-endian:
// byte k of word w holds keys 32w + 8k ..) and applied to the numerators by a masked move.  One
// pipelined loop: mask_chunk's word, an OR over shifted lanes, made a chain of dependent steps
// per 32 keys.  The hash's two 64-bit multiplies (vpmullq: 3 uops each on the one 512-bit
// multiply port) remain its cost.
static void mask_chunks_avx512(const Fused *a, uint64_t at, int chunks, uint32_t *words, uint16_t *ph,
                               float *row) {
    KeepHash8 hash = keep_hash8_at(a, at);
    uint8_t *bytes = (uint8_t *)words;
    for (int g = 0; g < chunks * (CHUNK / 8); g++) {
        const __mmask8 k = keep_hash8_next(&hash);
        bytes[g] = (uint8_t)k;
        if (ph) {
            const __m128i v = _mm_loadu_si128((const __m128i *)(ph + 8 * g));
            _mm_storeu_si128((__m128i *)(ph + 8 * g), _mm_maskz_mov_epi16(k, v));
        } else {
            _mm256_storeu_ps(row + 8 * g, _mm256_maskz_mov_ps(k, _mm256_loadu_ps(row + 8 * g)));
        }
    }
}
#endif

#ifdef MASK_AVX512
// The AMX path's rows (Fused.amx: the CPU has AMX, hence AVX512-BF16; cpu_amx.c checks both),
// in intrinsics: exp in base 2 (exp2_16) and the bf16 stores by vcvtneps2bf16 (round to nearest
// even, as to_bf16; it also flushes fp32 denormals, values below 1.2e-38, to 0): one vector
// instruction each for what the portable loops spend ~16 (exp) and ~8 (rounding) on.  The
// backward's rows go in pairs, to write the dropped P and dS as whole 64-byte rows of the packed
// B (one row alone fills every other bf16 of them: masked half-line stores, 20% slower than
// packing afterwards).
#define AMX_ROWS __attribute__((target("avx512f,avx512bw,avx512bf16")))
// 2^t on the lanes of `keep`, 0 elsewhere and where t < -126 (or NaN): k = round(t), f = t - k
// (exact), 2^f by CPU_EXP2_C*'s polynomial, times 2^k by vscalefps.  The callers fold log2(e)
// and the scale into the one FMA that forms t, where cpu_expf_bf16's form spent a subtraction,
// a multiply and two FMAs (Cody-Waite) per vector on x = (s - m) scale and r = x - k ln2.
// Relative error < 3e-6 plus t's own rounding (|t| 2^-24); cpu_expf_bf16's is 5.4e-6.  Lanes
// below -126 are masked off before vscalefps, whose result there would be subnormal.
AMX_ROWS static inline __m512 exp2_16(__m512 t, __mmask16 keep) {
    const __mmask16 live = _mm512_mask_cmp_ps_mask(keep, t, _mm512_set1_ps(CPU_EXP2_MIN), _CMP_GE_OQ);
    const __m512 magic = _mm512_set1_ps(CPU_EXP_ROUND);
    const __m512 k = _mm512_sub_ps(_mm512_add_ps(t, magic), magic);
    const __m512 f = _mm512_sub_ps(t, k);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(CPU_EXP2_C4), f, _mm512_set1_ps(CPU_EXP2_C3));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_C2));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(CPU_EXP2_C1));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, p, k);
}
AMX_ROWS static inline void store16_bf16(uint16_t *dst, __mmask16 m, __m512 v) {
    _mm256_mask_storeu_epi16(dst, m, (__m256i)_mm512_cvtneps_pbh(v));
}
static inline __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

// The forward's first pass over a row under AMX: the row maximum of x = in (kadd NULL) or of
// x = in sc + kadd (stored into row for the exp pass), and, with dropout (words non-NULL), the
// row's mask words, drawn in the same loop: the hash (two 64-bit multiplies per 8 keys) runs on
// the multiply port while the loads and maxima use the others, and the numerators are dropped
// as the exp pass stores them instead of by a pass of their own over the bf16 row.  Bits at and
// past je are 0, as mask_chunk leaves them.
AMX_ROWS static float max_mask_row_amx(const Fused *a, const float *in, float sc, const float *kadd, float *row,
                                       int je, uint64_t rb, uint32_t *words) {
    const __m512 s = _mm512_set1_ps(sc);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    KeepHash8 hash = keep_hash8_at(a, rb);
    for (int j = 0; j < je; j += CHUNK) {
        for (int half = 0; half < CHUNK; half += 16) {
            const int at = j + half;
            const __mmask16 l = lanes(je - at > 0 ? je - at : 0);
            __m512 x = _mm512_maskz_loadu_ps(l, in + at);
            if (kadd) {
                x = _mm512_fmadd_ps(x, s, _mm512_maskz_loadu_ps(l, kadd + at));
                _mm512_mask_storeu_ps(row + at, l, x);
            }
            mx = _mm512_mask_max_ps(mx, l, x, mx);  // a NaN score is passed over, as by the portable loop
        }
        if (!words) continue;
        uint32_t w = 0;
        for (int g = 0; g < CHUNK / 8; g++) w |= (uint32_t)keep_hash8_next(&hash) << (8 * g);
        words[j / CHUNK] = je - j >= CHUNK ? w : w & ((1u << (je - j)) - 1u);
    }
    return _mm512_reduce_max_ps(mx);
}
// Keys j .. j+15 (j a multiple of 16) of a row's mask words.
static inline __mmask16 kept16(const uint32_t *w, int j) { return (__mmask16)(w[j >> 5] >> (j & 16)); }

// Softmax numerators of one row: ph[j] = bf16(exp((in[j] - mx) esc)), 0 where the mask words w
// (NULL: none) drop key j; returns the sum of every visible key's numerator, dropped or not.
AMX_ROWS static float softmax_row_amx(const float *in, float mx, float esc, uint16_t *ph, int je, const uint32_t *w) {
    // t = (in - mx) esc log2(e) as one FMA.
    const float c = esc * CPU_EXP_LOG2E;
    const __m512 cv = _mm512_set1_ps(c), b = _mm512_set1_ps(-mx * c);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < je; j += 16) {
        const __mmask16 l = lanes(je - j);
        const __m512 e = exp2_16(_mm512_fmadd_ps(_mm512_maskz_loadu_ps(l, in + j), cv, b), l);
        sum = _mm512_add_ps(sum, e);
        store16_bf16(ph + j, l, w ? _mm512_maskz_mov_ps(kept16(w, j), e) : e);
    }
    return _mm512_reduce_add_ps(sum);
}
// Rows r and r + 1's 16 values of a key group, bf16, as one 64-byte row of pairs of the packed B
// (cpu_amx.h): dst is the pair's row in the group's block.
AMX_ROWS static inline void store_pair(uint16_t *dst, __m512 v0, __m512 v1) {
    const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v0));
    const __m512i hi = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v1));
    _mm512_storeu_si512(dst, _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
}
// Where rows (r, r + 1) of key group g go in a k-block-major pack of nbs column blocks.
static inline size_t pair_at(int r, int g, int nbs) {
    return ((size_t)(r / 32) * nbs + g) * 512 + (size_t)((r % 32) / 2) * 32;
}

// The backward's rows r, r + 1 at keys j .. j+15 (both passes' forms share these two): p =
// 2^((S sc + kadd - l) log2(e)), t formed by one FMA (lv = -l log2(e)); the dropped p stored
// packed k-block-major into Pdp (dV^T's B); k0, k1 the keep bits (all set without dropout).
#define ROWS_INLINE AMX_ROWS __attribute__((always_inline)) static inline
typedef struct {
    const float *in0, *in1, *kadd;
    const uint32_t *w0, *w1;
    int je0, je1, r, nk;
    uint16_t *Pdp;
    __m512 s, k, lg, lv0, lv1;
} PairRows;
ROWS_INLINE void pair_probs16(const PairRows *c, int j, __m512 *e0, __m512 *e1, __mmask16 *k0, __mmask16 *k1) {
    const __mmask16 m0 = lanes(c->je0 - j > 0 ? c->je0 - j : 0), m1 = lanes(c->je1 - j > 0 ? c->je1 - j : 0);
    *k0 = c->w0 ? kept16(c->w0, j) : (__mmask16)0xffff;
    *k1 = c->w1 ? kept16(c->w1, j) : (__mmask16)0xffff;
    const __m512 x0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m0, c->in0 + j), c->s, _mm512_maskz_loadu_ps(m0, c->kadd + j));
    const __m512 x1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m1, c->in1 + j), c->s, _mm512_maskz_loadu_ps(m1, c->kadd + j));
    *e0 = exp2_16(_mm512_fmadd_ps(x0, c->lg, c->lv0), m0);
    *e1 = exp2_16(_mm512_fmadd_ps(x1, c->lg, c->lv1), m1);
    store_pair(c->Pdp + pair_at(c->r, j / 16, c->nk / 16), c->w0 ? _mm512_maskz_mul_ps(*k0, *e0, c->k) : *e0,
               c->w1 ? _mm512_maskz_mul_ps(*k1, *e1, c->k) : *e1);
}
// dS of the two rows at keys j .. j+15 into g (df), the dr rows (bf16, row-major for dQ; NULL:
// none) and dSp (packed for dK^T; NULL: none).
ROWS_INLINE void pair_store_ds16(__m512 d0, __m512 d1, int j, int df, float *g0, float *g1, uint16_t *dr0,
                                 uint16_t *dr1, uint16_t *dSp, int r, int nk) {
    if (df) {
        _mm512_storeu_ps(g0 + j, d0);
        _mm512_storeu_ps(g1 + j, d1);
    }
    if (dr0) {
        store16_bf16(dr0 + j, 0xffff, d0);
        store16_bf16(dr1 + j, 0xffff, d1);
    }
    if (dSp) store_pair(dSp + pair_at(r, j / 16, nk / 16), d0, d1);
}
// dS = p ⊙ (g' - D) at keys j .. j+15 of one row, g' = kept ? g inv : 0 (g: dP = G V^T).
ROWS_INLINE __m512 ds16(__m512 p, const float *g, int j, __mmask16 kept, __m512 inv, __m512 D) {
    return _mm512_mul_ps(p, _mm512_sub_ps(_mm512_maskz_mul_ps(kept, _mm512_loadu_ps(g + j), inv), D));
}

// The backward in one pass over rows r, r + 1 (every one of nk keys: 0 from je on), D, the
// rows' Σ_j p g', given (cpu_attention.c takes it as G · O): neither p nor a dot product needs a
// pass of its own over the block.
AMX_ROWS static void grads_pair_amx(const PairRows *cp, float *g0, float *g1, float D0, float D1, int df, uint16_t *dr0,
                                    uint16_t *dr1, uint16_t *dSp) {
    const PairRows rows = *cp, *c = &rows;  // a local copy: __m512 may alias the stores below
    const __m512 d0v = _mm512_set1_ps(D0), d1v = _mm512_set1_ps(D1);
    for (int j = 0; j < c->nk; j += 16) {
        __m512 e0, e1;
        __mmask16 k0, k1;
        pair_probs16(c, j, &e0, &e1, &k0, &k1);
        pair_store_ds16(ds16(e0, g0, j, k0, c->k, d0v), ds16(e1, g1, j, k1, c->k, d1v), j, df, g0, g1, dr0, dr1, dSp,
                        c->r, c->nk);
    }
}
// The two-pass form: p into the fp32 rows p0, p1 and D = Σ_j p g' (first pass), then dS from
// the stored p (second).
AMX_ROWS static void probs_ds_pair_amx(const PairRows *cp, float *g0, float *g1, float *p0, float *p1, int df,
                                       uint16_t *dr0, uint16_t *dr1, uint16_t *dSp) {
    const PairRows rows = *cp, *c = &rows;  // a local copy: __m512 may alias the stores below
    __m512 dot0 = _mm512_setzero_ps(), dot1 = _mm512_setzero_ps();
    for (int j = 0; j < c->nk; j += 16) {
        __m512 e0, e1;
        __mmask16 k0, k1;
        pair_probs16(c, j, &e0, &e1, &k0, &k1);
        _mm512_storeu_ps(p0 + j, e0);
        _mm512_storeu_ps(p1 + j, e1);
        dot0 = _mm512_fmadd_ps(e0, _mm512_maskz_mul_ps(k0, _mm512_loadu_ps(g0 + j), c->k), dot0);
        dot1 = _mm512_fmadd_ps(e1, _mm512_maskz_mul_ps(k1, _mm512_loadu_ps(g1 + j), c->k), dot1);
    }
    const __m512 d0v = _mm512_set1_ps(_mm512_reduce_add_ps(dot0)), d1v = _mm512_set1_ps(_mm512_reduce_add_ps(dot1));
    for (int j = 0; j < c->nk; j += 16) {
        const __mmask16 k0 = c->w0 ? kept16(c->w0, j) : (__mmask16)0xffff;
        const __mmask16 k1 = c->w1 ? kept16(c->w1, j) : (__mmask16)0xffff;
        pair_store_ds16(ds16(_mm512_loadu_ps(p0 + j), g0, j, k0, c->k, d0v),
                        ds16(_mm512_loadu_ps(p1 + j), g1, j, k1, c->k, d1v), j, df, g0, g1, dr0, dr1, dSp, c->r, c->nk);
    }
}
void grads_block(const Fused *a, int i0, int rows, int nk, int ld, const float *Sin, const float *kadd,
                 const float *lse, const float *D, float *P, float *dP, int df, uint16_t *Pdp, uint16_t *dSh,
                 uint16_t *dSp, const uint32_t *mask) {
    const AttnShape *s = a->s;
    const size_t mw = mask_words(s->T);
    for (int r = 0; r < rows; r += 2) {
        const float l0 = lse[i0 + r], l1 = lse[i0 + r + 1];
        const int je0 = l0 > -INFINITY ? row_end(s, i0 + r, nk) : 0;
        const int je1 = l1 > -INFINITY ? row_end(s, i0 + r + 1, nk) : 0;
        const uint32_t *w0 = a->drop ? mask + (size_t)r * mw : NULL;
        const uint32_t *w1 = a->drop ? mask + (size_t)(r + 1) * mw : NULL;
        const PairRows c = {Sin + (size_t)r * ld, Sin + (size_t)(r + 1) * ld, kadd, w0, w1, je0, je1, r, nk, Pdp,
                            _mm512_set1_ps(a->in_scale), _mm512_set1_ps(a->keep_scale),
                            _mm512_set1_ps(CPU_EXP_LOG2E), _mm512_set1_ps(-l0 * CPU_EXP_LOG2E),
                            _mm512_set1_ps(-l1 * CPU_EXP_LOG2E)};
        float *g0 = dP + (size_t)r * ld, *g1 = dP + (size_t)(r + 1) * ld;
        uint16_t *dr0 = dSh ? dSh + (size_t)r * nk : NULL, *dr1 = dSh ? dSh + (size_t)(r + 1) * nk : NULL;
        if (D) grads_pair_amx(&c, g0, g1, D[r], D[r + 1], df, dr0, dr1, dSp);
        else probs_ds_pair_amx(&c, g0, g1, P + (size_t)r * ld, P + (size_t)(r + 1) * ld, df, dr0, dr1, dSp);
    }
}

#endif

// The backward's P = exp(S + kadd - l) (S read from `in`, which may be p) and dropped P of n
// keys, mask word w.
static inline void probs_h(const float *in, float sc, float *p, const float *kadd, float l, uint16_t *ph, uint32_t w,
                           float ks, int n) {
#pragma omp simd
    for (int k = 0; k < n; k++) {
        const float e = cpu_expf_bf16(in[k] * sc + kadd[k] - l);
        p[k] = e;
        ph[k] = to_bf16((w >> k) & 1u ? e * ks : 0.0f);
    }
}
static inline void probs_f(const float *in, float *p, const float *kadd, float l, float *pf, uint32_t w, float ks,
                           int n) {
#pragma omp simd
    for (int k = 0; k < n; k++) {
        const float e = cpu_expf_noover(in[k] + kadd[k] - l);
        p[k] = e;
        pf[k] = (w >> k) & 1u ? e * ks : 0.0f;
    }
}

// Softmax numerators of block rows [i0, i0+rows): e = exp(S + kadd - max) on visible keys, 0
// on masked ones (kadd = -inf) and above the diagonal, times the dropout mask, into Ph (bf16
// mode) or S; rs[r] = keep_scale / Σ e is applied to the P V rows afterwards (one
// multiply per output element instead of a third pass over the scores).  lse[i] saved; a row
// with no visible key is all 0 with lse = -inf and rs = 0 (its mask words are never read).
// The scores are read from Sin: S itself, or the block every head shares (mhe_add, mhe_mul,
// sha), read where it is rather than copied into S for each head.
void softmax_block(const Fused *a, int b, int h, int i0, int rows, int nk, int ld, const float *Sin, float *S,
                   const float *kadd, float *lse, uint16_t *Ph, float *rs, uint32_t *mask) {
    const AttnShape *s = a->s;
    const size_t mw = mask_words(s->T);
    const float sc = a->in_scale;
    for (int r = 0; r < rows; r++) {
        const int i = i0 + r, je = row_end(s, i, nk);
        float *row = S + (size_t)r * ld;
        const float *in = Sin + (size_t)r * ld;
        uint16_t *ph = Ph ? Ph + (size_t)r * nk : NULL;
        uint32_t *mrow = mask ? mask + (size_t)r * mw : NULL;
        float mx = -INFINITY, esc = sc;  // esc: the factor left for the exp (the raw scores' when kzero)
        const uint64_t rb = drop_base(s, b, h, i);
#ifdef MASK_AVX512
        if (a->amx) {
            mx = max_mask_row_amx(a, in, sc, a->kzero ? NULL : kadd, row, je, rb, a->drop ? mrow : NULL);
            if (!a->kzero) in = row, esc = 1.0f;
        } else
#endif
        if (a->kzero) {
            // Nothing to add (mha and mhe_mul without padding): the pass only reads.
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) mx = in[j] > mx ? in[j] : mx;
        } else {
#pragma omp simd reduction(max : mx)
            for (int j = 0; j < je; j++) {
                const float x = in[j] * sc + kadd[j];
                row[j] = x;
                mx = x > mx ? x : mx;
            }
            in = row;  // the scores with the key bias, as the exp reads them
            esc = 1.0f;
        }
        if (mx == -INFINITY) {
            if (ph) memset(ph, 0, (size_t)nk * sizeof *ph);
            else memset(row, 0, (size_t)nk * sizeof *row);
            lse[i] = -INFINITY;
            rs[r] = 0.0f;
            continue;
        }
        float sum = 0;
#ifdef MASK_AVX512
        if (a->amx) {
            // The mask words are drawn (max_mask_row_amx) and the numerators dropped as stored.
            sum = softmax_row_amx(in, mx, esc, ph, je, a->drop ? mrow : NULL);
        } else
#endif
        if (ph) {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                const float e = cpu_expf_bf16((in[j] - mx) * esc);
                sum += e;
                ph[j] = to_bf16(e);
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j < je; j++) {
                const float e = cpu_expf_noover(in[j] - mx);
                sum += e;
                row[j] = e;
            }
        }
        // The mask in a pass of its own: fused into the exp loop, its word per chunk split that
        // loop (and its sum) into 32-key pieces, 50% slower than the two passes.
        if (a->drop && !a->amx) {
            int j0 = 0;
#ifdef MASK_AVX512
            j0 = je / CHUNK * CHUNK;
            mask_chunks_avx512(a, rb, je / CHUNK, mrow, ph, row);
#endif
            for (; j0 + CHUNK <= je; j0 += CHUNK)
                mask_chunk(a, rb + (uint64_t)j0, CHUNK, mrow + j0 / CHUNK, ph ? ph + j0 : NULL, row + j0);
            if (j0 < je) mask_chunk(a, rb + (uint64_t)j0, je - j0, mrow + j0 / CHUNK, ph ? ph + j0 : NULL, row + j0);
        }
        if (je < nk) {
            if (ph) memset(ph + je, 0, (size_t)(nk - je) * sizeof *ph);
            else memset(row + je, 0, (size_t)(nk - je) * sizeof *row);
        }
        rs[r] = a->keep_scale / sum;
        lse[i] = mx * esc + logf(sum);
    }
}

// P = exp(S + kadd - lse) on visible keys (0 elsewhere) and, in the same pass, with dropout or
// in bf16 mode, the dropped P as the products read it (Pdh in bf16, or Pdf in fp32), the mask
// read from the forward's bits.
void probs_block(const Fused *a, int i0, int rows, int nk, int ld, const float *Pin, float *P, const float *kadd,
                 const float *lse, float *Pdf, uint16_t *Pdh, const uint32_t *mask) {
    const AttnShape *s = a->s;
    const float ks = a->keep_scale, sc = a->in_scale;
    const size_t mw = mask_words(s->T);
    for (int r = 0; r < rows; r++) {
        const int i = i0 + r;
        const float l = lse[i];
        const int je = l > -INFINITY ? row_end(s, i, nk) : 0;
        float *row = P + (size_t)r * ld;
        const float *in = Pin + (size_t)r * ld;
        uint16_t *ph = Pdh ? Pdh + (size_t)r * nk : NULL;
        float *pf = Pdf + (size_t)r * ld;
        const uint32_t *mrow = mask ? mask + (size_t)r * mw : NULL;
        if (a->drop) {
            int j0 = 0;
            for (; j0 + CHUNK <= je; j0 += CHUNK) {
                if (ph) probs_h(in + j0, sc, row + j0, kadd + j0, l, ph + j0, mrow[j0 / CHUNK], ks, CHUNK);
                else probs_f(in + j0, row + j0, kadd + j0, l, pf + j0, mrow[j0 / CHUNK], ks, CHUNK);
            }
            if (j0 < je) {
                if (ph) probs_h(in + j0, sc, row + j0, kadd + j0, l, ph + j0, mrow[j0 / CHUNK], ks, je - j0);
                else probs_f(in + j0, row + j0, kadd + j0, l, pf + j0, mrow[j0 / CHUNK], ks, je - j0);
            }
        } else if (ph) {
#pragma omp simd
            for (int j = 0; j < je; j++) {
                const float p = cpu_expf_bf16(in[j] * sc + kadd[j] - l);
                row[j] = p;
                ph[j] = to_bf16(p);
            }
        } else {
#pragma omp simd
            for (int j = 0; j < je; j++) row[j] = cpu_expf_noover(in[j] + kadd[j] - l);
        }
        if (je < nk) {
            memset(row + je, 0, (size_t)(nk - je) * sizeof *row);
            if (ph) memset(ph + je, 0, (size_t)(nk - je) * sizeof *ph);
            else if (a->drop) memset(pf + je, 0, (size_t)(nk - je) * sizeof *pf);
        }
    }
}

// dS = P ⊙ (dP' - rowsum(P ⊙ dP')) with dP' = dP ⊙ keep/(1-p), into dP (fp32, when df) and dSh
// (bf16).  The mask is read off the dropped P (0 where dropped or where P = 0, and there dS = 0
// whatever dP is) inside both passes rather than stored by a pass of its own (the AMX path,
// grads_block, reads the mask words instead).
void ds_block(const Fused *a, int rows, int nk, int ld, const float *P, float *dP, const float *Pdf,
              const uint16_t *Pdh, int df, uint16_t *dSh) {
    const float inv = a->keep_scale;
    for (int r = 0; r < rows; r++) {
        const float *pr = P + (size_t)r * ld;
        float *gr = dP + (size_t)r * ld;
        const uint16_t *mh = a->drop && Pdh ? Pdh + (size_t)r * nk : NULL;
        const float *mf = a->drop && !Pdh ? Pdf + (size_t)r * ld : NULL;
        uint16_t *dr = dSh ? dSh + (size_t)r * nk : NULL;
        float dot = 0;
        if (mh) {
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < nk; j++) dot += pr[j] * (mh[j] != 0 ? gr[j] * inv : 0.0f);
        } else if (mf) {
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < nk; j++) dot += pr[j] * (mf[j] != 0.0f ? gr[j] * inv : 0.0f);
        } else {
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j < nk; j++) dot += pr[j] * gr[j];
        }
        // Without dropout every visible key is kept (inv = 1): one loop with a mask of ones.
        if (mh && dr && df) {
#pragma omp simd
            for (int j = 0; j < nk; j++) {
                const float d = pr[j] * ((mh[j] != 0 ? gr[j] * inv : 0.0f) - dot);
                gr[j] = d;
                dr[j] = to_bf16(d);
            }
        } else if (mh && dr) {
#pragma omp simd
            for (int j = 0; j < nk; j++) dr[j] = to_bf16(pr[j] * ((mh[j] != 0 ? gr[j] * inv : 0.0f) - dot));
        } else if (mh) {
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pr[j] * ((mh[j] != 0 ? gr[j] * inv : 0.0f) - dot);
        } else if (mf) {
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pr[j] * ((mf[j] != 0.0f ? gr[j] * inv : 0.0f) - dot);
        } else if (dr && df) {
#pragma omp simd
            for (int j = 0; j < nk; j++) {
                const float d = pr[j] * (gr[j] - dot);
                gr[j] = d;
                dr[j] = to_bf16(d);
            }
        } else if (dr) {
#pragma omp simd
            for (int j = 0; j < nk; j++) dr[j] = to_bf16(pr[j] * (gr[j] - dot));
        } else {
#pragma omp simd
            for (int j = 0; j < nk; j++) gr[j] = pr[j] * (gr[j] - dot);
        }
    }
}

