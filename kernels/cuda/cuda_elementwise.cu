// Elementwise and column-reduction ops: bias, arithmetic, head broadcast, GELU, dropout,
// embeddings, and the optimizer kernels (fp32 master weights and moments).
// Column sums are deterministic: the head embeddings' through the two-stage sums of
// cuda_colsum.h (the whole GPU), the bias fallback's and the positions' with one thread per
// column (bias gradients normally come from cuBLASLt's BGRADB; positions have T·D columns);
// only the embedding scatter uses atomics.
#include <cmath>

#include "kernels/cuda/cuda_colsum.h"
#include "kernels/cuda/cuda_internal.h"
#include "kernels/optim_math.h"

#define GRID_STRIDE(i, n)                                                               \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);            \
         i += (size_t)blockDim.x * gridDim.x)

static unsigned cols_grid(size_t cols) { return (unsigned)((cols + MHE_BLOCK - 1) / MHE_BLOCK); }

__global__ void bias_add_kernel(float *y, __nv_bfloat16 *yb, const float *bias, size_t total, int C) {
    GRID_STRIDE(i, total) store_dual(y, yb, i, y[i] + bias[i % C]);
}
__global__ void bias_backward_kernel(const float *dy, int N, int C, size_t ld, float *dbias) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0;
    for (int r = 0; r < N; r++) s += dy[(size_t)r * ld + c];
    dbias[c] += s;
}

