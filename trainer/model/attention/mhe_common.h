// Shared by mhe_add.c and mhe_mul.c: shared Q, K, V of width d plus head embeddings
// e^Q, e^K, e^V ∈ R^{n×d} (tensor order: q, k, v linears, then head_embed.q, .k, .v).
#ifndef MHE_TRAINER_MODEL_ATTENTION_MHE_COMMON_H
#define MHE_TRAINER_MODEL_ATTENTION_MHE_COMMON_H

#include "trainer/model/model_internal.h"

enum { MHE_WQ = 0, MHE_WK = 2, MHE_WV = 4, MHE_EQ = 6, MHE_EK = 7, MHE_EV = 8 };

static inline int mhe_tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, n = c->model.heads, d = c->model.head_dim;
    int k = attn_linear(t, 0, "q.weight", "q.bias", d, D);
    k = attn_linear(t, k, "k.weight", "k.bias", d, D);
    k = attn_linear(t, k, "v.weight", "v.bias", d, D);
    t[k++] = (AttnTensor){"head_embed.q", PARAM_HEAD_EMBED, n, d, 0.0f};
    t[k++] = (AttnTensor){"head_embed.k", PARAM_HEAD_EMBED, n, d, 0.0f};
    t[k++] = (AttnTensor){"head_embed.v", PARAM_HEAD_EMBED, n, d, 0.0f};
    return k;
}

#endif
