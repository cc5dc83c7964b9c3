// defines: the per-head broadcast around the attention core (MHE glue: head_expand,
// head_expand_backward(_prod), head_scales), fp32 or bf16 Q/K/V and dQ/dK/dV.  The head
// embeddings' column sums go through the two-stage sums of cuda_colsum.h: deterministic.
#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"

// head_expand(_backward) read and store bf16 activations in bf16 mode (x: the projection's Q, K
// or V; dout: the attention backward's dQ, dK, dV), fp32 in fp32 mode.
template <typename X>
__global__ void head_expand_kernel(const X *x, int ldx, const float *mul, const float *add,
                                   int N, int n, int d, float *out, __nv_bfloat16 *outb) {
    size_t total = (size_t)N * n * d;
    GRID_STRIDE(i, total) {
        int c = (int)(i % d), h = (int)((i / d) % n);
        size_t r = i / ((size_t)n * d);
        float v = ld_float(x, r * ldx + c);
        if (mul) v *= mul[h * d + c];
        if (add) v += add[h * d + c];
        store_dual(out, outb, i, v);
    }
}
// dx[r, c] = sum_h dout[r, h, c] * mul[h, c]
template <typename G>
__global__ void head_expand_dx_kernel(const G *dout, const float *mul, int N, int n, int d,
                                      float *dx, __nv_bfloat16 *dxb, int ldx, int accumulate) {
    size_t total = (size_t)N * d;
    GRID_STRIDE(i, total) {
        int c = (int)(i % d);
        size_t r = i / d;
        float s = 0;
        for (int h = 0; h < n; h++) s += ld_float(dout, (r * n + h) * d + c) * (mul ? mul[h * d + c] : 1.0f);
        store_dual(dx, dxb, r * ldx + c, accumulate ? ld_old(dx, dxb, r * ldx + c) + s : s);
    }
}
// dmul[h, c] += sum_r dout[r, h, c] x[r, c];  dadd[h, c] += sum_r dout[r, h, c]  (column hc = h d + c
// of dout [N, n d]; two-stage column sums, cuda_colsum.h)
template <typename G, typename X>
struct HeadDparamVals {
    const G *dout;
    const X *x;
    int ldx, nd, d;
    __device__ void vals(int r, int hc, float *a, float *b) const {
        const float g = ld_float(dout, (size_t)r * nd + hc);
        *a = x ? g * ld_float(x, (size_t)r * ldx + hc % d) : 0.0f;
        *b = g;
    }
};

// dx and the parameter gradients' stage-1 partials in one pass over dout (head_expand_backward's
// two kernels, dx and cuda_colsum2_partials, each read all of it): block k takes rows
// [HB_ROWS k, HB_ROWS (k+1)), warps take rows, lanes the columns c of every head; a row's dx is
// summed over the heads in order (the dx kernel's sum, so the same value), and each warp adds its
// rows' dout·x (A) and dout (B) per column hc = h d + c into its own row of shared memory (each
// element owned by one thread), added over the warps in order at the end: chunk k's partials
// (A at partials[k C + hc], B at partials[(chunks + k) C + hc], C = n d) for stage 2 —
// deterministic.  Used while the warps' rows fit in shared memory (head_fused_smem).
#define HB_ROWS 32
// The input types (dout, x): fp32 (fp32 mode) or bf16 (bf16 mode; BF: x not read).
struct HbFF { using G = float; using X = float; };
struct HbBF { using G = __nv_bfloat16; using X = float; };
struct HbBB { using G = __nv_bfloat16; using X = __nv_bfloat16; };
template <typename T>
__global__ void head_expand_bwd_fused_kernel(const typename T::G *dout, const typename T::X *x, int ldx,
                                             const float *mul, int N, int n, int d, float *dx, __nv_bfloat16 *dxb, int accumulate, int want_a, int want_b,
                                             float *partials) {
    MHE_DYNAMIC_SHARED(float, sm);  // [warps][want_a + want_b][n d]
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, nd = n * d;
    const int outs = want_a + want_b;
    float *accA = sm + (size_t)warp * outs * nd, *accB = accA + (want_a ? nd : 0);
    for (int c = lane; c < d; c += 32)  // zeroed by the lane that adds to it: no barrier needed
        for (int h = 0; h < n; h++) {
            if (want_a) accA[h * d + c] = 0.0f;
            if (want_b) accB[h * d + c] = 0.0f;
        }
    const int r0 = blockIdx.x * HB_ROWS, r1 = r0 + HB_ROWS < N ? r0 + HB_ROWS : N;
    for (int r = r0 + warp; r < r1; r += warps)
        for (int c = lane; c < d; c += 32) {
            const float xv = want_a ? ld_float(x, (size_t)r * ldx + c) : 0.0f;
            float s = 0.0f;
            for (int h = 0; h < n; h++) {
                const float g = ld_float(dout, ((size_t)r * n + h) * d + c);
                s += g * (mul ? mul[h * d + c] : 1.0f);
                if (want_a) accA[h * d + c] += g * xv;
                if (want_b) accB[h * d + c] += g;
            }
            if (dx || dxb) store_dual(dx, dxb, (size_t)r * ldx + c, accumulate ? ld_old(dx, dxb, (size_t)r * ldx + c) + s : s);
        }
    __syncthreads();
    const size_t chunks = gridDim.x;
    for (int hc = threadIdx.x; hc < nd; hc += blockDim.x)
        for (int o = 0; o < outs; o++) {
            float t = 0.0f;
            for (int w = 0; w < warps; w++) t += sm[((size_t)w * outs + o) * nd + hc];
            const int which = o == 0 && want_a ? 0 : 1;  // A's partials first, then B's
            partials[((size_t)which * chunks + blockIdx.x) * nd + hc] = t;
        }
}
// Shared memory the fused kernel needs, 0 when it would not fit in the default 48 KB.
static size_t head_fused_smem(int n, int d, int outs) {
    const size_t b = sizeof(float) * (MHE_BLOCK / 32) * (size_t)outs * n * d;
    return b <= 48 * 1024 ? b : 0;
}

