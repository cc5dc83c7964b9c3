// AdamW over every tensor of a model in one launch (ops.h adamw_update_ranges) instead of one
// adam_kernel per tensor (~200 for BERT-base, each paying the launch overhead on small biases
// and LayerNorm vectors).
//
// The launch's element space is the concatenation of the ranges; a device table holds, per
// range, where it starts in p and where it starts in that space (plus its weight-decay flag and
// the weights' bf16 twin), and each thread finds its range by binary search over the table (a
// few hundred entries, read from cache).  The table changes only when the ranges or the twins
// do, so steady-state steps upload nothing.  Element math: kernels/optim_math.h, as adam_kernel.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/optim_math.h"

struct AdamRange {
    size_t start;         // first element in p / grad
    size_t first;         // its index in the launch's element space (sum of the earlier lengths)
    __nv_bfloat16 *twin;  // bf16 twin of p[start ..] (cuda_mirror.cu); nullptr: none
    int decays;           // 1: multiply p by `decay`
    int unused;           // keeps the struct free of padding (tables are compared bytewise)
};

struct AdamTable {
    std::vector<AdamRange> host;  // the device copy's contents
    AdamRange *dev = nullptr;
    size_t cap = 0;               // entries allocated at dev
};

__global__ void adam_ranges_kernel(const AdamRange *__restrict__ r, int count, size_t total, float *p,
                                   const float *grad, float *m, float *v, size_t m_base, float b1, float b2,
                                   float eps, float step_size, float decay, float bc2_sqrt, float grad_scale) {
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < total; e += (size_t)blockDim.x * gridDim.x) {
        int lo = 0, hi = count - 1;  // the last range whose first <= e
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (r[mid].first <= e) lo = mid;
            else hi = mid - 1;
        }
        const size_t k = e - r[lo].first, i = r[lo].start + k, j = i - m_base;
        float mi = m[j], vi = v[j];
        optim_moments(&mi, &vi, grad_scale * grad[i], b1, b2);
        m[j] = mi;
        v[j] = vi;
        const float np = adamw_param(p[i], mi, vi, step_size, r[lo].decays ? decay : 1.0f, bc2_sqrt, eps);
        p[i] = np;
        if (r[lo].twin) r[lo].twin[k] = __float2bfloat16(np);
    }
}

static void cuda_adamw_update_ranges(Backend *be, float *p, const float *grad, float *m, float *v, size_t m_base,
                                     int count, const size_t *start, const size_t *len, const unsigned char *decays,
                                     float b1, float b2, float eps, float step_size, float decay, float bc2_sqrt,
                                     float grad_scale) {
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    if (!c->adam) c->adam = new AdamTable();
    AdamTable &tab = *c->adam;
    std::vector<AdamRange> want;
    size_t total = 0;
    double twinned = 0;
    for (int q = 0; q < count; q++) {
        if (!len[q]) continue;
        AdamRange r{};
        r.start = start[q];
        r.first = total;
        // The weights' twins are refreshed here, once per optimizer step (as adamw_update).
        r.twin = cuda_mirror_out(be, p + start[q], len[q]);
        r.decays = decays[q] != 0;
        cuda_mirror_wrote(be, m + (start[q] - m_base), len[q] * sizeof(float));
        cuda_mirror_wrote(be, v + (start[q] - m_base), len[q] * sizeof(float));
        want.push_back(r);
        total += len[q];
        if (r.twin) twinned += (double)len[q];
    }
    const size_t bytes = want.size() * sizeof(AdamRange);
    if (want.size() != tab.host.size() || std::memcmp(want.data(), tab.host.data(), bytes) != 0) {
        if (want.size() > tab.cap) {
            CUDA_CHECK(cudaStreamSynchronize(c->stream));
            cuda_device_free(tab.dev);
            tab.dev = static_cast<AdamRange *>(cuda_device_alloc(bytes, c->device));
            tab.cap = want.size();
        }
        be->upload(be, tab.dev, want.data(), bytes);
        tab.host = want;
    }
    // The table is read once (the binary searches hit cache), the elements as adam_kernel's,
    // 2 B per twinned element.
    const MheCost cost = mhe_cost(ADAM_FLOPS * (double)total, 28.0 * (double)total + (double)bytes + 2.0 * twinned);
    if (total)
        MHE_LAUNCH(adam_ranges_kernel, cuda_grid_for(total), MHE_BLOCK, 0, c->stream, cost)(
            tab.dev, (int)want.size(), total, p, grad, m, v, m_base, b1, b2, eps, step_size, decay, bc2_sqrt,
            grad_scale);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

void cuda_optim_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->adam) return;
    cuda_device_free(c->adam->dev);
    delete c->adam;
    c->adam = nullptr;
}

void cuda_install_optim(Backend *be) { be->adamw_update_ranges = cuda_adamw_update_ranges; }
