// For machines with a GPU (tests/gpu/check.sh): times the CUDA backend's attention core, forward
// and backward, on the shapes of the timed models, so it can be set beside PyTorch's SDPA (flash
// and cuDNN backends, tests/gpu/torch_gpu.py --attention) on the same GPU in the same run.
//   gpu_attn_bench [bf16|fp32] [CORE]      CORE: runtime.attention_core (default auto)
// One line per shape: `attn-result: core=.. B=.. H=.. T=.. d=.. causal=.. fwd_ms=.. bwd_ms=.. fwd_tflops=..
// bwd_tflops=..`.  Flops follow FlashAttention's convention (forward 4·B·H·T²·d, backward 2.5×
// the forward, both halved when causal) so the figures compare with its published ones.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "kernels/ops.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static Act *upload_random(Backend *be, size_t n, Rng *r) {
    float *h = mhe_malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)(rng_next_uniform(r) * 2.0 - 1.0);
    Act *d = be->alloc(be, n * dtype_size(be->act));
    be->upload_act(be, d, h, n);
    free(h);
    return d;
}

typedef struct {
    int B, H, T, d, causal;
} Shape;

static void run(Backend *be, const char *core, Shape sh, int reps) {
    AttnShape s;
    memset(&s, 0, sizeof s);
    s.B = sh.B;
    s.T = sh.T;
    s.n_heads = s.q_heads = s.k_heads = s.v_heads = sh.H;
    s.qk_dim = s.v_dim = sh.d;
    s.ldq = s.ldk = s.ldv = sh.H * sh.d;
    s.scale = 1.0f / sqrtf((float)sh.d);
    s.causal = sh.causal;
    const size_t rows = (size_t)sh.B * sh.T, width = (size_t)sh.H * sh.d;
    size_t saved_n = 0, scratch_n = 0;
    be->attention_sizes(be, &s, &saved_n, &scratch_n);
    Rng r = rng_stream(7, 0, 0);
    const size_t act_bytes = rows * width * dtype_size(be->act);
    Act *q = upload_random(be, rows * width, &r), *k = upload_random(be, rows * width, &r);
    Act *v = upload_random(be, rows * width, &r), *dout = upload_random(be, rows * width, &r);
    Act *out = be->alloc(be, act_bytes);
    Act *dq = be->alloc(be, act_bytes), *dk = be->alloc(be, act_bytes);
    Act *dv = be->alloc(be, act_bytes);
    float *saved = be->alloc(be, (saved_n ? saved_n : 1) * sizeof(float));
    float *scratch = be->alloc(be, (scratch_n ? scratch_n : 1) * sizeof(float));
    for (int i = 0; i < 3; i++) {  // warm-up: bf16 copies of the inputs made once
        be->attention_forward(be, &s, q, k, v, out, saved, scratch);
        be->attention_backward(be, &s, q, k, v, saved, dout, dq, dk, dv, NULL, NULL, NULL, scratch);
    }
    // The cost model's figures for one call of each (kernels/cuda/README.md "Cost model").
    const GpuSpec *h100 = gpu_spec_find("h100");
    CostReport cf, cb;
    backend_cuda_cost_start();
    be->attention_forward(be, &s, q, k, v, out, saved, scratch);
    backend_cuda_cost_stop(h100, &cf);
    backend_cuda_cost_start();
    be->attention_backward(be, &s, q, k, v, saved, dout, dq, dk, dv, NULL, NULL, NULL, scratch);
    backend_cuda_cost_stop(h100, &cb);
    be->synchronize(be);
    double t0 = now_s();
    for (int i = 0; i < reps; i++) be->attention_forward(be, &s, q, k, v, out, saved, scratch);
    const double issued_f = now_s() - t0;  // the host's time to issue them (async launches)
    be->synchronize(be);
    double t1 = now_s();
    for (int i = 0; i < reps; i++)
        be->attention_backward(be, &s, q, k, v, saved, dout, dq, dk, dv, NULL, NULL, NULL, scratch);
    const double issued_b = now_s() - t1;
    be->synchronize(be);
    double t2 = now_s();
    const double fwd = (t1 - t0) / reps, bwd = (t2 - t1) / reps;
    const double f = 4.0 * sh.B * sh.H * (double)sh.T * sh.T * sh.d * (sh.causal ? 0.5 : 1.0);
    printf("attn-result: core=%s B=%d H=%d T=%d d=%d causal=%d fwd_ms=%.4f bwd_ms=%.4f fwd_tflops=%.1f bwd_tflops=%.1f "
           "host_fwd_ms=%.4f host_bwd_ms=%.4f bound_fwd_ms=%.4f bound_bwd_ms=%.4f expected_fwd_ms=%.4f "
           "expected_bwd_ms=%.4f\n",
           core, sh.B, sh.H, sh.T, sh.d, sh.causal, 1e3 * fwd, 1e3 * bwd, f / fwd / 1e12, 2.5 * f / bwd / 1e12,
           1e3 * issued_f / reps, 1e3 * issued_b / reps, 1e3 * cf.seconds, 1e3 * cb.seconds,
           1e3 * cf.expected_seconds, 1e3 * cb.expected_seconds);
    fflush(stdout);
    void *bufs[] = {q, k, v, dout, out, dq, dk, dv, saved, scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be->free(be, bufs[i]);
}

int main(int argc, char **argv) {
    const int bf16 = !(argc > 1 && strcmp(argv[1], "fp32") == 0);
    // Linked against the emulation: record-only (no kernel runs), so the times are the host's
    // own cost of issuing the calls.
    const int emulated = backend_cuda_cost_dry_run(1);
    if (!emulated && backend_cuda_device_count() < 1) {
        fprintf(stderr, "gpu_attn_bench: no CUDA device\n");
        return 1;
    }
    Backend *be = backend_cuda_create_for(0, bf16);
    const char *core = argc > 2 ? argv[2] : "auto";
    char err[256];
    if (!backend_attention_core_select(be, core, 1, err, sizeof err)) {
        fprintf(stderr, "gpu_attn_bench: %s\n", err);
        be->destroy(be);
        return 1;
    }
    // BERT-base 128x64 and 512x16, GPT-2 small 1024x16 (causal): 12 heads of 64.
    const Shape shapes[] = {{64, 12, 128, 64, 0}, {16, 12, 512, 64, 0}, {16, 12, 1024, 64, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) run(be, core, shapes[i], 20);
    be->destroy(be);
    return 0;
}
