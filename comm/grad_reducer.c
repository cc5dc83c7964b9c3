#include "comm/grad_reducer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fnv1a.h"

typedef struct {
    size_t begin, end;  // float range of the gradient buffer
    int ready_stage;    // the bucket is final once this backward stage is done
    int handle;         // comm request, -1 when not started
} Bucket;

typedef enum { WAY_BUCKETS, WAY_ZERO, WAY_STAGED, WAY_DEVICE, WAY_DEVICE_ZERO } Way;

struct GradReducer {
    Comm *comm;
    Way way;
    int world;
    float *grads;       // the backward pass's buffer
    size_t total;
    GradDevice device;  // copied from the spec (WAY_STAGED, WAY_DEVICE)
    float *host;        // WAY_STAGED: host copy the buckets reduce; else grads
    Bucket *buckets;    // WAY_BUCKETS, WAY_STAGED, WAY_DEVICE with allreduce_start
    int n_buckets;
    int next;           // buckets [0, next) have started (they are ordered by ready_stage)
    int overlap;
    GradShards shards;
    float *shard;       // WAY_ZERO: reduce-scatter output scratch, end - begin floats
};

// Every rank's range: equal ceil(total/world) slices under ZeRO-1, else the whole buffer.
static void shards_init(GradShards *z, int world, int rank, size_t total, int enabled) {
    memset(z, 0, sizeof *z);
    z->enabled = enabled;
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
}

