// defines: the column sums' second stage (cuda_colsum2_finish, _prod) and its deferral (bf16 mode).
// The second stage of the column sums (cuda_colsum.h).
#include "kernels/cuda/cuda_colsum.h"

#include <cstdlib>
#include <cstring>

// Stage 2's blocks: 8 columns x 32 chunk groups.  A warp reads 8 consecutive columns (one 32-byte
// sector) of 4 chunks.  One thread per column would run 3 blocks at C = 768 (3 of an H100's 132
// SMs) through up to 2 x 256 partials per column (the fused LayerNorm backward's 256 chunks);
// here C / 8 blocks (96) share them.
#define FINISH_TX 8
#define FINISH_TY 32

// Group g adds chunks g, g + 32, ... in order, then thread row 0 adds the 32 groups in order:
// the same additions on every run.  Returns the column's sums on thread row 0 (c < C).
__device__ __forceinline__ void finish_sums(const float *pa, const float *pb, int chunks, int C, int c,
                                            float (*sa)[FINISH_TX], float (*sb)[FINISH_TX], float *a, float *b) {
    const int tx = threadIdx.x % FINISH_TX, ty = threadIdx.x / FINISH_TX;
    *a = 0, *b = 0;
    if (c < C)
        for (int k = ty; k < chunks; k += FINISH_TY) {
            if (pa) *a += pa[(size_t)k * C + c];
            if (pb) *b += pb[(size_t)k * C + c];
        }
    sa[ty][tx] = *a;
    sb[ty][tx] = *b;
    __syncthreads();
    if (ty == 0 && c < C)
        for (int k = 1; k < FINISH_TY; k++) {
            *a += sa[k][tx];
            *b += sb[k][tx];
        }
}

__global__ void colsum2_finish_kernel(const float *pa, const float *pb, int chunks, int C, float *outA,
                                      float *outB) {
    MHE_SHARED(float, sa, [FINISH_TY][FINISH_TX]);
    MHE_SHARED(float, sb, [FINISH_TY][FINISH_TX]);
    const int c = blockIdx.x * FINISH_TX + threadIdx.x % FINISH_TX;
    float a, b;
    finish_sums(outA ? pa : nullptr, outB ? pb : nullptr, chunks, C, c, sa, sb, &a, &b);
    if (threadIdx.x < FINISH_TX && c < C) {
        if (outA) outA[c] += a;
        if (outB) outB[c] += b;
    }
}

__global__ void colsum2_finish_prod_kernel(const float *pa, int chunks, int C, const float *f, const float *g,
                                           float *df, float *dg) {
    MHE_SHARED(float, sa, [FINISH_TY][FINISH_TX]);
    MHE_SHARED(float, sb, [FINISH_TY][FINISH_TX]);
    const int c = blockIdx.x * FINISH_TX + threadIdx.x % FINISH_TX;
    float s, unused;
    finish_sums(pa, nullptr, chunks, C, c, sa, sb, &s, &unused);
    if (threadIdx.x < FINISH_TX && c < C) {
        if (df) df[c] += s * g[c];
        if (dg) dg[c] += s * f[c];
    }
}

static void finish_now(Backend *be, const float *pa, const float *pb, int chunks, int C, float *outA,
                       float *outB) {
    const double outs = (outA != nullptr) + (outB != nullptr), np = outs * chunks * C;
    const unsigned blocks = (unsigned)((C + FINISH_TX - 1) / FINISH_TX);
    // Reads the partials of each output, reads and writes the output (+=).
    MHE_LAUNCH(colsum2_finish_kernel, blocks, FINISH_TX * FINISH_TY, 0, cuda_stream(be),
               mhe_cost_blocks(np, 4.0 * np + 8.0 * outs * C, blocks))(pa, pb, chunks, C, outA, outB);
    CUDA_CHECK_LAUNCH();
}

static void finish_prod_now(Backend *be, const float *pa, int chunks, int C, const float *f, const float *g,
                            float *df, float *dg) {
    const double outs = (df != nullptr) + (dg != nullptr), np = (double)chunks * C;
    const unsigned blocks = (unsigned)((C + FINISH_TX - 1) / FINISH_TX);
    // Reads the partials once, per output its factor and the output (+=), writes the output.
    MHE_LAUNCH(colsum2_finish_prod_kernel, blocks, FINISH_TX * FINISH_TY, 0, cuda_stream(be),
               mhe_cost_blocks(np + 2.0 * outs * C, 4.0 * np + 12.0 * outs * C, blocks))(pa, chunks, C, f, g, df, dg);
    CUDA_CHECK_LAUNCH();
}