// The inputs as head_expand(_backward) read them: fp32, or (bf16 mode) bf16.
struct HeadIn {
    const __nv_bfloat16 *xb, *gb;
    double xe, ge;  // bytes per element read
};
static HeadIn head_inputs(Backend *be, const float *x, size_t xspan, const float *dout, size_t gn) {
    HeadIn in{nullptr, nullptr, 4.0, 4.0};
    if (x && xspan) in.xb = act_in(be, x);
    if (dout && gn) in.gb = act_in(be, dout);
    in.xe = in.xb ? 2.0 : 4.0;
    in.ge = in.gb ? 2.0 : 4.0;
    return in;
}
static size_t xspan_of(int N, int d, int ldx) { return N > 0 && d > 0 ? (size_t)(N - 1) * ldx + d : 0; }

static void cuda_head_expand(Backend *be, const float *x, int ldx, const float *mul,
                             const float *add, int N, int n, int d, float *out) {
    double t0 = cuda_prof_begin(be);
    size_t total = (size_t)N * n * d;
    const HeadIn in = head_inputs(be, x, total ? xspan_of(N, d, ldx) : 0, nullptr, 0);
    float *outw = out;
    __nv_bfloat16 *outb = act_out(be, out, &outw);
    const MheCost cost = with_act_store(mhe_cost(2.0 * total, 4.0 * total + in.xe * N * d + 4.0 * ((mul != nullptr) + (add != nullptr)) * (double)n * d), outb, outw, (double)total);
    if (total && in.xb)
        MHE_LAUNCH(head_expand_kernel<__nv_bfloat16>, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be), cost)(in.xb, ldx, mul, add, N, n, d, outw, outb);
    else if (total)
        MHE_LAUNCH(head_expand_kernel<float>, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be), cost)(x, ldx, mul, add, N, n, d, outw, outb);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// dx of head_expand_backward(_prod): fp32 (fp32 mode) or bf16; possibly strided (a column slice
