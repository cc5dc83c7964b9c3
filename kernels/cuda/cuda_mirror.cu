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
//
// Lean twins (bf16 activations between ops, without changing ops.h): many activations are read
// ONLY as matmul operands — the FFN's GELU output and its gradient, Q/K/V for the tensor-core
// flash kernels, the dropped-out branch gradients — so their fp32 copy is written and never read.
// The backend learns this per segment: every op's fp32 reads are declared (cuda_mirror_read, by
// the op wrappers of cuda_lean.cu, from ops.h's contract), and an op able to skip its fp32 store
// asks cuda_mirror_out_lean.  A segment that lean-capable ops wrote and nothing read in fp32 over
// one optimizer step (cuda_mirror_epoch) turns LEAN: from then on those ops store only the twin
// and mark the fp32 range stale.  A later fp32 read of a stale range widens the twin back
// (from_bf16_kernel) and pins the segment dual for good — a wrong guess costs a pass, never a
// value.  The values are the ones the dual store had (the twin IS bf16(value)); only a widened
// read sees the rounded value.  The emulated build fills stale fp32 ranges with NaN, so a read
// that was not declared shows up in every bf16 test.  MHE_CUDA_LEAN=0 turns it off.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <iterator>
#include <map>
#include <vector>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

// bf16 activations (cuda_act.cu): an activation's data is bf16 storage — what a lean twin is — so
// the lookups of the lean-capable ops name the buffer itself (cuda_internal.h) and those ops read
// and store bf16 natively; the dual lookups find nothing (no twin: fp32 memory stays fp32), and every fp32 write marks
// the bf16 copy of its allocation stale (cuda_act.cu's copies of the matmuls' fp32 operands).
static bool act_mode(Backend *be) { return cuda_ctx(be)->act_bf16; }
static __nv_bfloat16 *as_bf16(const float *p) { return reinterpret_cast<__nv_bfloat16 *>(const_cast<float *>(p)); }

// A writer site's use of a segment's fp32 data (lean twins, below).
enum { SEG_DUAL, SEG_LEAN, SEG_PINNED };

// What one kind of lean-capable writer (LeanSite) has learnt about one segment: the same memory
// may hold values of several producers in turn (a GEMM's output that GELU's backward reads in
// fp32 and then overwrites in place with values only a matmul reads), each judged on its own.
struct LeanChannel {
    std::map<size_t, size_t> leanish; // offsets whose current values this site wrote (fp32 too)
    int mode = SEG_DUAL;
    bool lean_wrote = false;          // since the last epoch: this site wrote here
    bool fp32_read = false;           // since the last epoch: an op read fp32 values of `leanish`
};

// A strided store with its twin (rows x cols at row stride ld > cols: dQ, dK, dV as column slices
// of one [N, qc+kc+vc] buffer when the projections are fused).  Its elements are no float range,
// so the interval sets cannot hold it; it waits here until bands of the same rows and stride tile
// whole rows (the three slices of one backward), when their union is the one range
// [off, off + rows*ld) and enters the sets (complete_bands).  Anything else touching the segment
// first settles pending bands conservatively (settle_bands: stale ones widened, none marked valid).
struct Band {
    size_t off, rows, cols, ld;
    bool stale;  // lean: only the twin holds the values
    int site;    // LeanSite of the writer, -1: not a lean-capable one
};

