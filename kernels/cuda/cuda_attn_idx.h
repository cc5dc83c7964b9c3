// defines: the attention kernels' index helpers (head of a row, key visibility, P's flat index).
// Index helpers of the attention kernels (cuda_attention.cu, cuda_flash.cu): head h of a row
// of Q/K/V, key visibility, the flat index of P [B, n, T, T] (also the dropout element index).
#ifndef MHE_KERNELS_CUDA_CUDA_ATTN_IDX_H
#define MHE_KERNELS_CUDA_CUDA_ATTN_IDX_H

#include <algorithm>

#include "kernels/cuda/cuda_internal.h"

struct AttnIdx {
    int B, T, n, qr, kr, vr, dq, dv, ldq, ldk, ldv;
};

static inline AttnIdx attn_idx(const AttnShape *s) {
    return AttnIdx{s->B, s->T, s->n_heads, s->n_heads / s->q_heads, s->n_heads / s->k_heads,
                   s->n_heads / s->v_heads, s->qk_dim, s->v_dim, s->ldq, s->ldk, s->ldv};
}

// The fields every flash kernel's argument struct shares (cuda_flash.cu's FlashArgs, the tensor-
// core kernels' TcArgs): indexing, score scale, masks, output scale, dropout's key and threshold.
template <typename Args> static inline void attn_args_common(Args &f, const AttnShape *s) {
    f.a = attn_idx(s);
    f.scale = s->scale;
    f.causal = s->causal;
    f.key_mask = s->key_mask;
    f.key_bias = reinterpret_cast<const float *>(s->key_bias);  // fp32 while be->act is DT_F32
    f.out_scale = s->out_scale;
    f.drop = s->dropout > 0.0f ? s->dropout : 0.0f;
    f.inv_keep = f.drop > 0.0f ? 1.0f / (1.0f - f.drop) : 1.0f;
    f.key = ops_dropout_key(s->seed, s->offset);
    f.threshold = ops_dropout_threshold(f.drop);
}

__device__ __forceinline__ const float *q_row(const AttnIdx &a, const float *q, int b, int t, int h) {
    return q + ((size_t)b * a.T + t) * a.ldq + (size_t)(h / a.qr) * a.dq;
}
__device__ __forceinline__ const float *k_row(const AttnIdx &a, const float *k, int b, int t, int h) {
    return k + ((size_t)b * a.T + t) * a.ldk + (size_t)(h / a.kr) * a.dq;
}
__device__ __forceinline__ const float *v_row(const AttnIdx &a, const float *v, int b, int t, int h) {
    return v + ((size_t)b * a.T + t) * a.ldv + (size_t)(h / a.vr) * a.dv;
}
__device__ __forceinline__ bool key_visible(const AttnIdx &a, int causal, const int32_t *key_mask,
                                            int b, int i, int j) {
    return !(causal && j > i) && (!key_mask || key_mask[(size_t)b * a.T + j] != 0);
}
__device__ __forceinline__ size_t p_index(const AttnIdx &a, int b, int h, int i, int j) {
    return (((size_t)b * a.n + h) * a.T + i) * a.T + j;
}
// P after dropout (the dropout index is P's own index).
__device__ __forceinline__ float p_dropped(float p, size_t idx, float drop, uint64_t seed, uint64_t offset) {
    if (drop <= 0.0f) return p;
    return ops_dropout_keep(seed, offset, idx, drop) ? p * (1.0f / (1.0f - drop)) : 0.0f;
}

// What the tiles of one (sequence, head) visit, for the cost model: (query, key) pairs computed and
// the rows of the other operand each tile reads, summed over tiles.  Causal tiles stop at the
// diagonal (the kernels skip the rest), so they do about half of the T x T work.
struct TileWork {
    double pairs, reads;
};
// Query tiles of `per` rows: each reads the keys up to its last row (causal) or all of them.
static inline TileWork query_tiles(int T, int per, int causal) {
    TileWork w{0, 0};
    for (int q0 = 0; q0 < T; q0 += per) {
        const double rows = std::min(per, T - q0), keys = causal ? std::min(T, q0 + per) : T;
        w.pairs += rows * keys;
        w.reads += keys;
    }
    return w;
}
// Key tiles of `per` rows: each reads the queries from its first row on (causal) or all of them.
static inline TileWork key_tiles(int T, int per, int causal) {
    TileWork w{0, 0};
    for (int j0 = 0; j0 < T; j0 += per) {
        const double rows = std::min(per, T - j0), queries = causal ? T - j0 : T;
        w.pairs += rows * queries;
        w.reads += queries;
    }
    return w;
}


#endif
