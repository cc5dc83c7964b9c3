// ZeRO stage 1 (DESIGN.md §6): the optimizer state is sharded across ranks.  Rank r owns the
// float range [begin, end) of the flat parameter buffer: gradients are reduce-scattered onto
// the owners, each rank updates its range, and the updated ranges are all-gathered.
// Checkpoints stay world-size independent: the shards are gathered into one full optimizer
// state on rank 0 when saving and scattered by range when loading.
#ifndef MHE_TRAINER_ZERO_H
#define MHE_TRAINER_ZERO_H

#include <stddef.h>

#include "comm/comm.h"
#include "trainer/train/optim.h"

typedef struct {
    int enabled;
    size_t begin, end;     // this rank's range (the whole buffer when disabled)
    int *counts, *displs;  // every rank's range
    float *shard;          // reduce-scatter output scratch, end - begin floats
} ZeroShards;

void zero_init(ZeroShards *z, Comm *comm, size_t total, int enabled);
void zero_free(ZeroShards *z);
// grads (all ranks' full local sums) -> grads[begin, end) holds the sum over ranks.
void zero_reduce_grads(ZeroShards *z, Comm *comm, float *grads);
// Every rank's updated range of params to every rank.
void zero_gather_params(ZeroShards *z, Comm *comm, float *params);
// Shard states <-> the full state on rank 0 (`full` covers [0, total); only rank 0's is used).
void zero_gather_state(ZeroShards *z, Comm *comm, const OptimState *shard, OptimState *full);
void zero_scatter_state(ZeroShards *z, Comm *comm, const OptimState *full, OptimState *shard);

#endif