static void cuda_bias_add(Backend *be, float *y, const float *bias, int N, int C) {
    double t0 = cuda_prof_begin(be);
    size_t total = (size_t)N * C;
    __nv_bfloat16 *yb = cuda_fp32_copy_out(be, y, total);
    if (total) MHE_LAUNCH(bias_add_kernel, cuda_grid_for(total), MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(mhe_cost((double)total, 8.0 * total + 4.0 * C), yb, total))(y, yb, bias, total, C);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// dbias[c] += sum_r dy[r, c], dy's rows ld apart
void cuda_bias_backward_ld(Backend *be, const float *dy, int N, int C, int ld, float *dbias) {
    double t0 = cuda_prof_begin(be);
    cuda_fp32_wrote(be, dbias, (size_t)C * sizeof(float));
    if (C) MHE_LAUNCH(bias_backward_kernel, cols_grid(C), MHE_BLOCK, 0, cuda_stream(be), mhe_cost_blocks((double)N * C, 4.0 * N * C + 8.0 * C, cuda_real_blocks(C)))(dy, N, C, (size_t)ld, dbias);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_bias_backward(Backend *be, const float *dy, int N, int C, float *dbias) {
    cuda_bias_backward_ld(be, dy, N, C, C, dbias);
}

enum { EW_ADD, EW_AXPY, EW_SCALE, EW_ADD_SCALAR, EW_MUL, EW_MUL_ACC };

__global__ void elementwise_kernel(int op, const float *a, const float *b, float c, float *out,
                                   __nv_bfloat16 *outb, size_t n) {
    GRID_STRIDE(i, n) {
        float r;
        switch (op) {
        case EW_ADD: r = a[i] + b[i]; break;
        case EW_AXPY: r = out[i] + c * a[i]; break;
        case EW_SCALE: r = out[i] * c; break;
        case EW_ADD_SCALAR: r = a[i] + c; break;
        case EW_MUL: r = a[i] * b[i]; break;
        default: r = out[i] + a[i] * b[i]; break;
        }
        store_dual(out, outb, i, r);
    }
}

// FLOPs and bytes per element of each op (reads + writes of 4 bytes).
static MheCost ew_cost(int op, size_t n) {
    static const double flops[] = {1, 2, 1, 1, 1, 2}, words[] = {3, 3, 2, 2, 3, 4};
    return mhe_cost(flops[op] * n, 4.0 * words[op] * n);
}
static void elementwise(Backend *be, int op, const float *a, const float *b, float c, float *out, size_t n) {
    double t0 = cuda_prof_begin(be);
    cuda_colsum_flush(be);  // a parameter gradient's reader (cuda_colsum.cu)
    __nv_bfloat16 *outb = cuda_fp32_copy_out(be, out, n);
    if (n) MHE_LAUNCH(elementwise_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), with_bf16_store(ew_cost(op, n), outb, n))(op, a, b, c, out, outb, n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_add(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_ADD, a, b, 0, out, n); }
static void cuda_axpy(Backend *be, float alpha, const float *x, float *y, size_t n) { elementwise(be, EW_AXPY, x, nullptr, alpha, y, n); }
static void cuda_scale(Backend *be, float *x, float alpha, size_t n) { elementwise(be, EW_SCALE, nullptr, nullptr, alpha, x, n); }
static void cuda_add_scalar(Backend *be, const float *x, float c, float *out, size_t n) { elementwise(be, EW_ADD_SCALAR, x, nullptr, c, out, n); }
static void cuda_mul(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_MUL, a, b, 0, out, n); }
static void cuda_mul_acc(Backend *be, const float *a, const float *b, float *out, size_t n) { elementwise(be, EW_MUL_ACC, a, b, 0, out, n); }

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

#define GELU_SQRT_2_OVER_PI 0.7978845608028654f
#define GELU_INV_SQRT_2 0.7071067811865476f
#define GELU_INV_SQRT_2PI 0.3989422804014327f
// Cost model: erf/tanh/exp count as ~10 FLOPs (a polynomial on the fp32 pipes).
#define GELU_FWD_FLOPS 16.0
#define GELU_BWD_FLOPS 28.0

template <typename X>
__global__ void gelu_forward_kernel(int tanh_form, const X *x, float *y, __nv_bfloat16 *yb, size_t n) {
    GRID_STRIDE(i, n) {
        float v = ld_float(x, i);
        if (tanh_form)
            store_dual(y, yb, i, 0.5f * v * (1.0f + tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v))));
        else
            store_dual(y, yb, i, 0.5f * v * (1.0f + erff(v * GELU_INV_SQRT_2)));
    }
}
// erf:  gelu'(x) = Φ(x) + x φ(x)
// tanh: gelu'(x) = (1 + t)/2 + x/2 (1 - t²) √(2/π) (1 + 3·0.044715 x²),  t = tanh(u(x))
// dx may alias dy (each element read, then written, by one thread).  X: float or bf16 (x, dy).
template <typename X>
__global__ void gelu_backward_kernel(int tanh_form, const X *x, const X *dy, float *dx, __nv_bfloat16 *dxb, size_t n) {
    GRID_STRIDE(i, n) {
        float v = ld_float(x, i), g;
        if (tanh_form) {
            float t = tanhf(GELU_SQRT_2_OVER_PI * (v + 0.044715f * v * v * v));
            g = 0.5f * (1.0f + t) +
                0.5f * v * (1.0f - t * t) * GELU_SQRT_2_OVER_PI * (1.0f + 3.0f * 0.044715f * v * v);
        } else {
            g = 0.5f * (1.0f + erff(v * GELU_INV_SQRT_2)) + v * GELU_INV_SQRT_2PI * expf(-0.5f * v * v);
        }
        store_dual(dx, dxb, i, ld_float(dy, i) * g);
    }
}
// Elements of E (float, or bf16 for an Act of a bf16-activation backend), fp32 arithmetic
// inside; yb: the weight copy of an fp32 output (cuda_fp32_copy_out), nullptr otherwise.
template <typename E>
__global__ void tanh_forward_kernel(const E *x, E *y, __nv_bfloat16 *yb, size_t n) {
    GRID_STRIDE(i, n) store_dual(y, yb, i, tanhf(ld_float(x, i)));
}
// tanh' = 1 - tanh², from the saved output.
template <typename E>
__global__ void tanh_backward_kernel(const E *y, const E *dy, E *dx, __nv_bfloat16 *dxb, size_t n) {
    GRID_STRIDE(i, n) {
        const float t = ld_float(y, i);
        store_dual(dx, dxb, i, ld_float(dy, i) * (1.0f - t * t));
    }
}
static void act_tanh_forward(Backend *be, const Act *x, Act *y, size_t n) {
    double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    if (!n) {
    } else if (act16(be)) {
        MHE_LAUNCH(tanh_forward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, mhe_cost(10.0 * n, 4.0 * n))(ab(x), ab(y), nullptr, n);
    } else {
        __nv_bfloat16 *yb = cuda_fp32_copy_out(be, af(y), n);
        MHE_LAUNCH(tanh_forward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(10.0 * n, 8.0 * n), yb, n))(af(x), af(y), yb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void act_tanh_backward(Backend *be, const Act *y, const Act *dy, Act *dx, size_t n) {
    double t0 = cuda_prof_begin(be);
    cudaStream_t st = cuda_stream(be);
    if (!n) {
    } else if (act16(be)) {
        MHE_LAUNCH(tanh_backward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, mhe_cost(3.0 * n, 6.0 * n))(ab(y), ab(dy), ab(dx), nullptr, n);
    } else {
        __nv_bfloat16 *dxb = cuda_fp32_copy_out(be, af(dx), n);
        MHE_LAUNCH(tanh_backward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(3.0 * n, 12.0 * n), dxb, n))(af(y), af(dy), af(dx), dxb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
// GELU and dropout: fp32 in fp32 mode, bf16 in and out in bf16 mode (xb and yb set, yw null).
static void cuda_gelu_forward(Backend *be, GeluKind kind, const float *x, float *y, size_t n) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x);
    float *yw;
    __nv_bfloat16 *yb = act_out(be, y, &yw);
    const MheCost cost = with_act_store(mhe_cost(GELU_FWD_FLOPS * n, (xb ? 6.0 : 8.0) * n), yb, yw, n);
    cudaStream_t st = cuda_stream(be);
    if (xb && yb && cuda_gelu_forward_vec(be, kind, xb, yb, n)) {  // bf16, 16-byte groups (cuda_gelu.cu)
    } else if (n && xb)
        MHE_LAUNCH(gelu_forward_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, st, cost)(kind == GELU_TANH, xb, yw, yb, n);
    else if (n)
        MHE_LAUNCH(gelu_forward_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, st, cost)(kind == GELU_TANH, x, yw, yb, n);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}
static void cuda_gelu_backward(Backend *be, GeluKind kind, const float *x, const float *dy, float *dx, size_t n) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x), *dyb = act_in(be, dy);
    float *dxw;
    __nv_bfloat16 *dxb = act_out(be, dx, &dxw);
    const MheCost cost = with_act_store(mhe_cost(GELU_BWD_FLOPS * n, (xb ? 2.0 : 4.0) * n + (dyb ? 2.0 : 4.0) * n + 4.0 * n), dxb, dxw, n);
    const int tf = kind == GELU_TANH;
    cudaStream_t st = cuda_stream(be);
    const unsigned grid = cuda_grid_for(n);
    if (!n) {
    } else if (xb && dyb && dxb && cuda_gelu_backward_vec(be, kind, xb, dyb, dxb, n)) {  // cuda_gelu.cu
    } else if (xb) {
        MHE_LAUNCH(gelu_backward_kernel<__nv_bfloat16>, grid, MHE_BLOCK, 0, st, cost)(tf, xb, dyb, dxw, dxb, n);
    } else {
        MHE_LAUNCH(gelu_backward_kernel<float>, grid, MHE_BLOCK, 0, st, cost)(tf, x, dy, dxw, dxb, n);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

template <typename X>
__global__ void dropout_kernel(const X *x, float *y, __nv_bfloat16 *yb, size_t n, float p, uint64_t seed,
                               uint64_t offset) {
    float inv = 1.0f / (1.0f - p);
    GRID_STRIDE(i, n) store_dual(y, yb, i, ops_dropout_keep(seed, offset, i, p) ? ld_float(x, i) * inv : 0.0f);
}
// Activations in bf16 (bf16 mode) or fp32; y may alias x.
static void cuda_dropout(Backend *be, const float *x, float *y, size_t n, float p, uint64_t seed, uint64_t offset) {
    double t0 = cuda_prof_begin(be);
    const __nv_bfloat16 *xb = act_in(be, x);
    // p = 0 is a copy (nothing when in place): fp32 by memcpy, bf16 through the kernel (every draw
    // keeps, the scale is 1).
    float *yw = y;
    __nv_bfloat16 *yb = p > 0.0f || x != y ? act_out(be, y, &yw) : nullptr;
    if (p <= 0.0f && !yb && !(xb && x != y)) {
        if (x != y) cuda_memcpy_d2d(be, y, x, n * sizeof(float));
    } else if (n) {
        const MheCost cost = with_act_store(mhe_cost((double)n, (xb ? 6.0 : 8.0) * n), yb, yw, n);
        if (xb)
            MHE_LAUNCH(dropout_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
                xb, yw, yb, n, p > 0.0f ? p : 0.0f, seed, offset);
        else
            MHE_LAUNCH(dropout_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
                x, yw, yb, n, p > 0.0f ? p : 0.0f, seed, offset);
        CUDA_CHECK_LAUNCH();
    }
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

template <typename E>
__global__ void embedding_forward_kernel(const int32_t *ids, const int32_t *type_ids, const float *word,
                                         const float *pos, const float *type, int B, int T, int D, E *out,
                                         __nv_bfloat16 *outb) {
    size_t total = (size_t)B * T * D;
    GRID_STRIDE(i, total) {
        int c = (int)(i % D);
        size_t bt = i / D;
        int t = (int)(bt % T);
        float v = word[(size_t)ids[bt] * D + c] + pos[(size_t)t * D + c];
        if (type) v += type[(size_t)(type_ids ? type_ids[bt] : 0) * D + c];
        store_dual(out, outb, i, v);
    }
}
// Word and type rows repeat across tokens: scatter with atomics.
template <typename E>
__global__ void embedding_scatter_kernel(const E *dout, const int32_t *ids, const int32_t *type_ids,
                                         int B, int T, int D, float *dword, float *dtype) {
    size_t total = (size_t)B * T * D;
    GRID_STRIDE(i, total) {
        int c = (int)(i % D);
        size_t bt = i / D;
        const float g = ld_float(dout, i);
        if (dword) atomicAdd(&dword[(size_t)ids[bt] * D + c], g);
        if (dtype) atomicAdd(&dtype[(size_t)(type_ids ? type_ids[bt] : 0) * D + c], g);
    }
}
// dpos[t, c] += sum_b dout[b, t, c]
template <typename E>
__global__ void embedding_pos_kernel(const E *dout, int B, int T, int D, float *dpos) {
    size_t total = (size_t)T * D;
    GRID_STRIDE(i, total) {
        float s = 0;
        for (int b = 0; b < B; b++) s += ld_float(dout, (size_t)b * T * D + i);
        dpos[i] += s;
    }
}
static void act_embedding_forward(Backend *be, const int32_t *ids, const int32_t *type_ids, const float *word,
                                  const float *pos, const float *type, int B, int T, int D, Act *out) {
    double t0 = cuda_prof_begin(be);
    const size_t total = (size_t)B * T * D;
    // Reads of the three tables and the ids, then the stores (4 or 2 bytes each).
    const double reads = 4.0 * ((type ? 2.0 : 1.0) * total + (double)T * D + (type_ids ? 2.0 : 1.0) * B * T);
    cudaStream_t st = cuda_stream(be);
    if (!total) {
    } else if (act16(be)) {
        MHE_LAUNCH(embedding_forward_kernel<__nv_bfloat16>, cuda_grid_for(total), MHE_BLOCK, 0, st, mhe_cost(2.0 * total, reads + 2.0 * total))(ids, type_ids, word, pos, type, B, T, D, ab(out), nullptr);
    } else {
        __nv_bfloat16 *outb = cuda_fp32_copy_out(be, af(out), total);
        MHE_LAUNCH(embedding_forward_kernel<float>, cuda_grid_for(total), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(2.0 * total, reads + 4.0 * total), outb, total))(ids, type_ids, word, pos, type, B, T, D, af(out), outb);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}
static void act_embedding_backward(Backend *be, const Act *dout, const int32_t *ids, const int32_t *type_ids, int B,
                                   int T, int D, float *dword, float *dpos, float *dtype) {
    double t0 = cuda_prof_begin(be);
    const size_t total = (size_t)B * T * D;
    const double es = act16(be) ? 2.0 : 4.0, tables = (dword != nullptr) + (dtype != nullptr);
    cudaStream_t s = cuda_stream(be);
    // The scatter's extent (vocabulary rows) is not known here: the whole allocations count as written.
    if (dword) cuda_fp32_wrote_alloc(be, dword);
    if (dtype) cuda_fp32_wrote_alloc(be, dtype);
    if (dpos) cuda_fp32_wrote(be, dpos, (size_t)T * D * sizeof(float));
    if (total && (dword || dtype)) {
        const MheCost cost = mhe_cost(tables * total, es * total + 8.0 * tables * total + 4.0 * (type_ids ? 2.0 : 1.0) * B * T);
        if (act16(be))
            MHE_LAUNCH(embedding_scatter_kernel<__nv_bfloat16>, cuda_grid_for(total), MHE_BLOCK, 0, s, cost)(ab(dout), ids, type_ids, B, T, D, dword, dtype);
        else
            MHE_LAUNCH(embedding_scatter_kernel<float>, cuda_grid_for(total), MHE_BLOCK, 0, s, cost)(af(dout), ids, type_ids, B, T, D, dword, dtype);
    }
    CUDA_CHECK_LAUNCH();
    if (total && dpos) {
        const MheCost cost = mhe_cost((double)total, es * total + 8.0 * T * D);
        if (act16(be))
            MHE_LAUNCH(embedding_pos_kernel<__nv_bfloat16>, cuda_grid_for((size_t)T * D), MHE_BLOCK, 0, s, cost)(ab(dout), B, T, D, dpos);
        else
            MHE_LAUNCH(embedding_pos_kernel<float>, cuda_grid_for((size_t)T * D), MHE_BLOCK, 0, s, cost)(af(dout), B, T, D, dpos);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

// Row gather / scatter: the MLM head runs on the scored rows only (ops.h).  One element per
// thread of a grid-stride loop; rows are distinct for the scatter, so no atomics.  Elements move
// unchanged, in the activations' type.
template <typename E>
__global__ void gather_rows_kernel(const E *src, const int32_t *rows, int M, int C, E *dst, __nv_bfloat16 *dstb) {
    GRID_STRIDE(i, (size_t)M * C) {
        const E v = src[(size_t)rows[i / C] * C + i % C];
        dst[i] = v;
        if (dstb) dstb[i] = __float2bfloat16(ld_float(&v, 0));
    }
}
template <typename E>
__global__ void scatter_rows_kernel(const E *src, const int32_t *rows, int M, int C, E *dst) {
    GRID_STRIDE(i, (size_t)M * C) dst[(size_t)rows[i / C] * C + i % C] = src[i];
}
static void act_gather_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst, int src_rows) {
    (void)src_rows;  // only the rows named are read
    double t0 = cuda_prof_begin(be);
    const size_t total = (size_t)M * C;
    cudaStream_t st = cuda_stream(be);
    if (!total) {
    } else if (act16(be)) {
        MHE_LAUNCH(gather_rows_kernel<__nv_bfloat16>, cuda_grid_for(total), MHE_BLOCK, 0, st, mhe_cost(0, 4.0 * total + 4.0 * M))(ab(src), rows, M, C, ab(dst), nullptr);
    } else {
        __nv_bfloat16 *dstb = cuda_fp32_copy_out(be, af(dst), total);
        MHE_LAUNCH(gather_rows_kernel<float>, cuda_grid_for(total), MHE_BLOCK, 0, st, with_bf16_store(mhe_cost(0, 8.0 * total + 4.0 * M), dstb, total))(af(src), rows, M, C, af(dst), dstb);
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}
static void act_scatter_rows(Backend *be, const Act *src, const int32_t *rows, int M, int C, Act *dst, int dst_rows) {
    double t0 = cuda_prof_begin(be);
    const size_t total = (size_t)M * C;
    cudaStream_t st = cuda_stream(be);
    if (!total) {
    } else if (act16(be)) {
        MHE_LAUNCH(scatter_rows_kernel<__nv_bfloat16>, cuda_grid_for(total), MHE_BLOCK, 0, st, mhe_cost(0, 4.0 * total + 4.0 * M))(ab(src), rows, M, C, ab(dst));
    } else {
        cuda_fp32_wrote(be, dst, (size_t)dst_rows * C * sizeof(float));
        MHE_LAUNCH(scatter_rows_kernel<float>, cuda_grid_for(total), MHE_BLOCK, 0, st, mhe_cost(0, 8.0 * total + 4.0 * M))(af(src), rows, M, C, af(dst));
    }
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_OTHER, t0, 0);
}

// Per-block partial sums of x² in double (warp shuffles + shared memory).
__global__ void sum_squares_kernel(const float *x, size_t n, double *partials) {
    MHE_SHARED(double, buf, [32]);
    double s = 0;
    GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    s = block_sum(s, buf);
    if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
static double cuda_sum_squares(Backend *be, const float *x, size_t n) {
    double t0 = cuda_prof_begin(be);
    CudaCtx *c = cuda_ctx(be);
    if (!n) return 0.0;
    cuda_colsum_flush(be);  // the gradient norm reads what waits
    MHE_LAUNCH(sum_squares_kernel, CUDA_SUM_BLOCKS, MHE_BLOCK, 0, c->stream, mhe_cost_blocks(2.0 * n, 4.0 * n + 8.0 * CUDA_SUM_BLOCKS, CUDA_SUM_BLOCKS))(x, n, c->partials);
    CUDA_CHECK_LAUNCH();
    const size_t pb = CUDA_SUM_BLOCKS * sizeof(double);
    if (mhe_cost_record("memcpy d2h", MheCost{0, 0, (double)pb, (double)pb, 0}))
        CUDA_CHECK(cudaMemcpyAsync(c->host_partials, c->partials, pb, cudaMemcpyDeviceToHost, c->stream));
    cuda_stream_sync(be, "sum_squares");
    double s = 0;
    for (int b = 0; b < CUDA_SUM_BLOCKS; b++) s += c->host_partials[b];
    cuda_prof_end(be, OPC_OTHER, t0, 0);
    return s;
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

// The op table's signatures (ops.h's Act for activations) over the fp32 implementations above.
static void act_bias_add(Backend *be, Act *y, const float *bias, int N, int C) { cuda_bias_add(be, af(y), bias, N, C); }
static void act_bias_backward(Backend *be, const Act *dy, int N, int C, float *dbias) {
    cuda_bias_backward(be, af(dy), N, C, dbias);
}
static void act_add(Backend *be, const Act *a, const Act *b, Act *out, size_t n) { cuda_add(be, af(a), af(b), af(out), n); }
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
static void act_gelu_forward(Backend *be, GeluKind kind, const Act *x, Act *y, size_t n) {
    cuda_gelu_forward(be, kind, af(x), af(y), n);
}
static void act_gelu_backward(Backend *be, GeluKind kind, const Act *x, const Act *dy, Act *dx, size_t n) {
    cuda_gelu_backward(be, kind, af(x), af(dy), af(dx), n);
}
static void act_dropout(Backend *be, const Act *x, Act *y, size_t n, float p, uint64_t seed, uint64_t offset) {
    cuda_dropout(be, af(x), af(y), n, p, seed, offset);
}
void cuda_install_elementwise(Backend *be) {
    be->bias_add = act_bias_add;
    be->bias_backward = act_bias_backward;
    be->add = act_add;
    be->axpy = cuda_axpy;
    be->scale = cuda_scale;
    be->add_scalar = cuda_add_scalar;
    be->mul = cuda_mul;
    be->mul_acc = cuda_mul_acc;
    be->head_expand = act_head_expand;
    be->head_expand_backward = act_head_expand_backward;
    be->head_expand_backward_prod = act_head_expand_backward_prod;
    be->head_scales = cuda_head_scales;
    be->gelu_forward = act_gelu_forward;
    be->gelu_backward = act_gelu_backward;
    be->tanh_forward = act_tanh_forward;
    be->tanh_backward = act_tanh_backward;
    be->dropout = act_dropout;
    be->gather_rows = act_gather_rows;
    be->scatter_rows = act_scatter_rows;
    be->embedding_forward = act_embedding_forward;
    be->embedding_backward = act_embedding_backward;
    be->sum_squares = cuda_sum_squares;
    be->adamw_update = cuda_adamw_update;
    be->lamb_direction = cuda_lamb_direction;
}
