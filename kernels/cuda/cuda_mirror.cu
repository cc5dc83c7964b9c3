// bf16 twins of fp32 buffers (bf16 mode): the matmul operands without a rounding pass.
//
// ops.h passes fp32 buffers, so in bf16 mode every matmul operand needs a bf16 copy.  Instead of
// rounding each operand into a scratch buffer before every GEMM (a 4-byte read + 2-byte write per
// element per use), the backend keeps a persistent bf16 twin of each range a matmul has read
// ("segment"), and the ops that WRITE such a range store the bf16 value next to the fp32 one
// (2 more bytes per element, no extra launch): LayerNorm, GELU, dropout, bias, the attention
// outputs, the loss gradient, AdamW (the weights' copies, refreshed once per optimizer step).
//
// Correctness rests on the host-side bookkeeping here, not on the kernels: each segment keeps the
// set of float offsets whose twin equals bf16(fp32).  An op that dual-stores marks its output
// valid (cuda_mirror_out); every other write invalidates what it covers (cuda_mirror_wrote, also
// called by the cuBLAS, memset and copy wrappers).  A matmul takes the twin only when its whole
// operand span is valid, otherwise rounds into the twin first (cuda_mirror_operand) — so an op
// that does not dual-store costs a rounding pass, never a wrong result.  The emulated build
// checks every twin it hands to cuBLAS against the fp32 data (a missed invalidation aborts).
//
// MirrorSegments are created the first time a matmul reads a range (the first step; steady-state steps
// allocate nothing), merged when ranges overlap, and dropped with their allocation.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <map>
#include <vector>

#include "kernels/cuda/cuda_internal.h"

struct MirrorSegment {
    const float *base = nullptr;
    size_t n = 0;                   // floats
    __nv_bfloat16 *twin = nullptr;  // n bf16 values
    std::map<size_t, size_t> valid; // disjoint [start, end) float offsets whose twin is current
};

// Interval-set helpers over MirrorSegment::valid.
static void erase_range(std::map<size_t, size_t> &v, size_t lo, size_t hi) {
    if (lo >= hi || v.empty()) return;
    auto it = v.upper_bound(lo);
    if (it != v.begin()) --it;
    std::vector<std::pair<size_t, size_t>> keep;
    while (it != v.end() && it->first < hi) {
        size_t s = it->first, e = it->second;
        if (e <= lo) {
            ++it;
            continue;
        }
        it = v.erase(it);
        if (s < lo) keep.emplace_back(s, lo);
        if (e > hi) keep.emplace_back(hi, e);
    }
    for (auto &k : keep) v[k.first] = k.second;
}
static void insert_range(std::map<size_t, size_t> &v, size_t lo, size_t hi) {
    if (lo >= hi) return;
    auto it = v.upper_bound(lo);
    if (it != v.begin() && std::prev(it)->second >= lo) --it;
    while (it != v.end() && it->first <= hi) {
        lo = std::min(lo, it->first);
        hi = std::max(hi, it->second);
        it = v.erase(it);
    }
    v[lo] = hi;
}
static bool covers(const std::map<size_t, size_t> &v, size_t lo, size_t hi) {
    if (lo >= hi) return true;
    auto it = v.upper_bound(lo);
    if (it == v.begin()) return false;
    --it;
    return it->first <= lo && it->second >= hi;
}

struct MirrorSet {
    std::map<uintptr_t, MirrorSegment> segs;          // by base address, disjoint
    std::map<uintptr_t, size_t> allocs;         // backend allocations (bytes), to drop segments
    long created = 0;                           // segments ever made (tests: steady state)
};

static MirrorSet *mirrors(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) c->mirrors = new MirrorSet();
    return c->mirrors;
}

static uintptr_t addr(const void *p) { return reinterpret_cast<uintptr_t>(p); }

// Segment [s, e) holds the floats [lo, hi) whole, on its float grid: their twin is a slice of its.
static bool holds(uintptr_t s, uintptr_t e, uintptr_t lo, uintptr_t hi) {
    return s <= lo && hi <= e && (lo - s) % sizeof(float) == 0;
}

// MirrorSegments overlapping the byte range [lo, hi).
template <typename F> static void each_overlap(MirrorSet *m, uintptr_t lo, uintptr_t hi, F f) {
    auto it = m->segs.upper_bound(lo);
    if (it != m->segs.begin()) --it;
    for (; it != m->segs.end() && it->first < hi; ++it) {
        uintptr_t s = it->first, e = s + it->second.n * sizeof(float);
        if (e > lo) f(it->second, s, e);
    }
}

void cuda_mirror_wrote(Backend *be, const void *p, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors || !bytes) return;
    uintptr_t lo = addr(p), hi = lo + bytes;
    each_overlap(c->mirrors, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        size_t a = lo > s ? (lo - s) / sizeof(float) : 0;
        size_t b = hi < e ? (hi - s + sizeof(float) - 1) / sizeof(float) : g.n;
        erase_range(g.valid, a, b);
    });
}

void cuda_mirror_wrote_alloc(Backend *be, const void *p) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) return;
    MirrorSet *m = c->mirrors;
    auto it = m->allocs.upper_bound(addr(p));
    if (it == m->allocs.begin()) return;
    --it;
    if (addr(p) >= it->first + it->second) return;
    cuda_mirror_wrote(be, reinterpret_cast<const void *>(it->first), it->second);
}

