// The fine-tuning loop (issue 14): a task model (cfg->task.type != none) initialised from a
// pretraining checkpoint (train.init_from: encoder tensors copied by name, the pretraining head
// ignored, the task head seeded) or at random; epochs over the train features shuffled per epoch
// (seeded), global / micro batch with accumulation, the pretraining optimizer, schedule and
// clipping; evaluation on the dev split after every epoch (and every train.eval_every steps);
// the best evaluation's weights kept in out_dir/best; metrics.jsonl, TensorBoard,
// out_dir/finetune_result.json.  Data-parallel under mpirun through the GradReducer.
#ifndef MHE_TRAINER_FINETUNE_H
#define MHE_TRAINER_FINETUNE_H

#include "comm/comm.h"
#include "trainer/config/config.h"

typedef struct {
    const char *resume;   // "auto" (newest valid checkpoint in out_dir, if any), "none", or a path
    int64_t stop_after;   // end after that step with a checkpoint (0: no), as train's --stop-after
} FinetuneOptions;

// Returns the process exit status: 0 done, 1 runtime failure (non-finite loss under
// on_nonfinite: stop, failed write), 128 + signal after SIGTERM/SIGINT/SIGHUP (checkpoint saved).
int finetune_run(const Config *cfg, Comm *comm, const FinetuneOptions *opt);

#endif