// of the fused dQ|dK|dV buffer).
struct HeadDx {
    float *dxw;
    __nv_bfloat16 *dxb;
};
static HeadDx head_dx_out(Backend *be, float *dx) {
    HeadDx o{nullptr, nullptr};
    if (dx) o.dxb = act_out(be, dx, &o.dxw);
    return o;
}
static void head_dx_launch(Backend *be, const float *dout, const HeadIn &in, const float *mul, int N, int n, int d,
                           HeadDx o, int ldx, int accumulate) {
    const MheCost cost = with_act_store(mhe_cost(2.0 * N * n * d, in.ge * N * n * d + 4.0 * ((mul ? (double)n * d : 0) + (accumulate ? 2.0 : 1.0) * N * d)), o.dxb, o.dxw, (double)N * d);
    if (N > 0 && d > 0 && in.gb)
        MHE_LAUNCH(head_expand_dx_kernel<__nv_bfloat16>, cuda_grid_for((size_t)N * d), MHE_BLOCK, 0, cuda_stream(be), cost)(in.gb, mul, N, n, d, o.dxw, o.dxb, ldx, accumulate);
    else if (N > 0 && d > 0)
        MHE_LAUNCH(head_expand_dx_kernel<float>, cuda_grid_for((size_t)N * d), MHE_BLOCK, 0, cuda_stream(be), cost)(dout, mul, N, n, d, o.dxw, o.dxb, ldx, accumulate);
    CUDA_CHECK_LAUNCH();
}
// Stage 1 of the parameter gradients' column sums over the inputs as read (bf16 or fp32).
static float *head_dparam_partials(Backend *be, const float *dout, const float *x, int ldx, const HeadIn &in, int N,
                                   int n, int d, int *chunks) {
    const int nd = n * d;
    const MheCost c = mhe_cost(3.0 * N * nd, in.ge * N * nd + (x ? in.xe * N * d : 0.0));
    if (in.gb && in.xb)
        return cuda_colsum2_partials(be, HeadDparamVals<__nv_bfloat16, __nv_bfloat16>{in.gb, x ? in.xb : nullptr, ldx, nd, d}, N, nd, c, chunks);
    if (in.gb)
        return cuda_colsum2_partials(be, HeadDparamVals<__nv_bfloat16, float>{in.gb, x, ldx, nd, d}, N, nd, c, chunks);
    return cuda_colsum2_partials(be, HeadDparamVals<float, float>{dout, x, ldx, nd, d}, N, nd, c, chunks);
}
// dx (when not NULL) and stage 1 of the sums in one launch (head_expand_bwd_fused_kernel) into
// cuda_colsum_space (*partials); false (nothing launched) when its shared memory would not fit.
static bool head_fused(Backend *be, const float *dout, const float *x, int ldx, const float *mul, const HeadIn &in,
                       int N, int n, int d, HeadDx o, int accumulate, int want_a, int want_b, int *chunks,
                       const float **partials_out) {
    const size_t smem = head_fused_smem(n, d, want_a + want_b);
    if (!smem) return false;
    *chunks = (N + HB_ROWS - 1) / HB_ROWS;
    const size_t nd = (size_t)n * d, np = (size_t)(want_a + want_b) * *chunks * nd;
    float *partials = cuda_colsum_space(be, 2 * (size_t)*chunks * nd);
    *partials_out = partials;
    const bool has_dx = o.dxw || o.dxb;
    // dout once, x once (for A), mul, dx written (and read when accumulating), the partials.
    const double bytes = in.ge * N * nd + (want_a ? in.xe * N * d : 0.0) + (mul ? 4.0 * nd : 0.0) +
                         (has_dx ? (accumulate ? 8.0 : 4.0) * N * d : 0.0) + 4.0 * (double)np;
    const MheCost cost = with_act_store(mhe_cost_blocks((2.0 + 2.0 * (want_a + want_b)) * N * nd, bytes, *chunks),
                                        o.dxb, o.dxw, has_dx ? (double)N * d : 0.0);
    const unsigned blocks = (unsigned)*chunks, threads = MHE_BLOCK;
#define HB_LAUNCH(T, gp, xp)                                                                                    \
    MHE_LAUNCH(head_expand_bwd_fused_kernel<T>, blocks, threads, smem, cuda_stream(be), cost)(                   \
        gp, xp, ldx, mul, N, n, d, o.dxw, o.dxb, accumulate, want_a, want_b, partials)
    if (in.gb && in.xb && want_a)
        HB_LAUNCH(HbBB, in.gb, in.xb);
    else if (in.gb)
        HB_LAUNCH(HbBF, in.gb, x);
    else
        HB_LAUNCH(HbFF, dout, x);
#undef HB_LAUNCH
    CUDA_CHECK_LAUNCH();
    return true;
}
static void cuda_head_expand_backward(Backend *be, const float *dout, const float *x, int ldx,
                                      const float *mul, int N, int n, int d, float *dx,
                                      int accumulate, float *dmul, float *dadd) {
    double t0 = cuda_prof_begin(be);
    if (dmul) cuda_fp32_wrote(be, dmul, (size_t)n * d * sizeof(float));
    if (dadd) cuda_fp32_wrote(be, dadd, (size_t)n * d * sizeof(float));
    const bool sums = (dmul || dadd) && N > 0 && n > 0 && d > 0;
    const HeadIn in = head_inputs(be, dmul ? x : nullptr, sums && dmul ? xspan_of(N, d, ldx) : 0, dout, (size_t)N * n * d);
    const HeadDx o = head_dx_out(be, dx);
    int chunks = 0;
    const float *p = nullptr;
    if (sums && head_fused(be, dout, dmul ? x : nullptr, ldx, mul, in, N, n, d, o, accumulate, dmul != nullptr,
                           dadd != nullptr, &chunks, &p)) {
        cuda_colsum2_finish(be, p, p + (size_t)chunks * n * d, chunks, n * d, dmul, dadd);
        cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
        return;
    }
    if (sums) {
        p = head_dparam_partials(be, dout, dmul ? x : nullptr, ldx, in, N, n, d, &chunks);
        cuda_colsum2_finish(be, p, p + (size_t)chunks * n * d, chunks, n * d, dmul, dadd);
    }
    if (dx) head_dx_launch(be, dout, in, mul, N, n, d, o, ldx, accumulate);
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// The scale's gradient dm is never stored: stage 2 of its column sums splits it into df and dg
// (cuda_colsum2_finish_prod) — no zeroed scratch, no two mul_acc launches.
static void cuda_head_expand_backward_prod(Backend *be, const float *dout, const float *x, int ldx, const float *mul,
                                           const float *f, const float *g, int N, int n, int d, float *dx,
                                           int accumulate, float *df, float *dg) {
    double t0 = cuda_prof_begin(be);
    if (df) cuda_fp32_wrote(be, df, (size_t)n * d * sizeof(float));
    if (dg) cuda_fp32_wrote(be, dg, (size_t)n * d * sizeof(float));
    const bool sums = (df || dg) && N > 0 && n > 0 && d > 0;
    const HeadIn in = head_inputs(be, sums ? x : nullptr, sums ? xspan_of(N, d, ldx) : 0, dout, (size_t)N * n * d);
    const HeadDx o = head_dx_out(be, dx);
    int chunks = 0;
    const float *p = nullptr;
    if (sums && head_fused(be, dout, x, ldx, mul, in, N, n, d, o, accumulate, 1, 0, &chunks, &p)) {
        cuda_colsum2_finish_prod(be, p, chunks, n * d, f, g, df, dg);
        cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
        return;
    }
    if (sums) {
        p = head_dparam_partials(be, dout, x, ldx, in, N, n, d, &chunks);
        cuda_colsum2_finish_prod(be, p, chunks, n * d, f, g, df, dg);
    }
    if (dx) head_dx_launch(be, dout, in, mul, N, n, d, o, ldx, accumulate);
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// s_r[0, 3w) = 1 + e_r, s_r[3w, 4w) = s_r[0, w) ⊙ s_r[w, 2w) (prod) for every row r: add_scalar's
// and mul's fp32 operations, so the same values.
__global__ void head_scales_kernel(const float *e, size_t lde, int rows, int w, int prod, float *s, size_t lds) {
    const int per = (prod ? 4 : 3) * w;
    GRID_STRIDE(i, (size_t)rows * per) {
        const size_t r = i / per;
        const int c = (int)(i % per);
        const float *er = e + r * lde;
        s[r * lds + c] = c < 3 * w ? er[c] + 1.0f : (er[c - 3 * w] + 1.0f) * (er[c - 2 * w] + 1.0f);
    }
}
static void cuda_head_scales(Backend *be, const float *e, size_t lde, int rows, int w, int prod, float *s,
                             size_t lds) {
    double t0 = cuda_prof_begin(be);
    const int per = (prod ? 4 : 3) * w;
    for (int r = 0; r < rows; r++) cuda_fp32_wrote(be, s + (size_t)r * lds, (size_t)per * sizeof(float));
    const double total = (double)rows * per;
    // Reads 3w (+ 2w for the products, cached) and writes per floats a row.
    if (total > 0)
        MHE_LAUNCH(head_scales_kernel, cuda_grid_for((size_t)total), MHE_BLOCK, 0, cuda_stream(be),
                   mhe_cost(total + (prod ? 2.0 * rows * w : 0.0), 4.0 * ((double)rows * 3 * w + total)))(e, lde, rows, w, prod, s, lds);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

static void act_head_expand(Backend *be, const Act *x, int ldx, const float *mul, const float *add, int N, int n, int d,
                            Act *out) {
    cuda_head_expand(be, af(x), ldx, mul, add, N, n, d, af(out));
}
static void act_head_expand_backward(Backend *be, const Act *dout, const Act *x, int ldx, const float *mul, int N,
                                     int n, int d, Act *dx, int accumulate, float *dmul, float *dadd) {
    cuda_head_expand_backward(be, af(dout), af(x), ldx, mul, N, n, d, af(dx), accumulate, dmul, dadd);
}
static void act_head_expand_backward_prod(Backend *be, const Act *dout, const Act *x, int ldx, const float *mul,
                                          const float *f, const float *g, int N, int n, int d, Act *dx,
                                          int accumulate, float *df, float *dg) {
    cuda_head_expand_backward_prod(be, af(dout), af(x), ldx, mul, f, g, N, n, d, af(dx), accumulate, df, dg);
}
void cuda_install_heads(Backend *be) {
    be->head_expand = act_head_expand;
    be->head_expand_backward = act_head_expand_backward;
    be->head_expand_backward_prod = act_head_expand_backward_prod;
    be->head_scales = cuda_head_scales;
}
