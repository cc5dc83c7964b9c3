// Shared by mhe_add.c and mhe_mul.c: shared Q, K, V of width d plus head embeddings
// e^Q, e^K, e^V ∈ R^{n×d} (tensor order: q, k, v weights, their biases (one block each, so the
// projections run as one GEMM), then head_embed.q, .k, .v).
#ifndef MHE_TRAINER_MODEL_ATTENTION_MHE_COMMON_H
#define MHE_TRAINER_MODEL_ATTENTION_MHE_COMMON_H

#include "trainer/model/model_internal.h"

enum { MHE_WQ, MHE_WK, MHE_WV, MHE_BQ, MHE_BK, MHE_BV, MHE_EQ, MHE_EK, MHE_EV };

static inline int mhe_tensors(const Config *c, AttnTensor *t) {
    const int D = c->model.hidden, n = c->model.heads, d = c->model.head_dim;
    const AttnLinearSpec s[3] = {ATTN_LINEAR("q", d), ATTN_LINEAR("k", d), ATTN_LINEAR("v", d)};
    int k = attn_qkv_tensors(t, 0, s, D);
    t[k++] = (AttnTensor){"head_embed.q", PARAM_HEAD_EMBED, n, d, 0.0f};
    t[k++] = (AttnTensor){"head_embed.k", PARAM_HEAD_EMBED, n, d, 0.0f};
    t[k++] = (AttnTensor){"head_embed.v", PARAM_HEAD_EMBED, n, d, 0.0f};
    return k;
}

static inline AttnPlan mhe_plan_base(const Config *c) {
    AttnPlan p = attn_plan_base(c);
    p.qc = p.kc = p.vc = c->model.head_dim;
    attn_set_proj(&p, MHE_WQ, MHE_WK, MHE_WV, MHE_BQ, MHE_BK, MHE_BV);
    return p;
}

#endif
