// The optimizer's moments as the checkpoint stores them.  The type lives here, below the
// training loop, so that checkpoint.h can save and restore it without seeing the optimizer;
// trainer/train/optim.h creates, updates and frees it (optim_state_init/free, optim_step).
#ifndef MHE_TRAINER_OPTIM_STATE_H
#define MHE_TRAINER_OPTIM_STATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t begin, end;   // range of the flat parameter buffer this state updates
    float *buf;          // one allocation [m | v], each (end - begin) floats: checkpointed as is
    float *m, *v;        // first and second moments, indexed by (offset - begin)
    int64_t step;        // updates applied so far (drives the bias correction)
    double *norms;       // LAMB scratch: 2 * table->count sums of squares, [w... | u...]
    int n_norms;         // table->count
} OptimState;

#endif
