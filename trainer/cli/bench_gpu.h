// The cost-model half of `mhetrain bench --gpu` (cmd_bench_gpu.c).
#ifndef MHE_TRAINER_BENCH_GPU_H
#define MHE_TRAINER_BENCH_GPU_H

#include "kernels/backend_info.h"

// Without a visible GPU, replaces the process by mhetrain_emu (same arguments), whose emulated
// backend predicts in record-only mode; returns when a GPU is present or already emulated.
void bench_gpu_reexec_emulated(int argc, char **argv);
// Prints the predicted step on g (and the measured op classes when `measured` is non-NULL).
void bench_gpu_report(const GpuSpec *g, int bf16, int record_only, const CostReport *r,
                      double model_flops, long tokens, const OpProfile *measured, int measured_steps);

#endif