struct MirrorSegment {
    const float *base = nullptr;
    size_t n = 0;                   // floats
    __nv_bfloat16 *twin = nullptr;  // n bf16 values
    std::map<size_t, size_t> valid; // disjoint [start, end) float offsets whose twin is current
    std::map<size_t, size_t> stale; // offsets whose fp32 data is NOT current (the twin holds the value)
    LeanChannel site[LEAN_SITES];
    std::vector<Band> bands;        // strided stores not yet in valid/stale (Band)
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
// Any write of [a, b): no site's values live there any more.
static void forget_sites(MirrorSegment &g, size_t a, size_t b) {
    for (auto &ch : g.site) erase_range(ch.leanish, a, b);
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

// Intersections of an interval set with [lo, hi).
static std::vector<std::pair<size_t, size_t>> within(const std::map<size_t, size_t> &v, size_t lo, size_t hi) {
    std::vector<std::pair<size_t, size_t>> out;
    if (lo >= hi || v.empty()) return out;
    auto it = v.upper_bound(lo);
    if (it != v.begin()) --it;
    for (; it != v.end() && it->first < hi; ++it) {
        size_t a = std::max(it->first, lo), b = std::min(it->second, hi);
        if (a < b) out.emplace_back(a, b);
    }
    return out;
}

__global__ void from_bf16_kernel(const __nv_bfloat16 *__restrict__ x, float *__restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)blockDim.x * gridDim.x)
        y[i] = __bfloat162float(x[i]);
}
// The same over rows x cols at row stride ld (a stale Band).
__global__ void from_bf16_2d_kernel(const __nv_bfloat16 *__restrict__ x, float *__restrict__ y, size_t rows,
                                    size_t cols, size_t ld) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols; i += (size_t)blockDim.x * gridDim.x) {
        const size_t e = i / cols * ld + i % cols;
        y[e] = __bfloat162float(x[e]);
    }
}

struct MirrorSet {
    std::map<uintptr_t, MirrorSegment> segs;          // by base address, disjoint
    std::vector<std::pair<float *, size_t>> poison;   // emulation: stale fp32 ranges to fill with NaN
    std::map<uintptr_t, size_t> allocs;         // backend allocations (bytes), to drop segments
    std::map<size_t, size_t> zeros;             // byte ranges a memset cleared, unwritten since
    long created = 0;                           // segments ever made (tests: steady state)
};

static MirrorSet *mirrors(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) c->mirrors = new MirrorSet();
    return c->mirrors;
}

static uintptr_t addr(const void *p) { return reinterpret_cast<uintptr_t>(p); }

// The fp32 data of g's stale offsets within [a, b) made current from the twin; the segment is
// then pinned dual (something reads its fp32 data after all).
static void settle(MirrorSet *m);
static void widen_stale(Backend *be, MirrorSegment &g, size_t a, size_t b) {
    settle(cuda_ctx(be)->mirrors);  // a pending fill must not land on the widened values
    auto parts = within(g.stale, a, b);
    for (auto &q : parts) {
        size_t n = q.second - q.first;
        MHE_LAUNCH(from_bf16_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(g.twin + q.first, const_cast<float *>(g.base) + q.first, n);
        CUDA_CHECK_LAUNCH();
    }
    if (!parts.empty()) {
        erase_range(g.stale, a, b);
        for (auto &ch : g.site)  // which site's values they were is not kept: every lean one
            if (ch.mode == SEG_LEAN) ch.mode = SEG_PINNED;
    }
}

// Emulated build: a stale fp32 range holds NaN, so an undeclared read poisons the results.  The
// fill waits for the next declaration (settle): the op going lean may still read its input in
// place (gelu_backward's dx = dy), and the emulation runs it as soon as it is launched.
static void poison_later(MirrorSet *m, MirrorSegment &g, size_t a, size_t b) {
#if defined(MHE_CUDA_EMU)
    if (!mhe_cost_dry_run()) m->poison.emplace_back(const_cast<float *>(g.base) + a, b - a);
#else
    (void)m;
    (void)g;
    (void)a;
    (void)b;
#endif
}
static void settle(MirrorSet *m) {
    for (auto &q : m->poison)
        for (size_t i = 0; i < q.second; i++) q.first[i] = std::numeric_limits<float>::quiet_NaN();
    m->poison.clear();
}

// A write of [p, p + bytes): no longer known to hold zeros (cuda_mirror_known_zero).
static void forget_zeros(MirrorSet *m, const void *p, size_t bytes) { erase_range(m->zeros, addr(p), addr(p) + bytes); }

// Pending bands of g given up: stale ones widened back (their lean channel pinned, as
// widen_stale does); their twins stay current but are not claimed valid (a later operand read
// rounds again: a pass, never a value).
static void settle_bands(Backend *be, MirrorSegment &g) {
    if (g.bands.empty()) return;
    settle(cuda_ctx(be)->mirrors);  // a pending fill must not land on the widened values
    for (const Band &b : g.bands) {
        if (!b.stale) continue;
        const size_t n = b.rows * b.cols;
        MHE_LAUNCH(from_bf16_2d_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 6.0 * n))(g.twin + b.off, const_cast<float *>(g.base) + b.off, b.rows, b.cols, b.ld);
        CUDA_CHECK_LAUNCH();
        if (b.site >= 0 && g.site[b.site].mode == SEG_LEAN) g.site[b.site].mode = SEG_PINNED;
    }
    g.bands.clear();
}

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

