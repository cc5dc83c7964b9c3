// Pretraining (DESIGN.md §5): the run engine (run_engine.h) driven by the loader's shards, the
// MLM/CLM loss and the validation split.
#ifndef MHE_TRAINER_TRAINER_H
#define MHE_TRAINER_TRAINER_H

#include "comm/comm.h"
#include "trainer/config/config.h"
#include "trainer/train/run_engine.h"

typedef RunOptions TrainOptions;

// Trains as cfg says; returns the process exit status: 0 done (or --stop-after), 128 + signal
// number when stopped by SIGTERM/SIGINT/SIGHUP after saving its checkpoint, 1 a runtime failure
// (non-finite loss under on_nonfinite: stop, too many non-finite steps in a row, a failed write).
int trainer_run(const Config *cfg, Comm *comm, const TrainOptions *opt);

#endif
