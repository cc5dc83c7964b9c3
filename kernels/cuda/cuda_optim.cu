// defines: the optimizer kernels: AdamW and LAMB per range (adamw_update, lamb_direction:
// adam_kernel) and over every tensor at once (below).
//
// AdamW over every tensor of a model in one launch (ops.h adamw_update_ranges) instead of one
// adam_kernel per tensor (~200 for BERT-base, each paying the launch overhead on small biases
// and LayerNorm vectors); LAMB in three (lamb_direction_ranges: moments, directions and the
// per-tensor sums of squares; axpy_ranges: the trust-ratio step) instead of a direction launch,
// two synchronising sum_squares and an axpy per tensor.
//
// The launch's element space is the concatenation of the ranges; a device table holds, per
// range, where it starts in p and where it starts in that space (plus its weight-decay flag and
// the weights' bf16 copy, cuda_weight_copy.cu), and each thread finds its range by binary search
// over the table (a few hundred entries, read from cache).  The table changes only when the
// ranges or the copies do, so steady-state steps upload nothing.  Element math: kernels/optim_math.h, as adam_kernel.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/optim_math.h"

struct AdamRange {
    size_t start;         // first element in p / grad
    size_t first;         // its index in the launch's element space (sum of the earlier lengths)
    __nv_bfloat16 *copy;  // current bf16 copy of p[start ..] (cuda_fp32_copy_out); nullptr: none
    int decays;           // 1: multiply p by `decay`
    int unused;           // keeps the struct free of padding (tables are compared bytewise)
};

// A table of T kept on the device, uploaded only when its contents change (steady-state steps
// upload nothing; tables are compared bytewise, so T has no padding).
template <typename T> struct DevTable {
    std::vector<T> host;  // the device copy's contents
    T *dev = nullptr;
    size_t cap = 0;       // entries allocated at dev
};

// Uploads `want` when it differs from the table's contents; returns its bytes.
template <typename T> static size_t sync_table(Backend *be, DevTable<T> &tab, const std::vector<T> &want) {
    const size_t bytes = want.size() * sizeof(T);
    if (want.size() != tab.host.size() || std::memcmp(want.data(), tab.host.data(), bytes) != 0) {
        cuda_grow(be, tab.dev, tab.cap, want.size());
        if (bytes) be->upload(be, tab.dev, want.data(), bytes);
        tab.host = want;
    }
    return bytes;
}

struct AdamTable : DevTable<AdamRange> {};

// The range of element e of the launch's space: the last one whose first <= e.
__device__ __forceinline__ int range_of(const AdamRange *__restrict__ r, int count, size_t e) {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (r[mid].first <= e) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// The table of the non-empty ranges of p, each with the weights' current bf16 copy: the ops
// that write p store bf16(p) into it as well, so it stays current (decays may be NULL).
// *total: elements covered; *copied: those with a copy.
static std::vector<AdamRange> weight_ranges(Backend *be, float *p, int count, const size_t *start, const size_t *len,
                                            const unsigned char *decays, size_t *total, double *copied) {
    std::vector<AdamRange> want;
    *total = 0;
    *copied = 0;
    for (int q = 0; q < count; q++) {
        if (!len[q]) continue;
        AdamRange r{};
        r.start = start[q];
        r.first = *total;
        r.copy = cuda_fp32_copy_out(be, p + start[q], len[q]);
        r.decays = decays && decays[q] != 0;
        want.push_back(r);
        *total += len[q];
        if (r.copy) *copied += (double)len[q];
    }
    return want;
}

__global__ void adam_ranges_kernel(const AdamRange *__restrict__ r, int count, size_t total, float *p,
                                   const float *grad, float *m, float *v, size_t m_base, float b1, float b2,
                                   float eps, float step_size, float decay, float bc2_sqrt, float grad_scale) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)blockDim.x * gridDim.x) {
        const int lo = range_of(r, count, e);
        const size_t k = e - r[lo].first, i = r[lo].start + k, j = i - m_base;
        float mi = m[j], vi = v[j];
        optim_moments(&mi, &vi, grad_scale * grad[i], b1, b2);
        m[j] = mi;
        v[j] = vi;
        const float np = adamw_param(p[i], mi, vi, step_size, r[lo].decays ? decay : 1.0f, bc2_sqrt, eps);
        p[i] = np;
        if (r[lo].copy) r[lo].copy[k] = __float2bfloat16(np);
    }
}

