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
    int allow_config_change;         // resume although the run's identity changed (recorded)
} TrainOptions;

// Trains as cfg says; returns the process exit status: 0 done (or --stop-after), 128 + signal
// number when stopped by SIGTERM/SIGINT/SIGHUP after saving its checkpoint, 1 a runtime failure
// (non-finite loss under on_nonfinite: stop, too many non-finite steps in a row, a failed write).
int trainer_run(const Config *cfg, Comm *comm, const TrainOptions *opt);

#endif
