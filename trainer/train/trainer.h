// The training loop (DESIGN.md §5): one Trainer context owns the config, communicator, backend,
// model, loaders, optimizer state, gradient buckets and the run's outputs.
#ifndef MHE_TRAINER_TRAINER_H
#define MHE_TRAINER_TRAINER_H

#include <stdint.h>

#include "comm/comm.h"
#include "trainer/config/config.h"

typedef struct {
    const char *resume;              // "auto" (newest valid checkpoint, if any), "none", or a path
    int64_t stop_after;              // end this process after that step, with a checkpoint (0: no)
    int64_t inject_nonfinite_step;   // testing: poison the gradients of that step (-1: never)
    int no_overlap;                  // all-reduce only after the whole backward pass
} TrainOptions;

// Trains as cfg says; returns the process exit status (0 done or stopped by a signal after
// saving, 1 stopped by a non-finite loss under on_nonfinite: stop).
int trainer_run(const Config *cfg, Comm *comm, const TrainOptions *opt);

#endif
