// Learning-rate schedules: linear warmup, then linear, cosine or constant decay to a floor.
#ifndef MHE_TRAINER_SCHEDULE_H
#define MHE_TRAINER_SCHEDULE_H

#include <stdint.h>

#include "trainer/config/config.h"

// The learning rate of update number `step` (0-based: the first optimizer step is 0) in a run
// of `total_steps` updates:
//   warmup (step < W):  lr * (step + 1) / W          (never a zero-lr step; step W-1 gets lr)
//   then, with p = (step - W) / (total_steps - W) in [0, 1):
//     linear:   min_lr + (lr - min_lr) * (1 - p)
//     cosine:   min_lr + (lr - min_lr) * (1 + cos(pi p)) / 2
//     constant: lr                                  (min_lr unused)
//   step >= total_steps (or W >= total_steps after warmup): min_lr, constant: lr.
// Computed in double; the optimizer takes it as float.
double schedule_lr(const OptimConfig *o, int64_t step, int64_t total_steps);

// A resume with another run length (`change`: "train.steps 4 -> 6"): one line to stderr saying
// how the learning rate of the next update moves (the schedule is recomputed over the new
// length), or that it does not (constant schedule past warmup).
void schedule_resume_notice(const OptimConfig *o, const char *change, int64_t step, int64_t old_total,
                            int64_t new_total);

// optim.warmup_steps beyond the run's steps: one warning line to stderr (the learning rate never
// reaches optim.lr).  Returns 1 when it warned.
int schedule_warmup_warning(const OptimConfig *o, int64_t total_steps, const char *source);

#endif
