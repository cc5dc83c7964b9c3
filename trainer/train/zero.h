// ZeRO stage 1 (DESIGN.md §6): the optimizer state is sharded across ranks.  Rank r owns the
// float range [begin, end) of the flat parameter buffer: the gradient reducer
// (comm/grad_reducer.h) reduce-scatters gradients onto the owners, each rank updates its range,
// and the reducer all-gathers the updated ranges.  Checkpoints stay world-size independent:
// the shards are gathered into one full optimizer state on rank 0 when saving and scattered by
// range when loading (here).
#ifndef MHE_TRAINER_ZERO_H
#define MHE_TRAINER_ZERO_H

#include "comm/comm.h"
#include "comm/grad_reducer.h"
#include "trainer/train/optim.h"

// Shard states <-> the full state on rank 0 (`full` covers [0, total); only rank 0's is used).
void zero_gather_state(const GradShards *z, Comm *comm, const OptimState *shard, OptimState *full);
void zero_scatter_state(const GradShards *z, Comm *comm, const OptimState *full, OptimState *shard);

#endif
