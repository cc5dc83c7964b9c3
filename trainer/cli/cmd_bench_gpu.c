// mhetrain bench --gpu a100|h100|h200: the CUDA cost model's side of the bench (kernels/cuda/README.md
// "Cost model").  The backend records every kernel, cuBLAS call, memset and copy of one step at
// the place it is issued; this file turns the records into the predicted step on the chosen GPU
// and prints it next to the measured op classes when a real GPU ran the step.
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/grad_reducer.h"
#include "common/error.h"
#include "kernels/backend_info.h"
#include "trainer/cli/bench_gpu.h"
#include "trainer/train/reducer_setup.h"

struct BenchDist {
    Comm *comm;
    DeviceComm *dcomm;
    GradReducer *reducer;
    GradDevice device;
    GradPiece *pieces;
    Model *m;
};

BenchDist *bench_gpu_dist_create(int ranks, int overlap, const Config *cfg, Backend *be, Model *m) {
    if (ranks <= 0) return NULL;
    BenchDist *d = mhe_calloc(1, sizeof *d);
    d->m = m;
    d->comm = comm_init(NULL, NULL, cfg->dist.timeout_s);
    if (comm_world(d->comm) != 1) mhe_fail("bench --ranks: run bench as one process (it predicts the other ranks)");
    backend_cuda_cost_ranks(ranks);
    d->dcomm = device_comm_create(comm_mpi_handle(d->comm), be, cfg->dist.timeout_s);
    // dist.zero: 1 as the trainer runs it on N ranks: this process plays rank 0 (its shard of
    // the update; every reduce and broadcast recorded).
    d->reducer = reducer_setup(d->comm, be, d->dcomm, model_param_table(m), model_grads(m), cfg,
                               cfg->dist.zero == 1, &d->device, &d->pieces, ranks);
    grad_reducer_set_overlap(d->reducer, overlap);
    // The trainer hooks the last micro-batch's backward pass; the bench runs one micro-batch.
    model_set_backward_hook(m, overlap ? reducer_setup_stage_done : NULL, d->reducer);
    return d;
}

void bench_gpu_dist_finish(BenchDist *d) {
    if (d) grad_reducer_finish(d->reducer);
}

void bench_gpu_dist_shard(const BenchDist *d, size_t total, size_t *begin, size_t *end) {
    const GradShards *z = d ? grad_reducer_shards(d->reducer) : NULL;
    *begin = z ? z->begin : 0;
    *end = z ? z->end : total;
}

void bench_gpu_dist_gather(BenchDist *d, float *params) {
    if (d) grad_reducer_gather_params(d->reducer, params);
}

