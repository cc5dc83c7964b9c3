#include "trainer/train/grad_sync.h"

#include <stdlib.h>

#include "common/error.h"

typedef struct {
    size_t begin, end;  // float range of the gradient buffer
    int ready_stage;    // the bucket is final once this backward stage is done
    int handle;         // comm request, -1 when not started
} Bucket;

struct GradSync {
    Comm *comm;
    float *grads;
    Bucket *buckets;
    int n_buckets;
    int next;           // buckets [0, next) have started (they are ordered by ready_stage)
    int overlap;
};

// The backward stage after which tensor i's gradient is final.  Layer tensors: their layer.
// Tensors outside the layers: the head and final norm (after the layers in the table) are done
// first, stage n_layers; the embeddings (before the layers) last, stage -1 -- the tied word
// embedding also receives the head's gradient but is only final after the embedding backward.
static int ready_stage(const ParamTable *t, int i, int n_layers) {
    const ParamTensor *p = &t->tensors[i];
    if (p->layer >= 0) return p->layer;
    for (int j = 0; j < i; j++)
        if (t->tensors[j].layer >= 0) return n_layers;
    return -1;
}

GradSync *grad_sync_create(Comm *comm, const ParamTable *t, int n_layers, float *grads, float bucket_mb) {
    GradSync *g = mhe_calloc(1, sizeof *g);
    g->comm = comm;
    g->grads = grads;
    g->overlap = 1;
    size_t cap = bucket_mb > 0 ? (size_t)(bucket_mb * 1024.0 * 1024.0 / sizeof(float)) : t->total;
    if (cap == 0) cap = 1;
    g->buckets = mhe_calloc((size_t)t->count, sizeof *g->buckets);
    // Walk tensors from the end of the buffer: that is the order the backward pass finishes them.
    for (int i = t->count - 1; i >= 0; i--) {
        const ParamTensor *p = &t->tensors[i];
        int stage = ready_stage(t, i, n_layers);
        Bucket *b = g->n_buckets ? &g->buckets[g->n_buckets - 1] : NULL;
        // A bucket is a contiguous range whose tensors become final together or earlier; it is
        // ready at the latest (smallest) stage of its tensors.
        if (b && b->end - b->begin + p->numel <= cap && b->begin == p->offset + p->numel) {
            b->begin = p->offset;
            if (stage < b->ready_stage) b->ready_stage = stage;
        } else {
            b = &g->buckets[g->n_buckets++];
            b->begin = p->offset;
            b->end = p->offset + p->numel;
            b->ready_stage = stage;
        }
        b->handle = -1;
    }
    // Ready stages are non-increasing along the bucket list; make it strictly monotone so a
    // prefix of buckets is always what can start.
    for (int k = 1; k < g->n_buckets; k++)
        if (g->buckets[k].ready_stage > g->buckets[k - 1].ready_stage)
            g->buckets[k].ready_stage = g->buckets[k - 1].ready_stage;
    return g;
}

void grad_sync_free(GradSync *g) {
    if (!g) return;
    free(g->buckets);
    free(g);
}

void grad_sync_set_overlap(GradSync *g, int on) { g->overlap = on; }
int grad_sync_bucket_count(const GradSync *g) { return g->n_buckets; }

static void start(GradSync *g, Bucket *b) {
    b->handle = comm_allreduce_start_f32(g->comm, g->grads + b->begin, b->end - b->begin);
}

void grad_sync_stage_done(GradSync *g, int stage) {
    if (!g->overlap) return;
    while (g->next < g->n_buckets && g->buckets[g->next].ready_stage >= stage) start(g, &g->buckets[g->next++]);
    // MPI advances non-blocking collectives only inside MPI calls: poll once per stage.
    comm_progress(g->comm);
}

void grad_sync_finish(GradSync *g) {
    while (g->next < g->n_buckets) start(g, &g->buckets[g->next++]);
    for (int k = 0; k < g->n_buckets; k++) {
        comm_wait(g->comm, g->buckets[k].handle);
        g->buckets[k].handle = -1;
    }
    g->next = 0;
}
