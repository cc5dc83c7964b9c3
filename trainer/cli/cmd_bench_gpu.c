// mhetrain bench --gpu a100|h100: the CUDA cost model's side of the bench (kernels/cuda/README.md
// "Cost model").  The backend records every kernel, cuBLAS call, memset and copy of one step at
// the place it is issued; this file turns the records into the predicted step on the chosen GPU
// and prints it next to the measured op classes when a real GPU ran the step.
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "kernels/backend_info.h"
#include "trainer/cli/bench_gpu.h"

void bench_gpu_reexec_emulated(int argc, char **argv) {
    if (backend_cuda_device_count() > 0) return;
    // No GPU here: the emulated backend (built next to mhetrain with -DMHE_CUDA=ON) runs the
    // step in record-only mode instead.
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) mhe_fail("bench --gpu: no GPU here and /proc/self/exe is unreadable");
    self[n] = 0;
    if (strstr(self, "mhetrain_emu")) return;  // already the emulated build
    char emu[PATH_MAX + 16];
    snprintf(emu, sizeof emu, "%s/mhetrain_emu", dirname(self));
    if (access(emu, X_OK) != 0)
        mhe_fail("bench --gpu: no GPU here and %s is missing (build with -DMHE_CUDA=ON: the "
                 "emulated backend predicts the step without a GPU)", emu);
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) mhe_fatal("out of memory");
    args[0] = emu;
    for (int i = 0; i < argc; i++) args[i + 1] = argv[i];
    fflush(stdout);
    execv(emu, args);
    mhe_fail("bench --gpu: cannot run %s", emu);
}

static const char *class_names[OPC_COUNT] = {"matmul", "attention", "norm/activation", "loss", "other"};

void bench_gpu_report(const GpuSpec *g, int bf16, int record_only, const CostReport *r,
                      double model_flops, long tokens, const OpProfile *measured, int measured_steps) {
    const double peak = bf16 ? g->bf16_flops : g->fp32_flops;
    const double mfu = model_flops / r->seconds / peak;
    printf("cost model: %s SXM, %s (%.0f TFLOP/s bf16 tensor, %.1f TFLOP/s fp32, %.2f TB/s, %.0f us/launch)%s\n",
           g->name, bf16 ? "bf16" : "fp32", g->bf16_flops / 1e12, g->fp32_flops / 1e12,
           g->bytes_per_s / 1e12, g->launch_s * 1e6,
           record_only ? "; record-only emulation, no kernel ran" : "");
    printf("predicted step time: %.3f ms   tokens/s: %.0f   MFU: %.1f%% (of %.1f TFLOP/s %s)\n",
           1e3 * r->seconds, tokens / r->seconds, 100.0 * mfu, peak / 1e12, bf16 ? "bf16" : "fp32");
    printf("launches per step: %ld   peak device memory: %.3f GiB   moved: %.3f GB   "
           "tensor-core: %.3f TFLOP   CUDA-core: %.4f TFLOP\n",
           r->launches, r->peak_bytes / 1073741824.0, r->bytes / 1e9, r->tc_flops / 1e12, r->flops / 1e12);
    printf("predicted%s time by op class (per step):\n", measured ? " vs measured" : "");
    for (int c = 0; c < OPC_COUNT; c++) {
        printf("  %-16s %9.3f ms %5.1f%% %6ld calls", class_names[c], 1e3 * r->class_seconds[c],
               100.0 * r->class_seconds[c] / r->seconds, r->class_calls[c]);
        if (measured) printf("   measured %9.3f ms", 1e3 * measured->seconds[c] / measured_steps);
        printf("\n");
    }
    printf("top %d calls (grouped by kernel, gemms by shape):\n", r->n_top);
    printf("  %-44s %-15s %6s %9s %6s  %s\n", "call", "class", "calls", "ms", "step%", "bound by");
    for (int i = 0; i < r->n_top; i++) {
        const CostEntry *e = &r->top[i];
        const char *bound = e->launch_seconds > e->compute_seconds && e->launch_seconds > e->memory_seconds ? "launch"
                            : e->compute_seconds >= e->memory_seconds ? "compute" : "memory";
        printf("  %-44s %-15s %6ld %9.3f %5.1f%%  %s\n", e->label, class_names[e->op_class], e->calls,
               1e3 * e->seconds, 100.0 * e->seconds / r->seconds, bound);
    }
    printf("cost-result: gpu=%s predicted_step_ms=%.4f predicted_tokens_per_s=%.1f predicted_mfu=%.4f "
           "launches=%ld peak_device_gib=%.4f gemm_flops=%.6e model_flops=%.6e\n",
           g->name, 1e3 * r->seconds, tokens / r->seconds, mfu, r->launches, r->peak_bytes / 1073741824.0,
           r->gemm_flops, model_flops);
}
