// What the pretraining loop (trainer.c) and the fine-tuning loop (finetune.c) set up alike: the
// gradient reducer over a model's parameter table.
#ifndef MHE_TRAINER_REDUCER_SETUP_H
#define MHE_TRAINER_REDUCER_SETUP_H

#include "comm/grad_reducer.h"
#include "kernels/backend_info.h"
#include "trainer/config/config.h"
#include "trainer/model/params.h"

// One GradPiece per tensor (in table order, with the backward stage after which it is final)
// and, on a device backend, the GradDevice (through dcomm when there is one).  *device and
// *pieces must outlive the reducer (it keeps pointers to them); free *pieces after it.  ranks > 0
// (bench): shard and reduce as if over that many ranks; 0: the communicator's.
GradReducer *reducer_setup(Comm *comm, Backend *be, DeviceComm *dcomm, const ParamTable *t, float *grads,
                           const Config *cfg, int zero, GradDevice *device, GradPiece **pieces, int ranks);
// The backward hook that hands a finished stage to the reducer (model_set_backward_hook).
void reducer_setup_stage_done(void *reducer, int stage);

#endif