// Segments overlapping the bytes [p, p + bytes), each with the float offsets [a, b) covering them.
template <typename F> static void each_span(MirrorSet *m, const void *p, size_t bytes, F f) {
    const uintptr_t lo = addr(p), hi = lo + bytes;
    each_overlap(m, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        size_t a = lo > s ? (lo - s) / sizeof(float) : 0;
        size_t b = hi < e ? (hi - s + sizeof(float) - 1) / sizeof(float) : g.n;
        f(g, a, b);
    });
}

void cuda_mirror_wrote(Backend *be, const void *p, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    cuda_colsum_touch(be, p, bytes);  // a waiting column sum into [p, p + bytes) goes first
    if (act_mode(be) && bytes) cuda_act_wrote(be, p);  // bf16 activations: fp32 data changed
    if (!c->mirrors || !bytes) return;
    forget_zeros(c->mirrors, p, bytes);
    each_span(c->mirrors, p, bytes, [&](MirrorSegment &g, size_t a, size_t b) {
        settle_bands(be, g);
        // The write may cover only part of [a, b) (a scatter, a strided store): values that
        // live only in the twin are brought back before the twin is given up.
        if (!g.stale.empty()) widen_stale(be, g, a, b);
        erase_range(g.valid, a, b);
        forget_sites(g, a, b);
    });
}

void cuda_mirror_overwrote(Backend *be, const void *p, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (act_mode(be) && bytes) cuda_act_wrote(be, p);
    if (!c->mirrors || !bytes) return;
    uintptr_t lo = addr(p), hi = lo + bytes;
    settle(c->mirrors);
    each_overlap(c->mirrors, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        settle_bands(be, g);
        // Offsets wholly inside [lo, hi) get new fp32 values: their stale marks simply go.
        size_t a = lo > s ? (lo - s + sizeof(float) - 1) / sizeof(float) : 0;
        size_t b = hi < e ? (hi - s) / sizeof(float) : g.n;
        if (a < b) erase_range(g.stale, a, b);
    });
    cuda_mirror_wrote(be, p, bytes);
}

// An fp32 read of [p, p + bytes): stale parts widened first; `counts`: it tells the lean-capable
// writers whose values it reads that their fp32 copy is wanted.
static void declare_read(Backend *be, const void *p, size_t bytes, bool counts) {
    CudaCtx *c = cuda_ctx(be);
    cuda_colsum_touch(be, p, bytes);
    if (!c->mirrors || !bytes) return;
    settle(c->mirrors);
    each_span(c->mirrors, p, bytes, [&](MirrorSegment &g, size_t a, size_t b) {
        settle_bands(be, g);
        // Only reads of what lean-capable ops wrote count against going lean (an op reading a
        // cuBLAS output in place, then overwriting it lean-capably, does not).
        if (counts)
            for (auto &ch : g.site)
                if (!within(ch.leanish, a, b).empty()) ch.fp32_read = true;
        if (!g.stale.empty()) widen_stale(be, g, a, b);
    });
}

void cuda_mirror_read(Backend *be, const void *p, size_t bytes) { declare_read(be, p, bytes, true); }