// ---- Deferred stage 2 ----
// A BERT-base step finishes about 50 column sums (every LayerNorm's gamma and beta, MHE's output
// scale/shift and query scale factors), each a launch of well under a microsecond of memory work
// behind a ~4 us launch.  Their outputs are parameter gradients that nothing reads until the
// optimizer, the gradient norm or a bucket's all-reduce, so each waits in a table (its partials
// kept in an arena) and one launch finishes them all.  It runs before anything reads or writes
// what a waiting sum touches (its outputs, mhe_mul's factors): every fp32 write reports itself
// (cuda_fp32_wrote, cuda_weight_copy.cu), which calls cuda_colsum_touch.  Reads need no
// declaration: a parameter gradient is fp32 memory, and the ops that read fp32 memory only — the
// gradient norm, the optimizer, the fp32 elementwise ops, download and copy — flush before they
// run, while every fp32 write still reports itself.  On in bf16 mode unless
// MHE_CUDA_DEFER=0.  Each sum adds the same partials in the same order as at
// once, into outputs no other op touched in between: the results are bit-identical.
#define DEFER_MAX 60  // table entries per launch (64 B each: the kernel parameter stays under 4 KB)

struct DeferSum {
    const float *pa, *pb;  // partials [chunks, C]; pb NULL for a product split
    const float *f, *g;    // a product split's factors (df += s g, dg += s f); NULL otherwise
    float *outA, *outB;    // outputs (df, dg for a product split); either may be NULL
    int chunks, C;
    unsigned block0;       // the entry's first block of the launch
    int prod;
};
struct DeferTable {
    int n;
    DeferSum e[DEFER_MAX];
};
struct ColsumDefer {
    DeferTable t;
    float *arena;  // partials of the waiting sums (grow-only)
    size_t cap, used;
    unsigned blocks;
    bool open;  // the last space handed out is not yet a table entry (its stage 1 may be writing it)
};

__global__ void colsum2_finish_table_kernel(DeferTable t) {
    MHE_SHARED(float, sa, [FINISH_TY][FINISH_TX]);
    MHE_SHARED(float, sb, [FINISH_TY][FINISH_TX]);
    int i = 0;
    while (i + 1 < t.n && blockIdx.x >= t.e[i + 1].block0) i++;
    const DeferSum &s = t.e[i];
    const int c = (int)(blockIdx.x - s.block0) * FINISH_TX + threadIdx.x % FINISH_TX;
    float a, b;
    if (s.prod) {
        finish_sums(s.pa, nullptr, s.chunks, s.C, c, sa, sb, &a, &b);
        if (threadIdx.x < FINISH_TX && c < s.C) {
            if (s.outA) s.outA[c] += a * s.g[c];
            if (s.outB) s.outB[c] += a * s.f[c];
        }
    } else {
        finish_sums(s.outA ? s.pa : nullptr, s.outB ? s.pb : nullptr, s.chunks, s.C, c, sa, sb, &a, &b);
        if (threadIdx.x < FINISH_TX && c < s.C) {
            if (s.outA) s.outA[c] += a;
            if (s.outB) s.outB[c] += b;
        }
    }
}

void cuda_colsum_defer_init(Backend *be) {
    const char *e = std::getenv("MHE_CUDA_DEFER");
    if (e && *e && std::strcmp(e, "0") != 0 && std::strcmp(e, "1") != 0)
        mhe_fatal("MHE_CUDA_DEFER=%s: expected 0 (finish column sums at once) or 1", e);
    if (e && std::strcmp(e, "0") == 0) return;
    ColsumDefer *d = static_cast<ColsumDefer *>(std::calloc(1, sizeof(ColsumDefer)));
    if (!d) mhe_fatal("out of memory creating the CUDA backend");
    cuda_ctx(be)->defer = d;
}

void cuda_colsum_defer_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->defer) return;
    cuda_device_free(c->defer->arena);
    std::free(c->defer);
    c->defer = nullptr;
}

