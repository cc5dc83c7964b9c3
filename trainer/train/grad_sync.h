// Gradient all-reduce in buckets (DESIGN.md §6): the gradient buffer is cut, in reverse table
// order, into contiguous buckets of about dist.bucket_mb; a bucket's all-reduce starts as soon
// as the backward pass has finished every tensor in it, so communication overlaps the rest of
// the backward pass.  The sum over ranks is what the optimizer needs: each rank's gradients are
// already divided by the global number of labelled positions.
#ifndef MHE_TRAINER_GRAD_SYNC_H
#define MHE_TRAINER_GRAD_SYNC_H

#include "comm/comm.h"
#include "trainer/model/params.h"

typedef struct GradSync GradSync;

// grads: host memory (the MPI communicator reduces host buffers).  n_layers = model.layers.
GradSync *grad_sync_create(Comm *comm, const ParamTable *t, int n_layers, float *grads, float bucket_mb);
void grad_sync_free(GradSync *g);

// Backward progress: `stage` counts down from n_layers (the output head is done) through each
// layer l (layer l done) to -1 (embeddings done).  Starts every bucket that became final.
void grad_sync_stage_done(GradSync *g, int stage);
// Starts what has not started and waits for all buckets.
void grad_sync_finish(GradSync *g);
// With overlap off every bucket starts at grad_sync_finish (for measuring the overlap).
void grad_sync_set_overlap(GradSync *g, int on);
int grad_sync_bucket_count(const GradSync *g);

#endif
