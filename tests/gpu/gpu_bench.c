// For machines with a GPU (tests/gpu/run.sh): trains the model of a config on the CUDA backend
// for N steps on one fixed synthetic batch (the loss must fall: it memorises the batch), then
// times steady-state steps and reports tokens/s and MFU against the GPU's bf16 peak.
//   gpu_bench CONFIG STEPS PEAK_TFLOPS [--accum A] [key=value ...]
//     PEAK_TFLOPS <= 0: MFU not shown; auto: the card's data-sheet peak.
//     --accum A: A micro-batches (forward + backward) into the gradients before each optimizer
//     step, as training runs train.global_batch = A x train.micro_batch: MFU where users train.
// Exit status 1 when the loss is not finite, or (from 20 steps up) does not fall by 10%.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "kernels/gpu_peak.h"
#include "kernels/ops.h"
#include "kernels/optim_math.h"
#include "trainer/config/config.h"
#include "trainer/model/model.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: gpu_bench CONFIG STEPS PEAK_TFLOPS [--accum A] [key=value ...]\n");
        return 2;
    }
    int accum = 1, first_kv = 4;
    if (argc > 5 && strcmp(argv[4], "--accum") == 0) {
        accum = atoi(argv[5]);
        if (accum < 1 || accum > 4096) mhe_fail("gpu_bench: --accum %s: expected an integer in [1, 4096]", argv[5]);
        first_kv = 6;
    }
    Config cfg;
    config_load(&cfg, argv[1], argc - first_kv, argv + first_kv);
    const int steps = atoi(argv[2]);
    // auto: the backend's table of data sheets (backend_cuda_peak_flops), as training uses.
    const char *card = "stated";
    const double peak = strcmp(argv[3], "auto") == 0
                            ? backend_cuda_peak_flops(0, cfg.runtime.precision == PREC_BF16, &card) / 1e12
                            : atof(argv[3]);
    const int B = cfg.train.micro_batch, T = cfg.data.seq_len, V = cfg.model.vocab_size;
    Backend *be = backend_for_config(&cfg, 0, 1);  // runtime.attention_core too; says which core runs
    // Device memory the run takes, as the driver sees it: free before the model against free after
    // the timed steps (buffers are allocated once, so this is the peak plus library workspaces).
    size_t free0 = 0, free1 = 0, total = 0;
    if (be->memory_info) be->memory_info(be, &free0, &total);
    Model *m = model_create(&cfg, be, B, T);
    model_init_params(m, 1);
    size_t n = model_param_count(m);
    float *mom = be->alloc(be, 2 * n * sizeof(float));
    int32_t *ids = mhe_malloc((size_t)B * T * 4), *labels = mhe_malloc((size_t)B * T * 4);
    Rng r = rng_stream(42, 0, 0);
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)(rng_next(&r) % (uint64_t)V);
    for (int i = 0; i < B * T; i++) {
        if (cfg.model.arch == ARCH_GPT) labels[i] = (i % T + 1 < T) ? ids[i + 1] : -100;
        else labels[i] = rng_next(&r) % 100 < 15 ? ids[i] : -100;
    }
    long scored = 0;
    for (int i = 0; i < B * T; i++) scored += labels[i] >= 0;
    printf("model: %s %s, %zu parameters, batch %d x %d, accumulation %d (%ld tokens per optimizer step), precision %s\n",
           arch_name(cfg.model.arch), attention_type_name(cfg.attention.type), n, B, T, accum, (long)accum * B * T,
           cfg.runtime.precision == PREC_BF16 ? "bf16" : "fp32");
    float first = 0, last = 0;
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f;
    const int warm = steps < 10 ? steps / 2 : 5;
    double t0 = 0;
    for (int s = 1; s <= steps; s++) {
        if (s == warm + 1) {
            be->synchronize(be);
            t0 = now_s();
        }
        model_zero_grad(m);
        // The same batch each micro-step, the loss the mean over all of them (as training divides
        // by the step's labels).
        float loss = 0;
        for (int k = 0; k < accum; k++) {
            loss += model_forward(m, ids, NULL, NULL, labels, B, T, 1) / accum;
            model_backward(m, (double)(scored > 0 ? scored : 1) * accum);
        }
        const OptimBias bc = optim_bias(b1, b2, s);
        const AdamwScalars a = adamw_scalars(lr, 0.01f, bc.bc1);
        be->adamw_update(be, model_params(m), model_grads(m), mom, mom + n, n, b1, b2, 1e-8f, a.step_size,
                         a.decay, bc.bc2_sqrt, 1.0f);
        if (s == 1) first = loss;
        last = loss;
        if (s == 1 || s % 10 == 0 || s == steps) printf("step %4d  loss %.4f\n", s, loss);
    }
    be->synchronize(be);
    double dt = now_s() - t0;
    if (be->memory_info) {
        be->memory_info(be, &free1, &total);
        printf("device memory: %.2f GiB taken by the run (cudaMemGetInfo, free before the model minus free after "
               "the steps)\n", ((double)free0 - (double)free1) / (1024.0 * 1024.0 * 1024.0));
    }
    int timed = steps - warm;
    double tps = timed > 0 ? (double)timed * accum * B * T / dt : 0;
    double flops = model_step_flops(m, B, T) * accum * timed / dt;
    printf("throughput: %.0f tokens/s, %.2f TFLOP/s", tps, flops / 1e12);
    int over = 0;
    const double mfu = gpu_mfu(flops, peak * 1e12, &over);
    if (mfu >= 0)
        printf(", MFU %.1f%% of %.0f TFLOP/s %s peak (%s, dense)%s", 100.0 * mfu, peak,
               cfg.runtime.precision == PREC_BF16 ? "bf16" : "fp32", card ? card : "stated",
               over ? " (capped: faster than the data sheet, whose figure is wrong for this card)" : "");
    else if (strcmp(argv[3], "auto") == 0)
        printf(", MFU n/a (a GPU without a data-sheet peak: set MHE_GPU_PEAK_TFLOPS)");
    printf("\n");
    // Memorising one batch takes a few tens of steps; a profiling run of 3 steps only has to stay
    // finite (3 steps of GPT-2 small fell by 8%, short of the 10% rule).
    const int judged = steps >= 20;
    int ok = isfinite(first) && isfinite(last) && (!judged || last < 0.9f * first);
    printf("loss %.4f -> %.4f: %s\n", first, last,
           !judged ? (ok ? "finite (too few steps to judge learning)" : "NOT FINITE") : ok ? "learning" : "NOT LEARNING");
    be->free(be, mom);
    model_free(m);
    be->destroy(be);
    free(ids);
    free(labels);
    config_free(&cfg);
    return ok ? 0 : 1;
}
