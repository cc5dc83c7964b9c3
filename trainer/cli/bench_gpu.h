// The cost-model half of `mhetrain bench --gpu` (cmd_bench_gpu.c).
#ifndef MHE_TRAINER_BENCH_GPU_H
#define MHE_TRAINER_BENCH_GPU_H

#include "kernels/backend_info.h"
#include "trainer/config/config.h"
#include "trainer/model/model.h"

// Without a visible GPU, replaces the process by mhetrain_emu (same arguments), whose emulated
// backend predicts in record-only mode; returns when a GPU is present or already emulated.
void bench_gpu_reexec_emulated(int argc, char **argv);
// Prints the predicted step on g, bound and expected (and the measured op classes when
// `measured` is non-NULL).  host_s > 0: the host's own time per step (record-only: issuing every
// call with nothing run); the expected step is then max(host, GPU).
void bench_gpu_report(const GpuSpec *g, int bf16, int record_only, const CostReport *r,
                      double model_flops, long tokens, const OpProfile *measured, int measured_steps,
                      int top, double host_s);

// bench --ranks N: the step as the trainer runs it data-parallel on a CUDA backend.  The real
// gradient reducer and NCCL communicator (over this process alone, an MPI singleton) start
// each gradient bucket on the communication stream as the backward pass finishes it; the cost
// model predicts those all-reduces as N-rank ring all-reduces.  NULL when ranks == 0.
typedef struct BenchDist BenchDist;
BenchDist *bench_gpu_dist_create(int ranks, int overlap, const Config *cfg, Backend *be, Model *m);
void bench_gpu_dist_finish(BenchDist *d);  // after the backward pass, before the update
// This rank's optimizer range under dist.zero: 1 ([0, total) otherwise or without --ranks) and,
// after the update, the shards' broadcast.
void bench_gpu_dist_shard(const BenchDist *d, size_t total, size_t *begin, size_t *end);
void bench_gpu_dist_gather(BenchDist *d, float *params);
void bench_gpu_dist_free(BenchDist *d);

#endif
