// The cuDNN attention core's graphs, validated host-side (no GPU): every attention variant's
// layer shape at BERT-base / GPT-2 small sizes, as the core hands it to cuDNN (attn_cudnn_desc:
// shared or scaled queries and unequal K/V heads become per-head copies), forward and backward,
// through the cuDNN frontend's Graph::validate() for sm_80 and sm_90 against the toolkit's
// cuDNN.  validate() is looser than the engines (a head dim of 768 passes); the registry's own
// support table (cuda_attn_cudnn_core.cu) is the stricter check, and tests/gpu/check.sh confirms
// both on a GPU.  A graph the frontend must refuse (an odd head dim) shows the check can fail.
#include <stdio.h>
#include <string.h>

#include "kernels/cuda/cuda_attn_cudnn.h"
#include "kernels/ops.h"

void attn_cudnn_desc(const AttnShape *s, int backward, CudnnSdpa *d);

typedef struct {
    const char *name;
    int T, n, qh, kh, vh, dqk, dv, ldq, ldk, ldv, causal, padding, bias, q_scale, scale_shift;
} Variant;

// n = 12 heads of 64 (hidden 768) unless the variant says otherwise; ld: the fused QKV buffer's
// row (q, k, v slices side by side) or the per-head copies' width.
static const Variant VARIANTS[] = {
    {"mha (BERT, key padding, dropout)", 512, 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 0, 1, 0, 0, 0},
    {"mha (GPT-2, causal, dropout)", 1024, 12, 12, 12, 12, 64, 64, 2304, 2304, 2304, 1, 0, 0, 0, 0},
    {"sha (one shared head)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 1, 0, 0, 0},
    {"mhe_add fast (shared qkv, key bias, out_shift)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 1, 1, 0, 1},
    {"mhe_mul fast (q_scale, shared k/v, out_scale/shift)", 512, 12, 1, 1, 1, 64, 64, 192, 192, 192, 0, 1, 0, 1, 1},
    {"mqa (one K/V head)", 512, 12, 12, 1, 1, 64, 64, 896, 896, 896, 0, 1, 0, 0, 0},
    {"gqa 12/6", 512, 12, 12, 6, 6, 64, 64, 1536, 1536, 1536, 0, 1, 0, 0, 0},
    {"el_att (K = V = input slices)", 512, 12, 12, 12, 12, 64, 64, 768, 768, 768, 0, 1, 0, 0, 0},
    {"skv (V = K)", 512, 12, 12, 12, 12, 64, 64, 1536, 1536, 1536, 0, 1, 0, 0, 0},
    {"collab (per-head mixed Q, one K, per-head V, content bias)", 512, 12, 12, 1, 12, 64, 64, 768, 832, 1600, 0, 1, 1, 0, 0},
    {"mla (d_qk 96, d_v 64)", 512, 12, 12, 12, 12, 96, 64, 1152, 1152, 768, 0, 1, 0, 0, 0},
    {"d 32 (tiny configs)", 128, 4, 4, 4, 4, 32, 32, 384, 384, 384, 0, 1, 0, 0, 0},
};

static AttnShape shape_of(const Variant *v) {
    static const float one = 1.0f;  // only tested for non-NULL
    static const int32_t mask = 1;
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = 16, s.T = v->T, s.n_heads = v->n, s.q_heads = v->qh, s.k_heads = v->kh, s.v_heads = v->vh;
    s.qk_dim = v->dqk, s.v_dim = v->dv, s.ldq = v->ldq, s.ldk = v->ldk, s.ldv = v->ldv;
    s.scale = 0.125f, s.causal = v->causal, s.dropout = 0.1f;
    if (v->padding) s.key_mask = &mask, s.key_mask_trailing = 1;
    if (v->bias) s.key_bias = (const Act *)&one;
    if (v->q_scale) s.q_scale = &one;
    if (v->scale_shift) s.out_scale = s.out_shift = &one;
    return s;
}

int main(void) {
    char why[1024];
    if (!mhe_cudnn_load(why, sizeof why)) {
        fprintf(stderr, "FAIL: %s\n", why);
        return 1;
    }
    printf("cuDNN %ld, frontend %ld\n", mhe_cudnn_version(), mhe_cudnn_frontend_version());
    int failures = 0;
    static const int sms[] = {80, 90};
    for (size_t i = 0; i < sizeof VARIANTS / sizeof *VARIANTS; i++) {
        const AttnShape s = shape_of(&VARIANTS[i]);
        for (int backward = 0; backward < 2; backward++)
            for (int k = 0; k < 2; k++) {
                CudnnSdpa d;
                attn_cudnn_desc(&s, backward, &d);
                const int ok = mhe_cudnn_validate(&d, sms[k], why, sizeof why);
                printf("%s %s sm_%d: %s%s\n", ok ? "ok:" : "FAIL:", VARIANTS[i].name, sms[k],
                       backward ? "backward" : "forward", ok ? "" : "");
                if (!ok) printf("  %s\n", why);
                failures += !ok;
            }
    }
    // The check can fail: a head dim the frontend refuses (not a multiple of 8).
    Variant bad = VARIANTS[0];
    bad.dqk = bad.dv = 36;
    const AttnShape s = shape_of(&bad);
    CudnnSdpa d;
    attn_cudnn_desc(&s, 0, &d);
    if (mhe_cudnn_validate(&d, 90, why, sizeof why)) {
        printf("FAIL: a head dim of 36 validated\n");
        failures++;
    } else {
        printf("ok: head dim 36 refused (%s)\n", why);
    }
    return failures != 0;
}