static void cuda_adamw_update_ranges(Backend *be, float *p, const float *grad, float *m, float *v, size_t m_base,
                                     int count, const size_t *start, const size_t *len, const unsigned char *decays,
                                     float b1, float b2, float eps, float step_size, float decay, float bc2_sqrt,
                                     float grad_scale) {
    cuda_colsum_flush(be);  // the optimizer reads the gradients (cuda_colsum.cu)
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    if (!c->adam) c->adam = new AdamTable();
    AdamTable &tab = *c->adam;
    size_t total;
    double copied;
    const std::vector<AdamRange> want = weight_ranges(be, p, count, start, len, decays, &total, &copied);
    for (int q = 0; q < count; q++) {
        cuda_fp32_wrote(be, m + (start[q] - m_base), len[q] * sizeof(float));
        cuda_fp32_wrote(be, v + (start[q] - m_base), len[q] * sizeof(float));
    }
    const size_t bytes = sync_table(be, tab, want);
    // The table is read once (the binary searches hit cache), the elements as adam_kernel's,
    // 2 B per copied element.
    const MheCost cost = mhe_cost(ADAM_FLOPS * (double)total, 28.0 * (double)total + (double)bytes + 2.0 * copied);
    if (total)
        MHE_LAUNCH(adam_ranges_kernel, cuda_grid_for(total), MHE_BLOCK, 0, c->stream, cost)(
            tab.dev, (int)want.size(), total, p, grad, m, v, m_base, b1, b2, eps, step_size, decay, bc2_sqrt,
            grad_scale);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

// ---- LAMB over ranges ----
// Phase 1 runs one block per chunk of LAMB_CHUNK elements of one range, so each block's sums
// belong to one tensor and the per-range totals are sums of whole blocks in chunk order: the
// result does not depend on scheduling (resumed runs stay exact).
#define LAMB_CHUNK 8192

struct LambChunk {
    size_t start;  // first element in p / grad
    size_t len;    // <= LAMB_CHUNK
    float wd;
    int range;     // index into the call's ranges
};

struct LambRangeSpan {
    int first_chunk, chunks;
};

struct LambState {
    DevTable<LambChunk> chunks;
    DevTable<LambRangeSpan> spans;
    double *partials = nullptr;         // 2 per chunk (Σ p², Σ u²), then 2 per range (the sums)
    size_t partials_cap = 0;
    DevTable<AdamRange> axpy;           // axpy_ranges' table (decays unused; coef apart)
    float *dev_coef = nullptr;
    size_t coef_cap = 0;
};

__global__ void lamb_chunks_kernel(const LambChunk *__restrict__ ch, const float *p, const float *grad, float *m,
                                   float *v, float *u, size_t m_base, float b1, float b2, float eps, float bc1,
                                   float bc2, float grad_scale, double *partials) {
    MHE_SHARED(double, buf, [32]);
    const LambChunk c = ch[blockIdx.x];
    double pp = 0, uu = 0;
    for (size_t k = threadIdx.x; k < c.len; k += blockDim.x) {
        const size_t i = c.start + k, j = i - m_base;
        float mi = m[j], vi = v[j];
        optim_moments(&mi, &vi, grad_scale * grad[i], b1, b2);
        m[j] = mi;
        v[j] = vi;
        const float ui = lamb_direction_of(p[i], mi, vi, bc1, bc2, eps, c.wd);
        u[j] = ui;
        pp += (double)p[i] * p[i];
        uu += (double)ui * ui;
    }
    pp = block_sum(pp, buf);
    uu = block_sum(uu, buf);
    if (threadIdx.x == 0) {
        partials[2 * (size_t)blockIdx.x] = pp;
        partials[2 * (size_t)blockIdx.x + 1] = uu;
    }
}

// One thread per range: its chunks' partials in chunk order.
__global__ void lamb_range_sums_kernel(const LambRangeSpan *__restrict__ sp, int count, const double *partials,
                                       double *sums) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= count) return;
    double pp = 0, uu = 0;
    for (int k = sp[r].first_chunk; k < sp[r].first_chunk + sp[r].chunks; k++) {
        pp += partials[2 * (size_t)k];
        uu += partials[2 * (size_t)k + 1];
    }
    sums[r] = pp;
    sums[count + r] = uu;
}

static LambState *lamb_state(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->lamb) c->lamb = new LambState();
    return c->lamb;
}