void cuda_colsum_flush(Backend *be) {
    ColsumDefer *d = cuda_ctx(be)->defer;
    if (!d || !d->t.n) return;
    const DeferTable t = d->t;
    const unsigned blocks = d->blocks;
    d->t.n = 0;  // first: the launch's own bookkeeping must not flush again
    if (!d->open) d->used = 0;  // else the space below `used` still holds the coming entry's partials
    d->blocks = 0;
    double flops = 0, bytes = 0;
    for (int i = 0; i < t.n; i++) {
        const DeferSum &s = t.e[i];
        const double outs = (s.outA != nullptr) + (s.outB != nullptr), C = s.C;
        const double np = (s.prod ? 1.0 : outs) * s.chunks * C;
        flops += np + (s.prod ? 2.0 * outs * C : 0.0);
        bytes += 4.0 * np + (s.prod ? 12.0 : 8.0) * outs * C;
    }
    MHE_LAUNCH(colsum2_finish_table_kernel, blocks, FINISH_TX * FINISH_TY, 0, cuda_stream(be),
               mhe_cost_blocks(flops, bytes, blocks))(t);
    CUDA_CHECK_LAUNCH();
    mhe_cost_close_op(OPC_NORM_ACT);
}

static bool meets(const void *p, size_t bytes, const float *q, int C) {
    if (!q) return false;
    const char *a = static_cast<const char *>(p), *b = reinterpret_cast<const char *>(q);
    return a < b + (size_t)C * sizeof(float) && b < a + bytes;
}

void cuda_colsum_touch(Backend *be, const void *p, size_t bytes) {
    ColsumDefer *d = cuda_ctx(be)->defer;
    if (!d || !d->t.n || !p || !bytes) return;
    for (int i = 0; i < d->t.n; i++) {
        const DeferSum &s = d->t.e[i];
        if (meets(p, bytes, s.outA, s.C) || meets(p, bytes, s.outB, s.C) || meets(p, bytes, s.f, s.C) ||
            meets(p, bytes, s.g, s.C)) {
            cuda_colsum_flush(be);
            return;
        }
    }
}

float *cuda_colsum_space(Backend *be, size_t floats) {
    CudaCtx *c = cuda_ctx(be);
    ColsumDefer *d = c->defer;
    if (!d) return cuda_grow(be, c->colsum, c->colsum_cap, floats);
    d->open = false;  // ops run stage 1 and its finish in turn: an earlier space is an entry by now
    if (d->used + floats > d->cap) {
        // Steady-state steps fit: the arena grows to half again what one interval needed.
        const size_t need = d->used + floats;
        cuda_colsum_flush(be);
        d->used = 0;
        if (floats > d->cap || need > d->cap) {
            size_t cap = d->cap;
            cuda_grow(be, d->arena, cap, need + need / 2);
            d->cap = cap;
        }
    }
    float *p = d->arena + d->used;
    d->used += (floats + 63) & ~(size_t)63;  // 256-byte aligned entries
    if (d->used > d->cap) d->used = d->cap;
    d->open = true;
    return p;
}

static void defer(Backend *be, const DeferSum &s) {
    ColsumDefer *d = cuda_ctx(be)->defer;
    // A second sum into a waiting output (the next micro-batch's) goes after it, in order.
    cuda_colsum_touch(be, s.outA, (size_t)s.C * sizeof(float));
    cuda_colsum_touch(be, s.outB, (size_t)s.C * sizeof(float));
    if (d->t.n == DEFER_MAX) cuda_colsum_flush(be);
    DeferSum &e = d->t.e[d->t.n++];
    e = s;
    e.block0 = d->blocks;
    d->blocks += (unsigned)((s.C + FINISH_TX - 1) / FINISH_TX);
    d->open = false;
}

void cuda_colsum2_finish(Backend *be, const float *pa, const float *pb, int chunks, int C, float *outA,
                         float *outB) {
    if (chunks <= 0 || C <= 0 || (!outA && !outB)) return;
    if (cuda_ctx(be)->defer)
        defer(be, DeferSum{pa, pb, nullptr, nullptr, outA, outB, chunks, C, 0, 0});
    else
        finish_now(be, pa, pb, chunks, C, outA, outB);
}

void cuda_colsum2_finish_prod(Backend *be, const float *pa, int chunks, int C, const float *f, const float *g,
                              float *df, float *dg) {
    if (chunks <= 0 || C <= 0 || (!df && !dg)) return;
    if (cuda_ctx(be)->defer)
        defer(be, DeferSum{pa, nullptr, f, g, df, dg, chunks, C, 0, 1});
    else
        finish_prod_now(be, pa, chunks, C, f, g, df, dg);
}