void bench_gpu_dist_free(BenchDist *d) {
    if (!d) return;
    model_set_backward_hook(d->m, NULL, NULL);
    grad_reducer_free(d->reducer);
    free(d->pieces);
    device_comm_free(d->dcomm);
    comm_finalize(d->comm);
    free(d);
}

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
    // The emulated build runs under AddressSanitizer; what MPI (bench --ranks) allocates for the
    // life of the process would end it as "leaks" at exit, before stdout is flushed.
    const char *asan = getenv("ASAN_OPTIONS");
    if (!asan || !strstr(asan, "detect_leaks")) {
        char opts[1024];
        snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", asan ? asan : "", asan && *asan ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
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
                      double model_flops, long tokens, const OpProfile *measured, int measured_steps,
                      int top, double host_s) {
    const double peak = bf16 ? g->bf16_flops : g->fp32_flops;
    const double mfu = model_flops / r->seconds / peak;
    // Expected: the GPU's step at the table's rates, or the host's when it is the slower.
    const double gpu_e = r->expected_seconds, step_e = host_s > gpu_e ? host_s : gpu_e;
    printf("cost model: %s SXM, %s (%.0f TFLOP/s bf16 tensor, %.1f TFLOP/s fp32, %.2f TB/s, %.0f us/launch)%s\n",
           g->name, bf16 ? "bf16" : "fp32", g->bf16_flops / 1e12, g->fp32_flops / 1e12,
           g->bytes_per_s / 1e12, g->launch_s * 1e6,
           record_only ? "; record-only emulation, no kernel ran" : "");
    printf("bound step time:    %9.3f ms   tokens/s: %8.0f   MFU: %5.1f%% (roofline: every call at peak)\n",
           1e3 * r->seconds, tokens / r->seconds, 100.0 * mfu);
    printf("expected step time: %9.3f ms   tokens/s: %8.0f   MFU: %5.1f%% (efficiency table, CALIBRATION.md)\n",
           1e3 * step_e, tokens / step_e, 100.0 * model_flops / step_e / peak);
    if (host_s > 0)
        printf("host time per step: %9.3f ms (issuing every call, nothing run%s): %s\n", 1e3 * host_s,
               record_only ? "; emulated build with AddressSanitizer, an upper bound" : "",
               host_s > gpu_e ? "the host is the slower, the GPU idles" : "below the GPU's expected time");
    printf("launches per step: %ld   host synchronisations: %ld   peak device memory: %.3f GiB   moved: %.3f GB   "
           "tensor-core: %.3f TFLOP   CUDA-core: %.4f TFLOP\n",
           r->launches, r->syncs, r->peak_bytes / 1073741824.0, r->bytes / 1e9, r->tc_flops / 1e12, r->flops / 1e12);
    printf("time by op class (per step): bound, expected, bytes moved%s\n", measured ? ", measured" : "");
    for (int c = 0; c < OPC_COUNT; c++) {
        printf("  %-16s %9.3f ms %9.3f ms %5.1f%% %6ld calls %8.3f GB", class_names[c], 1e3 * r->class_seconds[c],
               1e3 * r->expected_class_seconds[c], 100.0 * r->expected_class_seconds[c] / gpu_e, r->class_calls[c],
               r->class_bytes[c] / 1e9);
        if (measured) printf("   measured %9.3f ms", 1e3 * measured->seconds[c] / measured_steps);
        printf("\n");
    }
    const int shown = r->n_top < top ? r->n_top : top;
    printf("top %d calls by bound (grouped by kernel, gemms by shape):\n", shown);
    printf("  %-44s %-15s %6s %9s %9s %6s  %s\n", "call", "class", "calls", "bound ms", "exp. ms", "step%",
           "bound by");
    for (int i = 0; i < shown; i++) {
        const CostEntry *e = &r->top[i];
        const char *bound = e->launch_seconds > e->compute_seconds && e->launch_seconds > e->memory_seconds ? "launch"
                            : e->compute_seconds >= e->memory_seconds ? "compute" : "memory";
        printf("  %-44s %-15s %6ld %9.3f %9.3f %5.1f%%  %s\n", e->label, class_names[e->op_class], e->calls,
               1e3 * e->seconds, 1e3 * e->expected_seconds, 100.0 * e->seconds / r->seconds, bound);
    }
    if (r->comm_calls) {
        printf("data parallel over %d ranks: %ld NCCL collectives (all-reduces; reduces + broadcasts under "
               "dist.zero: 1) of %.1f MB in all, ring at %.0f GB/s bus bandwidth + %.0f us per call, on a "
               "second stream\n",
               r->ranks, r->comm_calls, r->comm_bytes / 1e6, g->allreduce_bus_bytes_per_s / 1e9,
               g->allreduce_latency_s * 1e6);
        double hidden = r->comm_seconds - r->exposed_comm_seconds;
        if (hidden < 1e-12) hidden = 0;  // no "-0%" from rounding
        printf("  compute %.3f ms   communication %.3f ms   exposed communication %.3f ms (%.0f%% hidden)\n",
               1e3 * r->compute_seconds, 1e3 * r->comm_seconds, 1e3 * r->exposed_comm_seconds,
               r->comm_seconds > 0 ? 100.0 * hidden / r->comm_seconds : 100.0);
        printf("  step %.3f ms   without overlap (compute + communication) %.3f ms   tokens/s over %d ranks %.0f\n",
               1e3 * r->seconds, 1e3 * r->serial_seconds, r->ranks, (double)tokens * r->ranks / r->seconds);
        printf("  communication stream (ms from the step's start; compute ends at %.3f):\n",
               1e3 * r->compute_seconds + 1e3 * r->exposed_comm_seconds);
        for (int i = 0; i < r->n_comm; i++)
            printf("    all-reduce %2d  %8.2f MB  %8.3f -> %8.3f\n", i, r->comm[i].bytes / 1e6, 1e3 * r->comm[i].start,
                   1e3 * r->comm[i].end);
    }
    printf("cost-result: gpu=%s predicted_step_ms=%.4f predicted_tokens_per_s=%.1f predicted_mfu=%.4f "
           "launches=%ld peak_device_gib=%.4f gemm_flops=%.6e model_flops=%.6e ranks=%d compute_ms=%.4f "
           "comm_ms=%.4f exposed_comm_ms=%.4f serial_step_ms=%.4f expected_step_ms=%.4f "
           "expected_gpu_ms=%.4f expected_tokens_per_s=%.1f expected_mfu=%.4f expected_exposed_comm_ms=%.4f "
           "host_ms=%.4f syncs=%ld moved_gb=%.4f moved_matmul_gb=%.4f moved_attention_gb=%.4f "
           "moved_norm_gb=%.4f moved_loss_gb=%.4f moved_other_gb=%.4f\n",
           g->name, 1e3 * r->seconds, tokens / r->seconds, mfu, r->launches, r->peak_bytes / 1073741824.0,
           r->gemm_flops, model_flops, r->ranks, 1e3 * r->compute_seconds, 1e3 * r->comm_seconds,
           1e3 * r->exposed_comm_seconds, 1e3 * r->serial_seconds, 1e3 * step_e, 1e3 * gpu_e, tokens / step_e,
           model_flops / step_e / peak, 1e3 * r->expected_exposed_comm_seconds, 1e3 * (host_s > 0 ? host_s : 0), r->syncs,
           r->bytes / 1e9, r->class_bytes[OPC_MATMUL] / 1e9, r->class_bytes[OPC_ATTENTION] / 1e9,
           r->class_bytes[OPC_NORM_ACT] / 1e9, r->class_bytes[OPC_LOSS] / 1e9, r->class_bytes[OPC_OTHER] / 1e9);
}