// Known zeros: every write reports itself above (the twins' correctness rests on it already), so
// a range a memset cleared and no write has touched since still holds zeros.  An accumulating
// op whose target is known zero may store instead of add (linear_backward's bias gradient: no
// add kernel).  The emulated build checks the memory before saying so.
void cuda_mirror_zeroed(Backend *be, const void *p, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (c->mirrors && bytes) insert_range(c->mirrors->zeros, addr(p), addr(p) + bytes);
}

bool cuda_mirror_known_zero(Backend *be, const void *p, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors || !p || !bytes || !covers(c->mirrors->zeros, addr(p), addr(p) + bytes)) return false;
#if defined(MHE_CUDA_EMU)
    if (!mhe_cost_dry_run()) {
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        const unsigned char *b = static_cast<const unsigned char *>(p);
        for (size_t i = 0; i < bytes; i++)
            if (b[i]) mhe_fatal("cuda_mirror: byte %zu of a %zu-byte range said to be zero is not: an op wrote it "
                                "without cuda_mirror_out/cuda_mirror_wrote", i, bytes);
    }
#endif
    return true;
}

// The allocation holding p, as [base, base + bytes); false when p is not the backend's.
static bool alloc_of(Backend *be, const void *p, uintptr_t *base, size_t *bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) return false;
    auto it = c->mirrors->allocs.upper_bound(addr(p));
    if (it == c->mirrors->allocs.begin()) return false;
    --it;
    if (addr(p) >= it->first + it->second) return false;
    *base = it->first;
    *bytes = it->second;
    return true;
}

void cuda_mirror_wrote_alloc(Backend *be, const void *p) {
    if (act_mode(be)) cuda_act_wrote(be, p);
    uintptr_t base;
    size_t bytes;
    if (alloc_of(be, p, &base, &bytes)) cuda_mirror_wrote(be, reinterpret_cast<const void *>(base), bytes);
}

void cuda_mirror_read_alloc(Backend *be, const void *p) {
    uintptr_t base;
    size_t bytes;
    if (alloc_of(be, p, &base, &bytes)) cuda_mirror_read(be, reinterpret_cast<const void *>(base), bytes);
}

void cuda_mirror_epoch(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors) return;
    for (auto &kv : c->mirrors->segs) {
        MirrorSegment &g = kv.second;
        for (auto &ch : g.site) {
            if (c->lean && ch.mode == SEG_DUAL && ch.lean_wrote && !ch.fp32_read) ch.mode = SEG_LEAN;
            ch.lean_wrote = ch.fp32_read = false;
        }
    }
}

// The segment holding [p, p + n) whole, nullptr when none.
static MirrorSegment *holder(Backend *be, const float *p, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->mirrors || !n) return nullptr;
    uintptr_t lo = addr(p), hi = lo + n * sizeof(float);
    MirrorSegment *inside = nullptr;
    each_overlap(c->mirrors, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        if (holds(s, e, lo, hi)) inside = &g;
    });
    return inside;
}
// holder(), its pending bands settled: for every user but the band writers.
static MirrorSegment *holder_settled(Backend *be, const float *p, size_t n) {
    MirrorSegment *g = holder(be, p, n);
    if (g) settle_bands(be, *g);
    return g;
}

__nv_bfloat16 *cuda_mirror_out(Backend *be, const float *p, size_t n) {
    // bf16 activations: an fp32 update in place (the optimizer's) keeps a current copy current.
    if (act_mode(be)) return n ? cuda_act_store_copy(be, p) : nullptr;
    if (!cuda_ctx(be)->mirrors || !n) return nullptr;
    forget_zeros(cuda_ctx(be)->mirrors, p, n * sizeof(float));
    MirrorSegment *inside = holder_settled(be, p, n);
    if (!inside) {
        cuda_mirror_wrote(be, p, n * sizeof(float));
        return nullptr;
    }
    size_t off = (size_t)(p - inside->base);
    insert_range(inside->valid, off, off + n);
    erase_range(inside->stale, off, off + n);
    forget_sites(*inside, off, off + n);
    return inside->twin + off;
}

