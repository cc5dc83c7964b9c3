// Gradient reduction between data-parallel workers, behind one interface (DESIGN.md §6).
// After grad_reducer_finish, grads[begin, end) holds the sum over ranks of every rank's
// gradients: the whole buffer, or this rank's shard under ZeRO-1.  The way is chosen once, at
// creation, from where the gradients live and what the run asks for:
//   MPI buckets   host gradients, cut in reverse buffer order into contiguous buckets of about
//                 bucket_mb; a bucket's all-reduce starts as soon as the backward pass has
//                 finished every piece in it, so communication overlaps the rest of backward
//   MPI ZeRO-1    host gradients reduce-scattered onto the shard owners; after the update each
//                 owner's range of the parameters is all-gathered (grad_reducer_gather_params)
//   MPI staged    device gradients without a device all-reduce: copied to host, MPI buckets,
//                 copied back
//   device        device gradients summed in place by the device's own all-reduce (NCCL): in
//                 the same buckets, each started on the device's communication stream as the
//                 backward pass finishes it (allreduce_start), completed before the update
//                 (allreduce_finish); or in one call after the backward pass (allreduce only)
//   device ZeRO-1 the same buckets, each cut at the shard boundaries and every piece summed
//                 onto its owner (reduce_start); after the update each owner's range of the
//                 parameters is broadcast to the others (broadcast_start), on the device too
// The sum is what the optimizer needs: each rank's gradients are already divided by the
// global number of labelled positions.
#ifndef MHE_COMM_GRAD_REDUCER_H
#define MHE_COMM_GRAD_REDUCER_H

#include <stddef.h>

#include "comm/comm.h"

// A contiguous piece of the gradient buffer (one tensor), final once the backward pass has
// finished `stage`: stages count down from the output head (highest) to the embeddings (-1).
typedef struct {
    size_t offset, numel;
    int stage;
} GradPiece;

// Gradients in device memory.  allreduce (NULL when the device has none, e.g. dist.backend
// mpi) sums a device buffer over ranks in place; to_host/to_device stage it for MPI otherwise.
// allreduce_start/allreduce_finish (both or neither): the overlapped form, start enqueues a
// sum ordered after the device work issued so far and returns, finish completes every
// started sum and orders later device work after them.
typedef struct {
    void *ctx;
    void (*allreduce)(void *ctx, float *buf, size_t n);
    void (*allreduce_start)(void *ctx, float *buf, size_t n);
    void (*allreduce_finish)(void *ctx);
    // ZeRO-1 on device (both or neither): the sum of buf onto rank root's (the others' left as
    // they were), root's buf into everyone's; completed by allreduce_finish.
    void (*reduce_start)(void *ctx, float *buf, size_t n, int root);
    void (*broadcast_start)(void *ctx, float *buf, size_t n, int root);
    void (*to_host)(void *ctx, float *host, const float *dev, size_t n);
    void (*to_device)(void *ctx, float *dev, const float *host, size_t n);
} GradDevice;

typedef struct {
    float *grads;              // where the backward pass writes: host, or device memory
    size_t total;              // floats in grads
    const GradPiece *pieces;   // in buffer order
    int n_pieces;
    float bucket_mb;           // <= 0: one bucket
    int zero;                  // ZeRO-1 (host gradients, or device ones with reduce_start)
    const GradDevice *device;  // NULL: host gradients
    int ranks;                 // > 0: shard and reduce as if over this many ranks (bench's cost
                               // prediction on one process: collectives are recorded, not run)
} GradReducerSpec;

// This rank's shard and every rank's (the whole buffer for everyone unless ZeRO-1).
typedef struct {
    int enabled;
    size_t begin, end;
    int *counts, *displs;
} GradShards;

typedef struct GradReducer GradReducer;

GradReducer *grad_reducer_create(Comm *comm, const GradReducerSpec *spec);
void grad_reducer_free(GradReducer *r);

const GradShards *grad_reducer_shards(const GradReducer *r);
// Whether grad_reducer_stage_done overlaps communication with backward (MPI buckets, device
// buckets).
int grad_reducer_overlaps(const GradReducer *r);
// With overlap off every bucket starts at grad_reducer_finish (for measuring the overlap).
void grad_reducer_set_overlap(GradReducer *r, int on);
int grad_reducer_bucket_count(const GradReducer *r);
// One line for the run banner: how gradients are reduced.
const char *grad_reducer_describe(const GradReducer *r);

// Backward progress (buckets): `stage` is done; starts every bucket that became final.
void grad_reducer_stage_done(GradReducer *r, int stage);
// Completes the reduction: grads[shards.begin, shards.end) holds the sum over ranks.
void grad_reducer_finish(GradReducer *r);
// After the update: every rank's range of params to every rank (ZeRO-1); otherwise nothing.
void grad_reducer_gather_params(GradReducer *r, float *params);

#endif
