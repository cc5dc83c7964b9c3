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
#include "tests/cuda/attn_variants.h"

void attn_cudnn_desc(const AttnShape *s, int backward, CudnnSdpa *d);

int main(void) {
    char why[1024];
    if (!mhe_cudnn_load(why, sizeof why)) {
        fprintf(stderr, "FAIL: %s\n", why);
        return 1;
    }
    printf("cuDNN %ld, frontend %ld\n", mhe_cudnn_version(), mhe_cudnn_frontend_version());
    int failures = 0;
    static const int sms[] = {80, 90};
    // Key padding (trailing, as the model's masks are) on the bidirectional layers, dropout 0.1.
    for (int i = 0; i < N_ATTN_VARIANTS; i++) {
        const AttnVariant *v = &ATTN_VARIANTS[i];
        const AttnShape s = attn_variant_shape(v, 16, 0, !v->causal, 1, 0.1f);
        for (int backward = 0; backward < 2; backward++)
            for (int k = 0; k < 2; k++) {
                CudnnSdpa d;
                attn_cudnn_desc(&s, backward, &d);
                const int ok = mhe_cudnn_validate(&d, sms[k], why, sizeof why);
                printf("%s %s sm_%d: %s%s\n", ok ? "ok:" : "FAIL:", v->name, sms[k],
                       backward ? "backward" : "forward", ok ? "" : "");
                if (!ok) printf("  %s\n", why);
                failures += !ok;
            }
    }
    // The check can fail: a head dim the frontend refuses (not a multiple of 8).
    AttnVariant bad = ATTN_VARIANTS[0];
    bad.dqk = bad.dv = 36;
    const AttnShape s = attn_variant_shape(&bad, 16, 0, 1, 1, 0.1f);
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