static void cuda_lamb_direction_ranges(Backend *be, const float *p, const float *grad, float *m, float *v, float *u,
                                       size_t m_base, int count, const size_t *start, const size_t *len,
                                       const float *wds, float b1, float b2, float eps, float bc1, float bc2,
                                       float grad_scale, double *sq) {
    cuda_colsum_flush(be);  // the optimizer reads the gradients (cuda_colsum.cu)
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    LambState &st = *lamb_state(be);
    std::vector<LambChunk> chunks;
    std::vector<LambRangeSpan> spans((size_t)count);
    size_t total = 0;
    for (int r = 0; r < count; r++) {
        spans[r] = {(int)chunks.size(), 0};
        for (size_t k = 0; k < len[r]; k += LAMB_CHUNK) {
            chunks.push_back({start[r] + k, len[r] - k < LAMB_CHUNK ? len[r] - k : LAMB_CHUNK, wds[r], r});
            spans[r].chunks++;
        }
        total += len[r];
        cuda_fp32_wrote(be, m + (start[r] - m_base), len[r] * sizeof(float));
        cuda_fp32_wrote(be, v + (start[r] - m_base), len[r] * sizeof(float));
        cuda_fp32_wrote(be, u + (start[r] - m_base), len[r] * sizeof(float));
    }
    // The tables change only with the ranges (or the decays).
    const size_t cb = sync_table(be, st.chunks, chunks), sb = sync_table(be, st.spans, spans);
    cuda_grow(be, st.partials, st.partials_cap, 2 * chunks.size() + 2 * (size_t)count);
    double *partials = st.partials, *sums = st.partials + 2 * chunks.size();
    if (!chunks.empty()) {
        // As lamb_direction (28 B per element) plus the chunk table and partials.
        const MheCost cost = mhe_cost((ADAM_FLOPS + 4.0) * (double)total, 28.0 * (double)total + (double)cb +
                                                                              16.0 * (double)chunks.size());
        MHE_LAUNCH(lamb_chunks_kernel, (unsigned)chunks.size(), MHE_BLOCK, 0, c->stream, cost)(
            st.chunks.dev, p, grad, m, v, u, m_base, b1, b2, eps, bc1, bc2, grad_scale, partials);
        CUDA_CHECK_LAUNCH();
        const unsigned grid = (unsigned)((count + MHE_BLOCK - 1) / MHE_BLOCK);
        MHE_LAUNCH(lamb_range_sums_kernel, grid, MHE_BLOCK, 0, c->stream,
                   mhe_cost_blocks(2.0 * (double)chunks.size(), 16.0 * (double)chunks.size() + (double)sb + 16.0 * count,
                                   cuda_real_blocks(count)))(
            st.spans.dev, count, partials, sums);
        CUDA_CHECK_LAUNCH();
    }
    const size_t hb = 2 * (size_t)count * sizeof(double);
    if (chunks.empty()) {
        std::memset(sq, 0, hb);
    } else {
        if (mhe_cost_record("memcpy d2h", MheCost{0, 0, (double)hb, (double)hb, 0}))
            CUDA_CHECK(cudaMemcpyAsync(sq, sums, hb, cudaMemcpyDeviceToHost, c->stream));
        cuda_stream_sync(be, "LAMB's norms");
    }
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

__global__ void axpy_ranges_kernel(const AdamRange *__restrict__ r, const float *__restrict__ coef, int count,
                                   size_t total, float *p, const float *u, size_t m_base) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)blockDim.x * gridDim.x) {
        const int lo = range_of(r, count, e);
        const size_t k = e - r[lo].first, i = r[lo].start + k;
        const float np = p[i] + coef[lo] * u[i - m_base];
        p[i] = np;
        if (r[lo].copy) r[lo].copy[k] = __float2bfloat16(np);
    }
}