__nv_bfloat16 *cuda_mirror_peek_lean(Backend *be, const float *p, size_t n, LeanSite site) {
    if (act_mode(be)) return as_bf16(p);
    MirrorSegment *g = holder_settled(be, p, n);
    return g && g->site[site].mode == SEG_LEAN ? g->twin + (p - g->base) : nullptr;
}

const __nv_bfloat16 *cuda_mirror_stale_twin(Backend *be, const float *p, size_t n) {
    if (act_mode(be)) return as_bf16(p);
    MirrorSegment *g = holder_settled(be, p, n);
    if (!g) return nullptr;
    const size_t off = (size_t)(p - g->base);
    return covers(g->stale, off, off + n) ? g->twin + off : nullptr;
}

void cuda_mirror_read_or_twin(Backend *be, const float *p, size_t n) {
    if (n && !cuda_mirror_stale_twin(be, p, n)) declare_read(be, p, n * sizeof(float), false);
}

void cuda_mirror_accumulated_twin(Backend *be, const float *p, size_t n) {
    if (cuda_ctx(be)->mirrors) forget_zeros(cuda_ctx(be)->mirrors, p, n * sizeof(float));
}

void cuda_mirror_note_lean(Backend *be, const float *p, size_t n, LeanSite site) {
    MirrorSegment *g = holder_settled(be, p, n);
    if (!g) return;
    const size_t off = (size_t)(p - g->base);
    forget_sites(*g, off, off + n);
    LeanChannel &ch = g->site[site];
    if (ch.mode != SEG_DUAL) return;
    ch.lean_wrote = true;
    insert_range(ch.leanish, off, off + n);
}

__nv_bfloat16 *cuda_mirror_out_lean(Backend *be, float *p, size_t n, float **fp32, LeanSite site) {
    *fp32 = act_mode(be) ? nullptr : p;
    if (act_mode(be)) return as_bf16(p);
    if (!cuda_ctx(be)->mirrors || !n) return nullptr;
    forget_zeros(cuda_ctx(be)->mirrors, p, n * sizeof(float));
    MirrorSegment *inside = holder_settled(be, p, n);
    if (!inside) {
        cuda_mirror_wrote(be, p, n * sizeof(float));
        return nullptr;
    }
    size_t off = (size_t)(p - inside->base);
    insert_range(inside->valid, off, off + n);
    forget_sites(*inside, off, off + n);
    LeanChannel &ch = inside->site[site];
    if (ch.mode == SEG_LEAN) {
        insert_range(inside->stale, off, off + n);
        poison_later(cuda_ctx(be)->mirrors, *inside, off, off + n);
        *fp32 = nullptr;
    } else {
        erase_range(inside->stale, off, off + n);
        if (ch.mode == SEG_DUAL) {
            ch.lean_wrote = true;
            insert_range(ch.leanish, off, off + n);
        }
    }
    return inside->twin + off;
}

// Whether band b and the store (off, rows, cols, ld) may share an element: spans apart, or
// column slices of the same stride that do not overlap, do not.
static bool bands_meet(const Band &b, size_t off, size_t rows, size_t cols, size_t ld) {
    const size_t e1 = b.off + (b.rows - 1) * b.ld + b.cols, e2 = off + (rows - 1) * ld + cols;
    if (e1 <= off || e2 <= b.off) return false;
    if (b.ld != ld || b.off % ld + b.cols > ld || off % ld + cols > ld) return true;
    const size_t c1 = b.off % ld, c2 = off % ld;
    return c1 < c2 + cols && c2 < c1 + b.cols;
}

