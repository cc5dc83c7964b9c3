// The backend a config asks for: runtime.device, runtime.precision, runtime.threads and
// runtime.attention_core, in one place for every command that computes (train, finetune, eval,
// bench).
#include <string.h>

#include "common/error.h"
#include "kernels/backend_info.h"
#include "trainer/model/model.h"

Backend *backend_for_config(const Config *cfg, int local_rank, int verbose) {
    const int bf16 = cfg->runtime.precision == PREC_BF16;
    Backend *be = cfg->runtime.device == DEVICE_CUDA ? backend_cuda_create_for(local_rank, bf16)
                                                     : backend_cpu_create_for(cfg->runtime.threads, bf16);
    char err[512];
    if (!backend_attention_core_select(be, cfg->runtime.attention_core, verbose, err, sizeof err)) {
        be->destroy(be);
        mhe_fail("%s", err);
    }
    return be;
}