__nv_bfloat16 *cuda_mirror_out(Backend *be, const float *p, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors || !n) return nullptr;
    uintptr_t lo = addr(p), hi = lo + n * sizeof(float);
    MirrorSegment *inside = nullptr;
    each_overlap(c->mirrors, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        if (holds(s, e, lo, hi)) inside = &g;
    });
    if (!inside) {
        cuda_mirror_wrote(be, p, n * sizeof(float));
        return nullptr;
    }
    size_t off = (size_t)(p - inside->base);
    insert_range(inside->valid, off, off + n);
    return inside->twin + off;
}

__nv_bfloat16 *cuda_mirror_out2d(Backend *be, const float *p, size_t rows, size_t cols, size_t ld) {
    if (!rows || !cols) return nullptr;
    if (ld == cols) return cuda_mirror_out(be, p, rows * cols);
    cuda_mirror_wrote(be, p, ((rows - 1) * ld + cols) * sizeof(float));  // strided: no twin
    return nullptr;
}

// The emulated build compares the twin with the data before cuBLAS reads it.
static void verify_twin(const MirrorSegment &g, size_t off, size_t n) {
#if defined(MHE_CUDA_EMU)
    if (mhe_cost_dry_run()) return;
    for (size_t i = off; i < off + n; i++) {
        __nv_bfloat16 want = __float2bfloat16(g.base[i]);
        if (std::memcmp(&want, &g.twin[i], sizeof want) != 0)
            mhe_fatal("cuda_mirror: stale bf16 twin at float %zu of a %zu-float segment (%g vs %g): "
                      "an op wrote the fp32 data without cuda_mirror_out/cuda_mirror_wrote",
                      i, g.n, (double)g.base[i], (double)__bfloat162float(g.twin[i]));
    }
#else
    (void)g;
    (void)off;
    (void)n;
#endif
}

const __nv_bfloat16 *cuda_mirror_operand(Backend *be, const float *p, size_t n) {
    MirrorSet *m = mirrors(be);
    CudaCtx *c = cuda_ctx(be);
    uintptr_t lo = addr(p), hi = lo + n * sizeof(float);
    MirrorSegment *inside = nullptr;
    std::vector<uintptr_t> overlapping;
    each_overlap(m, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        overlapping.push_back(s);
        if (holds(s, e, lo, hi)) inside = &g;
    });
    if (!inside) {
        // A new segment over the union of this span and every segment it overlaps (their
        // validity is dropped: the merged twin is rounded afresh below).
        uintptr_t s = lo, e = hi;
        for (uintptr_t b : overlapping) {
            const MirrorSegment &g = m->segs[b];
            s = std::min(s, b);
            e = std::max(e, b + g.n * sizeof(float));
        }
        if (!overlapping.empty()) CUDA_CHECK(cudaStreamSynchronize(c->stream));  // twins in use
        for (uintptr_t b : overlapping) {
            cuda_device_free(m->segs[b].twin);
            m->segs.erase(b);
        }
        MirrorSegment g;
        g.base = reinterpret_cast<const float *>(s);
        g.n = (e - s) / sizeof(float);
        g.twin = static_cast<__nv_bfloat16 *>(cuda_device_alloc(g.n * sizeof(__nv_bfloat16), c->device));
        inside = &(m->segs[s] = g);
        m->created++;
    }
    size_t off = (size_t)(p - inside->base);
    if (!covers(inside->valid, off, off + n)) {
        cuda_round_bf16(be, p, inside->twin + off, n);
        insert_range(inside->valid, off, off + n);
    } else {
        verify_twin(*inside, off, n);
    }
    return inside->twin + off;
}

void cuda_mirror_track_alloc(Backend *be, const void *p, size_t bytes) {
    if (!cuda_ctx(be)->bf16) return;
    mirrors(be)->allocs[addr(p)] = bytes;
}

void cuda_mirror_release(Backend *be, const void *p) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) return;
    MirrorSet *m = c->mirrors;
    auto a = m->allocs.find(addr(p));
    if (a == m->allocs.end()) return;
    uintptr_t lo = a->first, hi = lo + a->second;
    m->allocs.erase(a);
    std::vector<uintptr_t> gone;
    each_overlap(m, lo, hi, [&](MirrorSegment &, uintptr_t s, uintptr_t) { gone.push_back(s); });
    for (uintptr_t s : gone) {
        cuda_device_free(m->segs[s].twin);
        m->segs.erase(s);
    }
}

void cuda_mirror_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) return;
    for (auto &kv : c->mirrors->segs) cuda_device_free(kv.second.twin);
    delete c->mirrors;
    c->mirrors = nullptr;
}

extern "C" long backend_cuda_mirror_segments(Backend *be, size_t *bytes) {
    CudaCtx *c = cuda_ctx(be);
    size_t total = 0;
    long count = 0;
    if (c->mirrors)
        for (auto &kv : c->mirrors->segs) {
            total += kv.second.n * sizeof(__nv_bfloat16);
            count++;
        }
    if (bytes) *bytes = total;
    return count;
}
