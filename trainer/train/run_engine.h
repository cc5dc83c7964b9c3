// The run engine (DESIGN.md §5): one run's life cycle, written once for pretraining (trainer.c)
// and fine-tuning (finetune.c).  The engine owns the lock, config and rank agreement, backend,
// model, gradient reducer (ZeRO-1 included), optimizer state, schedule, checkpoints and resume,
// the step (accumulation, global-count loss division, non-finite policy, clipping, update),
// replica checks, metrics and TensorBoard, signals, --stop-after, train.time_limit_s and
// teardown.  A job supplies only its batch source, its loss (forward of one micro-batch) and its
// evaluation, through RunJob.
#ifndef MHE_TRAINER_RUN_ENGINE_H
#define MHE_TRAINER_RUN_ENGINE_H

#include <stdint.h>

#include "comm/comm.h"
#include "comm/grad_reducer.h"
#include "kernels/backend_info.h"
#include "trainer/config/config.h"
#include "trainer/io/metrics.h"
#include "trainer/io/tensorboard.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"
#include "trainer/train/signals.h"

typedef struct {
    const char *resume;              // "auto" (newest valid checkpoint, if any), "none", or a path
    int64_t stop_after;              // end this process after that step, with a checkpoint (0: no)
    int64_t inject_nonfinite_step;   // testing: poison the gradients of that step (-1: never)
    int no_overlap;                  // all-reduce only after the whole backward pass
    int allow_config_change;         // resume although the run's identity changed (recorded)
} RunOptions;

typedef struct {
    const Config *cfg;
    const RunOptions *opt;
    Comm *comm;
    int rank, world;
    Backend *be;
    Model *model;
    const ParamTable *table;
    float *params, *grads;      // backend memory
    float *host_params;         // host mirror (the CPU backend's own buffer)
    float *dev_m, *dev_v, *dev_u;  // device optimizer state (non-host backends)
    DeviceComm *dcomm;          // NCCL between GPUs (dist.backend auto|nccl on a device)
    OptimState opt_state;       // this rank's range (ZeRO-1) or the whole buffer
    GradReducer *reducer;       // MPI buckets / ZeRO-1 / MPI staged / NCCL: chosen in setup
    const GradShards *zero;     // the reducer's ranges: this rank's optimizer range
    GradDevice device;          // device gradients: the backend's copies, NCCL when present
    GradPiece *pieces;          // the parameter table as the reducer sees it
    int64_t step, total_steps, start_step;
    int resumed;                // the weights came from this run's own checkpoint
    double t_start;
    MetricsLog metrics;         // rank 0
    TbWriter tb;                // rank 0
    SignalWatch signals;
    char *config_yaml;
    int64_t replica_checks;     // logging steps at which all ranks compared weight checksums
    int lock_fd;                // rank 0: flock on out_dir/.lock (-1 elsewhere)
    int64_t nonfinite_run;      // consecutive non-finite steps so far
    int64_t diverged_at;        // first step of the trailing run of non-finite losses (0: finite)
    double final_loss;          // the job's last evaluation loss (finish sets it; 0 without one)
    int64_t saved_total;        // rank 0, on resume: the checkpoint's run length in steps (0: unknown)
} RunEngine;

typedef struct {
    double loss, grad_norm, lr, step_s;
    int skipped;                // non-finite, not applied
} StepResult;

// What a job supplies.  self is the job's own state; every hook runs on every rank unless it
// says otherwise.
typedef struct {
    void *self;
    int seq_len;                // the model's sequence length
    // model_backward or model_backward_task: d(loss sum)/dθ / divisor.
    void (*backward)(Model *m, double divisor);
    // After the model exists: open the data, agree on it across ranks, set e->total_steps.
    void (*open)(void *self, RunEngine *e);
    // Rank 0, train.init_from set, no checkpoint of this run: fill e->host_params from the
    // checkpoint dir (its model already checked against this run's).
    void (*init_from)(void *self, RunEngine *e, const char *dir);
    // After the weights came from this run's checkpoint (optional).
    void (*resumed)(void *self, RunEngine *e);
    // Once set up, before the first step: the banner, a baseline evaluation (optional).
    void (*begin)(void *self, RunEngine *e);
    // Step e->step's batches (this rank's share): returns how many micro-batches; adds the
    // positions or rows that carry a label to *labelled.  The engine divides by their global sum.
    int (*batch)(void *self, RunEngine *e, double *labelled);
    // A one-line reason for a global batch without a label (step number given 1-based).
    void (*empty_batch)(void *self, RunEngine *e, char *msg, size_t len);
    // Training forward of micro-batch i (dropout seed and the loss); the engine runs backward.
    void (*forward)(void *self, RunEngine *e, int i);
    // Rank 0: the step's line, metrics row and TensorBoard scalars (e->step: steps done).
    void (*log)(void *self, RunEngine *e, const StepResult *r);
    // After step e->step (and its log): evaluations; returns whether a checkpoint is due.
    int (*after_step)(void *self, RunEngine *e);
    // After the last step, on success: the final evaluation or report (optional).
    void (*finish)(void *self, RunEngine *e);
    // Frees the job's state (optional).
    void (*close)(void *self, RunEngine *e);
} RunJob;

// Runs the job; returns the process exit status: 0 done (or --stop-after), 128 + signal number
// when stopped by SIGTERM/SIGINT/SIGHUP after saving its checkpoint, 1 a runtime failure
// (non-finite loss under on_nonfinite: stop, too many non-finite steps in a row, a failed write).
int run_engine(const Config *cfg, Comm *comm, const RunOptions *opt, const RunJob *job);

// For the jobs.
int run_is_host(const RunEngine *e);
// A checkpoint of the weights and the whole optimizer state into dir/checkpoints (all ranks).
void run_save(RunEngine *e, const char *dir, int keep_last);
// A failed write of rank 0's outputs stops the run (what: the file, under train.out_dir).
void run_check_write(RunEngine *e, int rc, const char *what);
// Rank 0: a metrics.jsonl row and TensorBoard scalars at e->step, each write checked.
void run_record(RunEngine *e, int n, const MetricValue *v, int nt, const char *const *tags, const float *vals);

#endif