// Bands of the newest one's rows and stride whose columns tile whole rows (offsets o, o + c1,
// ... adding up to ld) become the range [o, o + rows*ld) of the interval sets, as one contiguous
// store of their kind (cuda_mirror_out_lean) would have made it.
static void complete_bands(Backend *be, MirrorSegment &g) {
    const Band last = g.bands.back();
    std::vector<Band> same, rest;
    for (const Band &b : g.bands) (b.rows == last.rows && b.ld == last.ld ? same : rest).push_back(b);
    std::sort(same.begin(), same.end(), [](const Band &x, const Band &y) { return x.off < y.off; });
    size_t start = 0, cols = 0;
    for (size_t i = 0; i < same.size(); i++) {
        if (i == start || same[i].off != same[i - 1].off + same[i - 1].cols) start = i, cols = 0;
        cols += same[i].cols;
        if (cols != last.ld) continue;
        std::vector<Band> run(same.begin() + start, same.begin() + i + 1);
        for (size_t j = 0; j < same.size(); j++)
            if (j < start || j > i) rest.push_back(same[j]);
        g.bands = run;
        bool all_stale = true, any_stale = false;
        for (const Band &b : run) all_stale = all_stale && b.stale, any_stale = any_stale || b.stale;
        if (any_stale && !all_stale) settle_bands(be, g);  // mixed: the stale ones widened
        g.bands = rest;
        const size_t lo = run.front().off, hi = lo + last.rows * last.ld;
        insert_range(g.valid, lo, hi);
        forget_sites(g, lo, hi);
        if (all_stale) insert_range(g.stale, lo, hi);
        else erase_range(g.stale, lo, hi);
        for (const Band &b : run) {
            if (b.site < 0) continue;
            LeanChannel &ch = g.site[b.site];
            if (ch.mode != SEG_DUAL) continue;
            ch.lean_wrote = true;
            insert_range(ch.leanish, lo, hi);
        }
        return;
    }
}

// A strided store (ld > cols) of the writer `site` (-1: not lean-capable) into a segment: a Band.
static __nv_bfloat16 *band_out(Backend *be, float *p, size_t rows, size_t cols, size_t ld, float **fp32, int site) {
    *fp32 = p;
    const size_t n = (rows - 1) * ld + cols;
    MirrorSegment *g = cuda_ctx(be)->mirrors ? holder(be, p, n) : nullptr;
    if (g) forget_zeros(cuda_ctx(be)->mirrors, p, n * sizeof(float));  // conservatively the span
    if (!g) {
        cuda_mirror_wrote(be, p, n * sizeof(float));  // no twin
        return nullptr;
    }
    const size_t off = (size_t)(p - g->base);
    for (const Band &b : g->bands)
        if (bands_meet(b, off, rows, cols, ld)) {  // an earlier store of these elements never completed
            settle_bands(be, *g);
            break;
        }
    const bool stale = site >= 0 && g->site[site].mode == SEG_LEAN;
    // A dual store makes the fp32 data current: old stale marks over it would later widen the
    // rounded twin over it.  (A lean store leaves them true.)
    if (!stale && !within(g->stale, off, off + n).empty()) widen_stale(be, *g, off, off + n);
    if (stale) {
        *fp32 = nullptr;
        for (size_t r = 0; r < rows; r++) poison_later(cuda_ctx(be)->mirrors, *g, off + r * ld, off + r * ld + cols);
    }
    g->bands.push_back(Band{off, rows, cols, ld, stale, site});
    complete_bands(be, *g);
    return g->twin + off;
}

__nv_bfloat16 *cuda_mirror_out2d_lean(Backend *be, float *p, size_t rows, size_t cols, size_t ld, float **fp32,
                                      LeanSite site) {
    *fp32 = act_mode(be) ? nullptr : p;
    if (act_mode(be)) return as_bf16(p);
    if (!rows || !cols) return nullptr;
    if (ld == cols) return cuda_mirror_out_lean(be, p, rows * cols, fp32, site);
    return band_out(be, p, rows, cols, ld, fp32, (int)site);
}

__nv_bfloat16 *cuda_mirror_out2d(Backend *be, const float *p, size_t rows, size_t cols, size_t ld) {
    if (!rows || !cols) return nullptr;
    if (act_mode(be)) {
        cuda_act_wrote(be, p);
        return nullptr;
    }
    if (ld == cols) return cuda_mirror_out(be, p, rows * cols);
    float *unused;
    return band_out(be, const_cast<float *>(p), rows, cols, ld, &unused, -1);
}

