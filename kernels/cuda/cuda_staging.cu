// defines: asynchronous host-to-device uploads through pinned staging slots (cuda_staged_upload).
// Host-to-device uploads through pinned staging slots and an asynchronous copy. An upload in the
// middle of a step (token ids, labels, masks) then no longer drains the stream. The caller's
// buffer is copied into a slot at once (ops.h: the caller may reuse its buffer as soon as upload
// returns). A slot is reused only after its last copy has completed, which its event records.
// Uploads larger than kStagedMax (weights at start-up) go straight from the caller's memory and
// wait for the copy: pinned memory then stays at most kSlots x kStagedMax.
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/cuda_internal.h"

namespace {
constexpr int kSlots = 4;
constexpr size_t kStagedMax = 64u << 20;
}  // namespace

struct UploadStaging {
    void *buf[kSlots];
    size_t cap[kSlots];
    cudaEvent_t done[kSlots];
    bool recorded[kSlots];
    int next;
};

void cuda_staging_create(CudaCtx *c) {
    c->staging = static_cast<UploadStaging *>(std::calloc(1, sizeof(UploadStaging)));
    if (!c->staging) mhe_fatal("out of memory creating the CUDA backend's upload staging");
    for (cudaEvent_t &e : c->staging->done) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

void cuda_staging_destroy(CudaCtx *c) {
    UploadStaging *u = c->staging;
    if (!u) return;
    for (int s = 0; s < kSlots; s++) {
        if (u->recorded[s]) CUDA_CHECK(cudaEventSynchronize(u->done[s]));
        CUDA_CHECK(cudaEventDestroy(u->done[s]));
        if (u->buf[s]) CUDA_CHECK(cudaFreeHost(u->buf[s]));
    }
    std::free(u);
    c->staging = nullptr;
}

void cuda_staged_upload(Backend *be, void *dst, const void *src, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (bytes > kStagedMax) {
        CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->stream));
        cuda_stream_sync(be, "upload larger than a staging slot");  // src may be reused at once
        return;
    }
    UploadStaging *u = c->staging;
    const int s = u->next;
    u->next = (s + 1) % kSlots;
    // The slot's previous copy was issued kSlots uploads ago: long done in a training step.
    if (u->recorded[s]) CUDA_CHECK(cudaEventSynchronize(u->done[s]));
    if (u->cap[s] < bytes) {
        if (u->buf[s]) CUDA_CHECK(cudaFreeHost(u->buf[s]));
        u->buf[s] = nullptr;
        CUDA_CHECK(cudaMallocHost(&u->buf[s], bytes));
        u->cap[s] = bytes;
    }
    std::memcpy(u->buf[s], src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, u->buf[s], bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaEventRecord(u->done[s], c->stream));
    u->recorded[s] = true;
}
