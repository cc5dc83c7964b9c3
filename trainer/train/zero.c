#include "trainer/train/zero.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

void zero_init(ZeroShards *z, Comm *comm, size_t total, int enabled) {
    memset(z, 0, sizeof *z);
    z->enabled = enabled;
    const int world = comm_world(comm), rank = comm_rank(comm);
    z->counts = mhe_calloc((size_t)world, sizeof *z->counts);
    z->displs = mhe_calloc((size_t)world, sizeof *z->displs);
    size_t per = enabled ? (total + (size_t)world - 1) / (size_t)world : total;
    if (per > INT_MAX) mhe_fatal("ZeRO shard of %zu floats exceeds an MPI count; use more ranks", per);
    for (int r = 0; r < world; r++) {
        size_t b = enabled ? (size_t)r * per : 0, e = b + per;
        if (b > total) b = total;
        if (e > total) e = total;
        z->counts[r] = (int)(e - b);
        z->displs[r] = (int)b;
    }
    z->begin = (size_t)z->displs[rank];
    z->end = z->begin + (size_t)z->counts[rank];
    if (enabled) z->shard = mhe_malloc((z->end - z->begin + 1) * sizeof(float));
}

void zero_free(ZeroShards *z) {
    free(z->counts);
    free(z->displs);
    free(z->shard);
    memset(z, 0, sizeof *z);
}

void zero_reduce_grads(ZeroShards *z, Comm *comm, float *grads) {
    comm_reduce_scatter_f32(comm, grads, z->shard, z->counts);
    memcpy(grads + z->begin, z->shard, (z->end - z->begin) * sizeof(float));
}

void zero_gather_params(ZeroShards *z, Comm *comm, float *params) { comm_allgatherv_f32(comm, params, z->counts, z->displs); }

// The state buffer is [m | v], each as wide as the state's range.
void zero_gather_state(ZeroShards *z, Comm *comm, const OptimState *shard, OptimState *full) {
    comm_gatherv_f32(comm, shard->m, full->m, z->counts, z->displs, 0);
    comm_gatherv_f32(comm, shard->v, full->v, z->counts, z->displs, 0);
    full->step = shard->step;
}

void zero_scatter_state(ZeroShards *z, Comm *comm, const OptimState *full, OptimState *shard) {
    comm_scatterv_f32(comm, full->m, shard->m, z->counts, z->displs, 0);
    comm_scatterv_f32(comm, full->v, shard->v, z->counts, z->displs, 0);
    int64_t step = full->step;
    comm_broadcast(comm, &step, sizeof step, 0);
    shard->step = step;
}
