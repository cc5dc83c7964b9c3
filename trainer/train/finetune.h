// The fine-tuning loop (issue 14): a task model (cfg->task.type != none) initialised from a
// pretraining checkpoint (train.init_from: encoder tensors copied by name, the pretraining head
// ignored, the task head seeded) or at random; epochs over the train features shuffled per epoch
// (seeded), global / micro batch with accumulation, the pretraining optimizer, schedule and
// clipping; evaluation on the dev split after every epoch (and every train.eval_every steps);
// the best evaluation's weights kept in out_dir/best; metrics.jsonl, TensorBoard,
// out_dir/finetune_result.json.  Data-parallel under mpirun (ZeRO-1 included): the run engine's
// life cycle (run_engine.h) around the task's batches, loss and evaluation.
#ifndef MHE_TRAINER_FINETUNE_H
#define MHE_TRAINER_FINETUNE_H

#include "comm/comm.h"
#include "trainer/config/config.h"
#include "trainer/train/run_engine.h"

typedef RunOptions FinetuneOptions;  // inject_nonfinite_step -1 unless testing

// Returns the process exit status: 0 done, 1 runtime failure (non-finite loss under
// on_nonfinite: stop, failed write), 128 + signal after SIGTERM/SIGINT/SIGHUP (checkpoint saved).
int finetune_run(const Config *cfg, Comm *comm, const FinetuneOptions *opt);

#endif