static void cuda_axpy_ranges(Backend *be, float *p, const float *u, size_t m_base, int count, const size_t *start,
                             const size_t *len, const float *coef) {
    cuda_colsum_flush(be);  // the optimizer reads the gradients (cuda_colsum.cu)
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    LambState &st = *lamb_state(be);
    // The weights' bf16 copies follow the step.
    size_t total;
    double copied;
    const std::vector<AdamRange> want = weight_ranges(be, p, count, start, len, nullptr, &total, &copied);
    std::vector<float> co;
    for (int q = 0; q < count; q++)
        if (len[q]) co.push_back(coef[q]);
    const size_t bytes = sync_table(be, st.axpy, want);
    // The coefficients change every step (lr, trust ratios): uploaded each call.
    cuda_grow(be, st.dev_coef, st.coef_cap, co.size());
    if (!co.empty()) be->upload(be, st.dev_coef, co.data(), co.size() * sizeof(float));
    const MheCost cost = mhe_cost(2.0 * (double)total, 12.0 * (double)total + (double)bytes + 4.0 * co.size() +
                                                           2.0 * copied);
    if (total)
        MHE_LAUNCH(axpy_ranges_kernel, cuda_grid_for(total), MHE_BLOCK, 0, c->stream, cost)(
            st.axpy.dev, st.dev_coef, (int)want.size(), total, p, u, m_base);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

void cuda_optim_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (c->adam) {
        cuda_device_free(c->adam->dev);
        delete c->adam;
        c->adam = nullptr;
    }
    if (c->lamb) {
        LambState *s = c->lamb;
        cuda_device_free(s->chunks.dev);
        cuda_device_free(s->spans.dev);
        cuda_device_free(s->partials);
        cuda_device_free(s->axpy.dev);
        cuda_device_free(s->dev_coef);
        delete s;
        c->lamb = nullptr;
    }
}

// Cost model (ADAM_FLOPS, cuda_internal.h): AdamW reads and writes p, m, v and reads g (28
// bytes), LAMB reads p and writes u instead (also 28).
// The element formulas are kernels/optim_math.h's, shared with the CPU backend and the host
// optimizer; nvcc may still contract multiply-adds, so agreement is to fp32 rounding.
// One kernel for both (one name in the cost model and the profile): u set means LAMB (store the
// direction, p only read), u NULL means AdamW (update p).
__global__ void adam_kernel(float *p, __nv_bfloat16 *pb, const float *grad, float *m, float *v, float *u, size_t n, float b1,
                            float b2, float eps, float wd, float bc1, float bc2, float step_size, float decay,
                            float bc2_sqrt, float grad_scale) {
    GRID_STRIDE(i, n) {
        float mi = m[i], vi = v[i];
        optim_moments(&mi, &vi, grad_scale * grad[i], b1, b2);
        m[i] = mi;
        v[i] = vi;
        if (u) u[i] = lamb_direction_of(p[i], mi, vi, bc1, bc2, eps, wd);
        else store_dual(p, pb, i, adamw_param(p[i], mi, vi, step_size, decay, bc2_sqrt, eps));
    }
}
static void cuda_adamw_update(Backend *be, float *p, const float *grad, float *m, float *v, size_t n, float b1,
                              float b2, float eps, float step_size, float decay, float bc2_sqrt, float grad_scale) {
    double t0 = cuda_prof_begin(be);
    cuda_colsum_flush(be);  // the optimizer reads the gradients
    // The weights' bf16 copy (matmul operands) is refreshed here as p is stored: no rounding pass.
    __nv_bfloat16 *pb = cuda_fp32_copy_out(be, p, n);
    cuda_fp32_wrote(be, m, n * sizeof(float));
    cuda_fp32_wrote(be, v, n * sizeof(float));
    if (n) MHE_LAUNCH(adam_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(mhe_cost(ADAM_FLOPS * n, 28.0 * n), pb, n))(p, pb, grad, m, v, nullptr, n, b1, b2, eps, 0.0f, 1.0f, 1.0f, step_size, decay, bc2_sqrt, grad_scale);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}
static void cuda_lamb_direction(Backend *be, const float *p, const float *grad, float *m, float *v,
                                float *u, size_t n, float b1, float b2, float eps, float wd,
                                float bc1, float bc2, float grad_scale) {
    double t0 = cuda_prof_begin(be);
    cuda_colsum_flush(be);  // the optimizer reads the gradients
    // p is only read when u is set.
    cuda_fp32_wrote(be, m, n * sizeof(float));
    cuda_fp32_wrote(be, v, n * sizeof(float));
    cuda_fp32_wrote(be, u, n * sizeof(float));
    if (n) MHE_LAUNCH(adam_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(ADAM_FLOPS * n, 28.0 * n))(const_cast<float *>(p), nullptr, grad, m, v, u, n, b1, b2, eps, wd, bc1, bc2, 0.0f, 1.0f, 1.0f, grad_scale);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

void cuda_install_optim(Backend *be) {
    be->adamw_update = cuda_adamw_update;
    be->lamb_direction = cuda_lamb_direction;
    be->adamw_update_ranges = cuda_adamw_update_ranges;
    be->lamb_direction_ranges = cuda_lamb_direction_ranges;
    be->axpy_ranges = cuda_axpy_ranges;
}
