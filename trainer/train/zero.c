#include "trainer/train/zero.h"

// The state buffer is [m | v], each as wide as the state's range.
void zero_gather_state(const GradShards *z, Comm *comm, const OptimState *shard, OptimState *full) {
    comm_gatherv_f32(comm, shard->m, full->m, z->counts, z->displs, 0);
    comm_gatherv_f32(comm, shard->v, full->v, z->counts, z->displs, 0);
    full->step = shard->step;
}

void zero_scatter_state(const GradShards *z, Comm *comm, const OptimState *full, OptimState *shard) {
    comm_scatterv_f32(comm, full->m, shard->m, z->counts, z->displs, 0);
    comm_scatterv_f32(comm, full->v, shard->v, z->counts, z->displs, 0);
    int64_t step = full->step;
    comm_broadcast(comm, &step, sizeof step, 0);
    shard->step = step;
}
