// defines: the attention-core registry's entry (AttnCore) and the dispatcher's interface
// (cuda_attn_dispatch.cu).  The variant registry (trainer/config/attention_types.h) says what a
// layer computes; this one says which implementation of ops.h's attention core runs it.
//
// Each core declares what it serves over AttnShape's features (refuses: the first feature it
// does not serve, as a phrase a user can act on), whether this process can run it at all
// (unavailable: cuDNN absent, the emulation), its work-buffer sizes and its two calls.  The
// dispatcher picks, per distinct layer shape, the requested core or under `auto` the first of
// the table that serves the shape, and says so once per shape.
#ifndef MHE_KERNELS_CUDA_ATTN_CORE_H
#define MHE_KERNELS_CUDA_ATTN_CORE_H

#include "kernels/cuda/cuda_internal.h"

enum AttnCoreId { ATTN_CORE_CUDNN, ATTN_CORE_GEMM_BF16, ATTN_CORE_FLASH, ATTN_CORE_GEMM, ATTN_CORE_PLAIN, ATTN_CORE_COUNT };

struct AttnCore {
    AttnCoreId id;
    const char *name;      // runtime.attention_core
    const char *what;      // one line for `mhetrain info`
    bool emulated;         // runs under the CPU emulation of CUDA (tests/cuda)
    bool q_scale;          // honours AttnShape.q_scale where it serves the shape
    const char *cost;      // how the cost model prices it (kernels/cuda/cuda_cost_expect.cu)
    const char *(*refuses)(Backend *be, const AttnShape *s);
    // nullptr when this process can run the core at all, else why not (cuDNN absent or too old,
    // the emulation).
    const char *(*unavailable)(Backend *be);
    // nullptr when it is ready for shapes like s (it builds what it needs for s here: cuDNN's
    // graphs, its workspace), else why not (the library refused the shape).
    const char *(*prepare)(Backend *be, const AttnShape *s);
    void (*sizes)(Backend *be, const AttnShape *s, size_t *saved, size_t *scratch);
    void (*forward)(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v, Act *out,
                    float *saved, float *scratch);
    void (*backward)(Backend *be, const AttnShape *s, const Act *q, const Act *k, const Act *v,
                     const float *saved, const Act *dout, Act *dq, Act *dk, Act *dv, Act *dkey_bias,
                     float *dout_scale, float *dout_shift, float *scratch);
    // Optional: under auto only, nullptr when the core takes a shape it serves, else why it
    // leaves it to the cores after it (a preference, not a limit: a named core still serves it).
    const char *(*defers)(Backend *be, const AttnShape *s);
};

// The cores in `auto`'s order of preference (the fastest first; plain, which serves every shape,
// last).  The cuDNN core's entry (cuda_attn_cudnn_core.cu).
const AttnCore *const *attn_cores(int *count);
extern const AttnCore attn_core_cudnn;
extern const AttnCore attn_core_gemm_bf16;  // cuda_attn_gemm_bf16.cu

// The core running shapes like s on be: chosen once per distinct shape (sizes, masks, features;
// not pointers or the dropout offset), said once on stderr when the backend is verbose.  A named
// core that cannot serve s is a fatal error naming the feature.
const AttnCore *cuda_attn_core_for(Backend *be, const AttnShape *s);
// The choice itself, without the cache or the message: the requested core (nullptr or "auto":
// the first that serves s and can run), and in why (may be nullptr) the reasons the cores before
// it were passed over ("cudnn: fp32 activations"), or, when the named core cannot serve s,
// nullptr with the reason.
const AttnCore *attn_core_choose(Backend *be, const AttnShape *s, const char *requested, char *why, size_t why_len);
// A one-line description of s's features ("B 16 T 512, 12 heads (q/k/v 12/12/12), d 64/64, key
// padding, dropout"), for the per-shape message and the tests.
void attn_shape_describe(const AttnShape *s, char *out, size_t out_len);

// The own cores (flash, gemm, plain) run through the ops their files installed before the
// dispatcher (cuda_attention.cu, with its bf16 staging); the dispatcher names the one
// chosen for the call in progress here, which those files read (cuda_attention.cu attn_path).
AttnCoreId cuda_attn_own_core(Backend *be);

void cuda_install_attention_dispatch(Backend *be);
void cuda_attention_dispatch_destroy(Backend *be);
// runtime.attention_core (kernels/backend_info.h backend_attention_core_select): 0 with the
// message in err for an unknown name or a core this process cannot run.
int cuda_attention_core_select(Backend *be, const char *name, int verbose, char *err, size_t err_len);

#endif
