// train.init_from for fine-tuning (finetune_init.c).
#ifndef MHE_TRAINER_FINETUNE_INIT_H
#define MHE_TRAINER_FINETUNE_INIT_H

#include <stddef.h>

#include "trainer/model/params.h"

// Copies the encoder tensors of the checkpoint `path` (a checkpoint directory, or a run's
// out_dir: its newest valid checkpoint) into params (host, ParamTable order), leaving task.*
// untouched.  A missing encoder tensor or a different shape is a one-line error (exit 2).
// Returns how many tensors of the checkpoint were ignored (its pretraining head); the resolved
// checkpoint directory goes to dir_out when non-NULL.
int finetune_load_encoder(const char *path, const ParamTable *t, float *params, char *dir_out, size_t dir_len);

#endif