// The emulated build compares the twin with the data before cuBLAS reads it.
static void verify_twin(const MirrorSegment &g, size_t off, size_t n) {
#if defined(MHE_CUDA_EMU)
    if (mhe_cost_dry_run()) return;
    auto stale = within(g.stale, off, off + n);
    size_t k = 0;
    for (size_t i = off; i < off + n; i++) {
        while (k < stale.size() && stale[k].second <= i) k++;
        if (k < stale.size() && stale[k].first <= i) continue;  // the twin is the value
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

// The segment holding [p, p + n), made (merged over every segment it overlaps) when there is none.
static MirrorSegment *segment_for(Backend *be, const float *p, size_t n) {
    MirrorSet *m = mirrors(be);
    CudaCtx *c = cuda_ctx(be);
    uintptr_t lo = addr(p), hi = lo + n * sizeof(float);
    MirrorSegment *inside = nullptr;
    std::vector<uintptr_t> overlapping;
    each_overlap(m, lo, hi, [&](MirrorSegment &g, uintptr_t s, uintptr_t e) {
        settle_bands(be, g);  // a band's fp32 data current before a rounding or a merge reads it
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
        for (uintptr_t b : overlapping) {  // values held only by the old twins come back first
            MirrorSegment &g = m->segs[b];
            if (!g.stale.empty()) widen_stale(be, g, 0, g.n);
        }
        if (!overlapping.empty()) cuda_stream_sync(be, "bf16 twin merge");  // twins in use
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
    return inside;
}

void cuda_mirror_track(Backend *be, const float *p, size_t n) {
    if (cuda_ctx(be)->bf16 && n) segment_for(be, p, n);
}

const __nv_bfloat16 *cuda_mirror_operand(Backend *be, const float *p, size_t n) {
    if (act_mode(be)) return as_bf16(p);
    MirrorSegment *inside = segment_for(be, p, n);
    size_t off = (size_t)(p - inside->base);
    if (!covers(inside->valid, off, off + n)) {
        // Only the parts not yet current: strided operands (K, V as column slices of one fused
        // buffer) have spans that overlap almost whole, so the second is mostly rounded already.
        size_t at = off;
        for (auto &q : within(inside->valid, off, off + n)) {
            if (q.first > at) cuda_round_bf16(be, inside->base + at, inside->twin + at, q.first - at);
            at = q.second;
        }
        if (at < off + n) cuda_round_bf16(be, inside->base + at, inside->twin + at, off + n - at);
        insert_range(inside->valid, off, off + n);
    } else {
        verify_twin(*inside, off, n);
    }
    return inside->twin + off;
}

void cuda_mirror_track_alloc(Backend *be, const void *p, size_t bytes) {
    if (act_mode(be)) cuda_act_track_alloc(be, p, bytes);
    if (!cuda_ctx(be)->bf16) return;
    mirrors(be)->allocs[addr(p)] = bytes;
}

void cuda_mirror_release(Backend *be, const void *p) {
    CudaCtx *c = cuda_ctx(be);
    if (act_mode(be)) cuda_act_release(be, p);
    if (!c->mirrors) return;
    MirrorSet *m = c->mirrors;
    auto a = m->allocs.find(addr(p));
    if (a == m->allocs.end()) return;
    settle(m);  // pending fills land while the memory is still there
    uintptr_t lo = a->first, hi = lo + a->second;
    m->allocs.erase(a);
    forget_zeros(m, reinterpret_cast<const void *>(lo), hi - lo);
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

extern "C" long backend_cuda_mirror_lean(Backend *be, size_t *stale_floats) {
    CudaCtx *c = cuda_ctx(be);
    long count = 0;
    size_t stale = 0;
    if (c->mirrors)
        for (auto &kv : c->mirrors->segs) {
            for (auto &ch : kv.second.site)
                if (ch.mode == SEG_LEAN) {
                    count++;
                    break;
                }
            for (auto &r : kv.second.stale) stale += r.second - r.first;
        }
    if (stale_floats) *stale_floats = stale;
    return count;
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
