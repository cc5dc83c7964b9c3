// Every attention variant's layer shape as its module hands it to the attention core (ops.h
// AttnShape), at BERT-base / GPT-2 small sizes: 12 heads of 64 (hidden 768) unless the variant
// says otherwise.  ld: the fused QKV buffer's row (q, k, v slices side by side) or the shared
// head's width.  One table for the tests that ask the cores about every variant
// (test_attn_cores.cpp: the registry's choice; test_cudnn_graphs.c: cuDNN's graphs), so a new
// variant is added once.  C and C++.
#ifndef MHE_TESTS_CUDA_ATTN_VARIANTS_H
#define MHE_TESTS_CUDA_ATTN_VARIANTS_H

#include <string.h>

#include "kernels/ops.h"

typedef struct {
    const char *name;
    int T;  // the layer's usual sequence length
    int n, qh, kh, vh, dqk, dv, ldq, ldk, ldv, causal, bias, q_scale, scale_shift;
} AttnVariant;

static const AttnVariant ATTN_VARIANTS[] = {
    // name                                                 T   n  qh  kh  vh dqk  dv   ldq   ldk   ldv  c  b  qs ss
    {"mha (BERT)", 512, 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 0, 0, 0, 0},
    {"mha (GPT-2, causal)", 1024, 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 1, 0, 0, 0},
    {"sha (one shared head)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 0, 0, 0},
    {"mhe_add fast (shared qkv, key bias, out_shift)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 1, 0, 1},
    {"mhe_mul fast (q_scale, shared k/v, out_scale/shift)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 0, 1, 1},
    {"mhe_mul materialised (per-head Q, shared k/v)", 512, 12, 12, 1, 1, 64, 64, 768, 192, 192, 0, 0, 0, 1},
    {"mqa (one K/V head)", 512, 12, 12, 1, 1, 64, 64, 896, 896, 896, 0, 0, 0, 0},
    {"gqa 12/6", 512, 12, 12, 6, 6, 64, 64, 1536, 1536, 1536, 0, 0, 0, 0},
    {"el_att (K = V = input slices)", 512, 12, 12, 12, 12, 64, 64, 768, 768, 768, 0, 0, 0, 0},
    {"skv (V = K)", 512, 12, 12, 12, 12, 64, 64, 1536, 1536, 1536, 0, 0, 0, 0},
    {"collab (mixed Q, one K, per-head V, content bias)", 512, 12, 12, 1, 12, 64, 64, 768, 832, 1600, 0, 1, 0, 0},
    {"mla (d_qk 96, d_v 64)", 512, 12, 12, 12, 12, 96, 64, 1152, 1152, 768, 0, 0, 0, 0},
    {"d 32 (tiny configs)", 128, 4, 4, 4, 4, 32, 32, 384, 384, 384, 0, 0, 0, 0},
};
#define N_ATTN_VARIANTS ((int)(sizeof ATTN_VARIANTS / sizeof ATTN_VARIANTS[0]))

// The shape at B sequences of T (0: the variant's own); padding: a key mask, trailing or not.
// The pointers only say "present" (the cores' choice reads no data).
static inline AttnShape attn_variant_shape(const AttnVariant *v, int B, int T, int padding, int trailing,
                                           float dropout) {
    static const float one = 1.0f;
    static const int32_t mask = 1;
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = B, s.T = T ? T : v->T, s.n_heads = v->n, s.q_heads = v->qh, s.k_heads = v->kh, s.v_heads = v->vh;
    s.qk_dim = v->dqk, s.v_dim = v->dv, s.ldq = v->ldq, s.ldk = v->ldk, s.ldv = v->ldv;
    s.scale = 0.125f, s.causal = v->causal, s.dropout = dropout;
    if (padding) s.key_mask = &mask, s.key_mask_trailing = trailing;
    if (v->bias) s.key_bias = (const Act *)&one;
    if (v->q_scale) s.q_scale = &one;
    if (v->scale_shift) s.out_scale = s.out_shift = &one;
    return s;
}

#endif