// Buckets from the pieces, walked from the end of the buffer: the order backward finishes them.
static void buckets_init(GradReducer *r, const GradReducerSpec *s) {
    size_t cap = s->bucket_mb > 0 ? (size_t)(s->bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : s->total;
    if (cap == 0) cap = 1;
    r->buckets = mhe_calloc((size_t)s->n_pieces + 1, sizeof *r->buckets);
    for (int i = s->n_pieces - 1; i >= 0; i--) {
        const GradPiece *p = &s->pieces[i];
        Bucket *b = r->n_buckets ? &r->buckets[r->n_buckets - 1] : NULL;
        // A bucket is a contiguous range whose pieces become final together or earlier; it is
        // ready at the latest (smallest) stage of its pieces.
        if (b && b->end - b->begin + p->numel <= cap && b->begin == p->offset + p->numel) {
            b->begin = p->offset;
            if (p->stage < b->ready_stage) b->ready_stage = p->stage;
        } else {
            b = &r->buckets[r->n_buckets++];
            b->begin = p->offset;
            b->end = p->offset + p->numel;
            b->ready_stage = p->stage;
        }
        b->handle = -1;
    }
    // Ready stages are non-increasing along the bucket list; make it strictly monotone so a
    // prefix of buckets is always what can start.
    for (int k = 1; k < r->n_buckets; k++)
        if (r->buckets[k].ready_stage > r->buckets[k - 1].ready_stage)
            r->buckets[k].ready_stage = r->buckets[k - 1].ready_stage;
}

// Every later collective's size follows from the buffer's layout, fixed here: ranks that differ
// in it would hand MPI or NCCL mismatched counts, which crash inside the library (or sum
// unrelated tensors) instead of failing.  One fixed-size all-gather settles it before any of
// them; on a mismatch every rank leaves with the sizes of each side.
static void check_layout(Comm *comm, const GradReducerSpec *s) {
    const int world = comm_world(comm);
    if (world == 1 || s->ranks > 0) return;
    uint64_t mine[4] = {s->total, (uint64_t)s->n_pieces, FNV1A_BASIS, 0};
    for (int i = 0; i < s->n_pieces; i++) {
        uint64_t v[3] = {s->pieces[i].offset, s->pieces[i].numel, (uint64_t)(int64_t)s->pieces[i].stage};
        mine[2] = fnv1a(mine[2], v, sizeof v);
    }
    float mb = s->bucket_mb;
    mine[3] = fnv1a(fnv1a(FNV1A_BASIS, &mb, sizeof mb), &s->zero, sizeof s->zero);
    mine[3] = fnv1a(mine[3], &(int){s->device != NULL}, sizeof(int));
    uint64_t *all = mhe_malloc((size_t)world * sizeof mine);
    comm_allgather(comm, mine, all, sizeof mine);
    char msg[1024] = "";
    for (int r = 1; r < world && !msg[0]; r++)
        if (memcmp(all + 4 * r, all, sizeof mine) != 0)
            snprintf(msg, sizeof msg,
                     "gradient buffers differ between ranks (rank 0: %llu floats in %llu tensors, rank %d: %llu "
                     "floats in %llu tensors%s); no collective was started -- every rank must build the same model "
                     "with the same dist.* settings",
                     (unsigned long long)all[0], (unsigned long long)all[1], r, (unsigned long long)all[4 * r],
                     (unsigned long long)all[4 * r + 1],
                     all[4 * r + 3] != all[3] ? ", bucket size, ZeRO or device settings differ" : "");
    free(all);
    if (msg[0]) comm_exit_all(comm, 1, msg);
}

GradReducer *grad_reducer_create(Comm *comm, const GradReducerSpec *s) {
    check_layout(comm, s);
    GradReducer *r = mhe_calloc(1, sizeof *r);
    r->comm = comm;
    r->world = s->ranks > 0 ? s->ranks : comm_world(comm);
    r->grads = s->grads;
    r->total = s->total;
    r->overlap = 1;
    const int device_zero = s->zero && s->device && r->world > 1;
    if (device_zero && !(s->device->reduce_start && s->device->broadcast_start && s->device->allreduce_finish))
        mhe_fatal("ZeRO-1 on device gradients needs the device's own collectives (NCCL: dist.backend auto or nccl)");
    shards_init(&r->shards, r->world, s->ranks > 0 ? 0 : comm_rank(comm), s->total, s->zero);
    r->host = s->grads;
    if (s->device) {
        r->device = *s->device;
        r->way = device_zero ? WAY_DEVICE_ZERO : s->device->allreduce ? WAY_DEVICE : WAY_STAGED;
        if (r->way == WAY_STAGED) r->host = mhe_malloc(s->total * sizeof(float));
    } else {
        r->way = s->zero ? WAY_ZERO : WAY_BUCKETS;
    }
    if (r->way == WAY_ZERO) r->shard = mhe_malloc((r->shards.end - r->shards.begin + 1) * sizeof(float));
    if (r->way == WAY_BUCKETS || r->way == WAY_STAGED || r->way == WAY_DEVICE_ZERO ||
        (r->way == WAY_DEVICE && r->device.allreduce_start))
        buckets_init(r, s);
    return r;
}

void grad_reducer_free(GradReducer *r) {
    if (!r) return;
    if (r->host != r->grads) free(r->host);
    free(r->buckets);
    free(r->shard);
    free(r->shards.counts);
    free(r->shards.displs);
    free(r);
}

const GradShards *grad_reducer_shards(const GradReducer *r) { return &r->shards; }
int grad_reducer_overlaps(const GradReducer *r) {
    return r->way == WAY_BUCKETS || ((r->way == WAY_DEVICE || r->way == WAY_DEVICE_ZERO) && r->n_buckets > 0);
}
void grad_reducer_set_overlap(GradReducer *r, int on) { r->overlap = on; }
int grad_reducer_bucket_count(const GradReducer *r) { return r->n_buckets; }

const char *grad_reducer_describe(const GradReducer *r) {
    if (r->world == 1) return "nobody (one worker)";
    switch (r->way) {
    case WAY_DEVICE:
        if (!r->n_buckets) return "NCCL on device buffers";
        return r->overlap ? "NCCL on device buffers in buckets on a second stream, overlapped with the backward pass"
                          : "NCCL on device buffers in buckets after the backward pass";
    case WAY_STAGED: return "MPI through host staging";
    case WAY_ZERO: return "MPI reduce-scatter + all-gather (ZeRO-1)";
    case WAY_DEVICE_ZERO:
        return r->overlap ? "NCCL reduce onto the shard owners in buckets on a second stream, overlapped with the "
                            "backward pass, + broadcast of the updated shards (ZeRO-1)"
                          : "NCCL reduce onto the shard owners in buckets after the backward pass, + broadcast of "
                            "the updated shards (ZeRO-1)";
    default: return "MPI in buckets overlapped with the backward pass";
    }
}

static void start(GradReducer *r, Bucket *b) {
    if (r->way == WAY_DEVICE_ZERO) {  // each shard's part of the bucket onto its owner
        const GradShards *z = &r->shards;
        for (int q = 0; q < r->world; q++) {
            size_t lo = (size_t)z->displs[q], hi = lo + (size_t)z->counts[q];
            if (lo < b->begin) lo = b->begin;
            if (hi > b->end) hi = b->end;
            if (lo < hi) r->device.reduce_start(r->device.ctx, r->grads + lo, hi - lo, q);
        }
    } else if (r->way == WAY_DEVICE)  // on the device's communication stream; no host handle
        r->device.allreduce_start(r->device.ctx, r->grads + b->begin, b->end - b->begin);
    else
        b->handle = comm_allreduce_start_f32(r->comm, r->host + b->begin, b->end - b->begin);
}

void grad_reducer_stage_done(GradReducer *r, int stage) {
    if (!grad_reducer_overlaps(r) || !r->overlap) return;
    while (r->next < r->n_buckets && r->buckets[r->next].ready_stage >= stage) start(r, &r->buckets[r->next++]);
    // MPI advances non-blocking collectives only inside MPI calls: poll once per stage.
    if (r->way == WAY_BUCKETS) comm_progress(r->comm);
}

static void buckets_finish(GradReducer *r) {
    while (r->next < r->n_buckets) start(r, &r->buckets[r->next++]);
    for (int k = 0; k < r->n_buckets; k++) {
        comm_wait(r->comm, r->buckets[k].handle);
        r->buckets[k].handle = -1;
    }
    r->next = 0;
}

void grad_reducer_finish(GradReducer *r) {
    switch (r->way) {
    case WAY_BUCKETS: buckets_finish(r); break;
    case WAY_ZERO: {
        const GradShards *z = &r->shards;
        comm_reduce_scatter_f32(r->comm, r->grads, r->shard, z->counts);
        memcpy(r->grads + z->begin, r->shard, (z->end - z->begin) * sizeof(float));
        break;
    }
    case WAY_STAGED:
        r->device.to_host(r->device.ctx, r->host, r->grads, r->total);
        buckets_finish(r);
        r->device.to_device(r->device.ctx, r->grads, r->host, r->total);
        break;
    case WAY_DEVICE_ZERO:
    case WAY_DEVICE:
        if (!r->n_buckets) {
            r->device.allreduce(r->device.ctx, r->grads, r->total);
            break;
        }
        // With overlap off every bucket starts here, after the backward pass: the same sums
        // over the same ranges, so the same values as overlapped.
        while (r->next < r->n_buckets) start(r, &r->buckets[r->next++]);
        r->next = 0;
        r->device.allreduce_finish(r->device.ctx);
        break;
    }
}

void grad_reducer_gather_params(GradReducer *r, float *params) {
    if (r->way == WAY_ZERO) comm_allgatherv_f32(r->comm, params, r->shards.counts, r->shards.displs);
    if (r->way == WAY_DEVICE_ZERO) {
        for (int q = 0; q < r->world; q++)
            r->device.broadcast_start(r->device.ctx, params + r->shards.displs[q], (size_t)r->shards.counts[q], q);
        r->device.allreduce_finish(r->device.ctx);
    }
}
