// What the fused attention core's two files share: the call's constants (Fused) and the element
// passes over a block of scores (cpu_attention_rows.c), which cpu_attention.c's tiling calls.
#ifndef MHE_KERNELS_CPU_ATTENTION_FUSED_H
#define MHE_KERNELS_CPU_ATTENTION_FUSED_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu_attention.h"

// The AMX path's element rows are AVX-512 intrinsics: built at the avx512 level only, and
// Fused.amx is set only where they were.
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__AVX512BW__)
#define FUSED_AMX 1
#endif

typedef struct {
    const AttnShape *s;
    CpuGemm *g;
    int bf16;
    int bq, nqb;         // query rows per block, blocks per sequence
    Src q, k, v;
    int kzero;           // no key bias or mask: the scores' additive term is 0
    int drop;
    float keep_scale;
    uint64_t key;
    uint32_t thr;
    int amx;             // the products on AMX tiles (cpu_amx.h); else oneDNN
    float in_scale;      // the raw scores' factor the element passes apply: s->scale under AMX
                         // (its products store Q K^T unscaled), 1 where oneDNN applied it
    int d_from_o;        // AMX, T >= 8 v_dim: the backward's rowsum(P ⊙ dP') as G · O (O, the
                         // unscaled P V, saved by the forward), its element work in one pass
} Fused;

static inline int row_end(const AttnShape *s, int i, int nk) { return s->causal ? i + 1 : nk; }
static inline uint64_t drop_base(const AttnShape *s, int b, int h, int i) {
    return (((uint64_t)b * s->n_heads + h) * (uint64_t)s->T + (uint64_t)i) * (uint64_t)s->T;
}

// The dropout mask as the forward drew it: bit j % 32 of word j / 32 of row (b, h, i) is
// keep(i, j), so the backward reads the mask instead of hashing every element again (the hash,
// 64-bit multiplies, was ~10% of the core's time in each direction).  Rows of mask_words(T)
// words, [B, n, T, words], saved after the lse and the unscaled P V.
static inline size_t mask_words(int T) { return ((size_t)T + 31) / 32; }
static inline size_t mask_row(const AttnShape *s, int b, int h, int i) {
    return (((size_t)b * s->n_heads + h) * s->T + i) * mask_words(s->T);
}

// Softmax numerators of block rows [i0, i0+rows) of head h, sequence b (see the definitions).
// ld: the row stride of the fp32 blocks (S, Sin, P, Pin, Pdf, dP); the bf16 ones are nk apart.
// mask: the block's first row's mask words (written when a->drop).
// Sin: the raw scores it reads (S itself, or a block every head shares, read where it is).
void softmax_block(const Fused *a, int b, int h, int i0, int rows, int nk, int ld, const float *Sin, float *S,
                   const float *kadd, float *lse, uint16_t *Ph, float *rs, uint32_t *mask);
// Off the AMX path, the backward's two passes.  Pin: the raw scores it reads (P itself, or the
// shared block); P receives the probabilities.
void probs_block(const Fused *a, int i0, int rows, int nk, int ld, const float *Pin, float *P, const float *kadd,
                 const float *lse, float *Pdf, uint16_t *Pdh, const uint32_t *mask);
void ds_block(const Fused *a, int rows, int nk, int ld, const float *P, float *dP, const float *Pdf, const uint16_t *Pdh,
              int df, uint16_t *dSh);
#ifdef FUSED_AMX
// The AMX path's backward, rows in pairs, from the raw scores Sin and dP = G V^T: the dropped P
// packed k-block-major into Pdp (cpu_amx_gemm_kmajor's B: rows as K, keys as N) for dV^T, and
// dS into dP (df), dSh (bf16 row-major; NULL: none) and dSp (packed as Pdp; NULL: none).
// D[r], row r's rowsum(P ⊙ dP'), given (cpu_attention.c: G · O): one pass; D NULL: two, the
// first storing P into P (may be Sin) and taking D from it.
void grads_block(const Fused *a, int i0, int rows, int nk, int ld, const float *Sin, const float *kadd,
                 const float *lse, const float *D, float *P, float *dP, int df, uint16_t *Pdp, uint16_t *dSh,
                 uint16_t *dSp, const uint32_t *mask);
#endif

#endif
