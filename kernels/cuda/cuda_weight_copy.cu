// defines: bf16 mode's bf16 copies of fp32 matmul operands, the rounding that makes them
// (cuda_round_bf16) and the fp32 write hooks (cuda_fp32_wrote, cuda_fp32_copy_out).
// bf16 copies of fp32 matmul operands (bf16 mode), and the fp32 write hooks that keep them
// current.
//
// In a bf16 run every activation is bf16 (cuda_act_stage.cu); a matmul's fp32 operand is a weight (the
// model's fp32 operands are parameters).  It is read from a bf16 copy of the whole backend
// allocation holding it — the parameter buffer — made at its first use.  One flag per
// allocation, no intervals: every write of fp32 device memory reports itself (cuda_fp32_wrote,
// also called by the memset, copy, upload and all-reduce wrappers) and marks the copy of its
// allocation stale, except an update in place through the dual store (cuda_fp32_copy_out: AdamW,
// LAMB's step, the fp32 elementwise ops), which writes bf16(p) into a current copy as it updates
// p — so across optimizer steps the copy is never re-rounded; an upload, a copy or an all-reduce
// costs one rounding pass over the allocation at its next use as an operand.  The emulated build
// compares every span it hands to cuBLAS with bf16 of the fp32 data and aborts on a difference,
// so a write that does not report itself fails every bf16 test that reads the weight after it.
//
// The same reports tell the deferred column sums (cuda_colsum.h) when a write meets a sum still
// waiting to add into that memory, in both modes.
#include <cstdint>
#include <cstring>
#include <map>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

// The rounding that makes the copies (and the bf16 operands of fp32 memory that has none).
__global__ void to_bf16_kernel(const float *__restrict__ x, __nv_bfloat16 *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        y[i] = __float2bfloat16(x[i]);
}

void cuda_round_bf16(Backend *be, const float *x, __nv_bfloat16 *y, size_t n) {
    MHE_LAUNCH(to_bf16_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(x, y, n);
    CUDA_CHECK_LAUNCH();
}

struct WeightCopy {
    size_t bytes;
    __nv_bfloat16 *copy;  // bytes / 4 values, made on first use as an operand; nullptr: none yet
    bool current;         // copy[i] == bf16(fp32[i]) for the whole allocation
    uint64_t version;     // renewed whenever the copy's values may change (cuda_weight_copy_version)
};
struct WeightCopies {
    std::map<uintptr_t, WeightCopy> allocs;  // by base address
    uint64_t versions = 0;                   // the last version handed out: unique within the backend
};
static WeightCopies &weights(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->weights) c->weights = new WeightCopies();
    return *c->weights;
}
// The allocation holding p (nullptr: not the backend's, or fp32 mode), its base in *base.
static WeightCopy *holding(Backend *be, const void *p, uintptr_t *base) {
    if (!cuda_ctx(be)->weights) return nullptr;
    auto &m = weights(be).allocs;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = m.upper_bound(a);
    if (it == m.begin()) return nullptr;
    --it;
    if (a >= it->first + it->second.bytes) return nullptr;
    *base = it->first;
    return &it->second;
}

void cuda_weight_copy_track(Backend *be, const void *p, size_t bytes) {
    if (act16(be)) {
        WeightCopies &ws = weights(be);
        ws.allocs[reinterpret_cast<uintptr_t>(p)] = WeightCopy{bytes, nullptr, false, ++ws.versions};
    }
}
void cuda_weight_copy_release(Backend *be, const void *p) {
    if (!cuda_ctx(be)->weights) return;
    auto &m = weights(be).allocs;
    auto it = m.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.end()) return;
    cuda_device_free(it->second.copy);
    m.erase(it);
}
void cuda_weight_copies_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->weights) return;
    for (auto &kv : c->weights->allocs) cuda_device_free(kv.second.copy);
    delete c->weights;
    c->weights = nullptr;
}

void cuda_fp32_wrote_alloc(Backend *be, const void *p) {
    uintptr_t base;
    if (WeightCopy *w = holding(be, p, &base)) {
        w->current = false;
        w->version = ++weights(be).versions;
    }
}
void cuda_fp32_wrote(Backend *be, const void *p, size_t bytes) {
    if (!bytes) return;
    cuda_colsum_touch(be, p, bytes);  // a waiting column sum into [p, p + bytes) goes first
    cuda_fp32_wrote_alloc(be, p);
}
__nv_bfloat16 *cuda_fp32_copy_out(Backend *be, const float *p, size_t n) {
    uintptr_t base;
    WeightCopy *w = n ? holding(be, p, &base) : nullptr;
    if (!w || !w->current) return nullptr;
    w->version = ++weights(be).versions;  // the caller stores into it
    return w->copy + (reinterpret_cast<uintptr_t>(p) - base) / sizeof(float);
}

const __nv_bfloat16 *cuda_weight_copy(Backend *be, const float *p, size_t n) {
    uintptr_t base;
    WeightCopy *w = holding(be, p, &base);
    if (!w) return nullptr;
    const size_t all = w->bytes / sizeof(float), off = (reinterpret_cast<uintptr_t>(p) - base) / sizeof(float);
    if (!w->copy) w->copy = static_cast<__nv_bfloat16 *>(cuda_device_alloc(all * sizeof(__nv_bfloat16), cuda_ctx(be)->device));
    if (!w->current) {
        cuda_round_bf16(be, reinterpret_cast<const float *>(base), w->copy, all);
        w->current = true;
        w->version = ++weights(be).versions;
    }
#if defined(MHE_CUDA_EMU)
    if (!mhe_cost_dry_run()) {
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
        for (size_t i = 0; i < n; i++) {
            const __nv_bfloat16 want = __float2bfloat16(p[i]);
            if (std::memcmp(&want, &w->copy[off + i], sizeof want) != 0)
                mhe_fatal("cuda_weight_copy: stale bf16 copy of an fp32 matmul operand at float %zu (%g vs %g): an op "
                          "wrote the fp32 data without reporting it (cuda_fp32_wrote / cuda_fp32_copy_out)",
                          off + i, (double)p[i], (double)__bfloat162float(w->copy[off + i]));
        }
    }
#else
    (void)n;
#endif
    return w->copy + off;
}

uint64_t cuda_weight_copy_version(Backend *be, const float *p) {
    uintptr_t base;
    const WeightCopy *w = holding(be, p, &base);
    return w ? w->version : 0;
}
