#include "trainer/train/reducer_setup.h"

#include <stdlib.h>
#include <string.h>

#include "common/error.h"

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

static void dev_allreduce(void *dcomm, float *buf, size_t n) { device_comm_allreduce_sum(dcomm, buf, n); }
static void dev_allreduce_start(void *dcomm, float *buf, size_t n) { device_comm_allreduce_start(dcomm, buf, n); }
static void dev_allreduce_finish(void *dcomm) { device_comm_allreduce_finish(dcomm); }
static void dev_reduce_start(void *dcomm, float *buf, size_t n, int root) { device_comm_reduce_start(dcomm, buf, n, root); }
static void dev_broadcast_start(void *dcomm, float *buf, size_t n, int root) {
    device_comm_broadcast_start(dcomm, buf, n, root);
}
static void dev_to_host(void *be, float *host, const float *dev, size_t n) {
    ((Backend *)be)->download(be, host, dev, n * sizeof(float));
}
static void dev_to_device(void *be, float *dev, const float *host, size_t n) {
    ((Backend *)be)->upload(be, dev, host, n * sizeof(float));
}

void reducer_setup_stage_done(void *reducer, int stage) { grad_reducer_stage_done(reducer, stage); }

GradReducer *reducer_setup(Comm *comm, Backend *be, DeviceComm *dcomm, const ParamTable *t, float *grads,
                           const Config *cfg, int zero, GradDevice *device, GradPiece **pieces, int ranks) {
    const int host = strcmp(be->name, "cpu") == 0;
    *device = (GradDevice){.ctx = be, .to_host = dev_to_host, .to_device = dev_to_device};
    if (dcomm) {
        device->ctx = dcomm;
        device->allreduce = dev_allreduce;
        device->allreduce_start = dev_allreduce_start;
        device->allreduce_finish = dev_allreduce_finish;
        device->reduce_start = dev_reduce_start;
        device->broadcast_start = dev_broadcast_start;
    }
    *pieces = mhe_calloc((size_t)t->count + 1, sizeof **pieces);
    for (int i = 0; i < t->count; i++)
        (*pieces)[i] = (GradPiece){t->tensors[i].offset, t->tensors[i].numel, ready_stage(t, i, cfg->model.layers)};
    GradReducerSpec spec = {.grads = grads, .total = t->total, .pieces = *pieces, .n_pieces = t->count,
                            .bucket_mb = cfg->dist.bucket_mb, .zero = zero, .device = host ? NULL : device,
                            .ranks = ranks};
    return grad_reducer_create(comm, &spec);
}
