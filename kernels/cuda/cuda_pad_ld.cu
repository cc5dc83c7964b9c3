// defines: linear_forward_ld / linear_backward_ld, the vocabulary head with rows ldy apart.
// The vocabulary head with its rows ldy apart (ops.h linear_forward_ld / linear_backward_ld, ldy =
// ops_head_ld: the width rounded up to 64 elements in bf16).  cuBLAS and cuBLASLt take their
// Hopper kernels only for 16-byte-aligned leading dimensions and, for GPT-2's 50257, only with
// the vocabulary dimension itself a multiple of 8; with 30522 as the leading dimension they fell
// to alignment-1 CUTLASS kernels and a CUDA-core magma kernel on the H200 (CALIBRATION.md run 4:
// 5.5-150 TFLOP/s, 14 ms of BERT-base's step and 31 ms of GPT-2 small's, against 300-600 TFLOP/s
// for the aligned GEMMs of the same step).
//
// The model keeps the logits in rows of ldy, so nothing is copied: the weight's bf16 copy gains
// zero rows up to ldy (and the bias zeros), the forward's product is ldy wide and writes the zero
// columns itself; the backward's dx runs K = ldy over dy's zero columns (cross_entropy_backward
// writes them) and the zero rows, and dW keeps `out` rows, reading dy with leading dimension ldy
// (as two products: the rows up to a multiple of 64, then the rest).
// The values are the unpadded product's: the padding adds zeros.  fp32 (and a product cuBLASLt has
// no plan for) runs the unpadded width into the wider rows.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

// y[i] = x[i] for i < n, 0 up to np: a bf16 copy grown by zeros.
__global__ void pad_tail_kernel(const __nv_bfloat16 *__restrict__ x, size_t n, __nv_bfloat16 *__restrict__ y,
                                size_t np) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < np; i += (size_t)blockDim.x * gridDim.x)
        y[i] = i < n ? x[i] : __float2bfloat16(0.0f);
}

// The bf16 copy of src [n] (wc: its allocation's; nullptr: rounded here) grown by zeros to np, into dst.
static void padded_copy(Backend *be, const float *src, const __nv_bfloat16 *wc, size_t n, __nv_bfloat16 *dst,
                        size_t np) {
    if (!wc) {  // not the backend's memory: rounded in place, then the tail
        cuda_round_bf16(be, src, dst, n);
        wc = dst;
    }
    const double t0 = cuda_prof_begin(be);
    MHE_LAUNCH(pad_tail_kernel, cuda_grid_for(np), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 2.0 * n + 2.0 * np))(
        wc, n, dst, np);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_MATMUL, t0, 0);
}

#if defined(MHE_CUDA_EMU)
// The emulation checks a kept padded copy against the weight's current copy before it is reused.
static void check_kept(Backend *be, const __nv_bfloat16 *kept, const __nv_bfloat16 *wc, size_t n, size_t np) {
    if (mhe_cost_dry_run()) return;
    CUDA_CHECK(cudaStreamSynchronize(cuda_stream(be)));
    for (size_t i = 0; i < np; i++) {
        const float want = i < n ? __bfloat162float(wc[i]) : 0.0f, got = __bfloat162float(kept[i]);
        if (!(want == got) && !(want != want && got != got))
            mhe_fatal("cuda_pad_ld: the kept padded head weight is stale at %zu (%g vs %g)", i, (double)got,
                      (double)want);
    }
}
#endif

// One of the head's padded operands (W or b, slot 0 or 1): kept from an earlier call while its
// allocation's copy has not changed (the forward and the backward of a step, and every micro-batch
// of it, share one padding pass), else made now.
static void pad_operand(Backend *be, int slot, const float *src, size_t n, __nv_bfloat16 *dst, size_t np,
                        bool same_shape) {
    CudaCtx *c = cuda_ctx(be);
    const __nv_bfloat16 *wc = cuda_weight_copy(be, src, n);  // first: making it current changes its version
    const uint64_t v = wc ? cuda_weight_copy_version(be, src) : 0;
    if (v && same_shape && c->pad_of[slot] == src && c->pad_version[slot] == v) {
#if defined(MHE_CUDA_EMU)
        check_kept(be, dst, wc, n, np);
#endif
        return;
    }
    padded_copy(be, src, wc, n, dst, np);
    c->pad_of[slot] = v ? src : nullptr;
    c->pad_version[slot] = v;
}

// W [out, in] as bf16 [ldy, in] with zero rows, and b (when given) as bf16 [ldy] after it, at a
// 16-element boundary.
static const __nv_bfloat16 *padded_weight(Backend *be, const float *W, const float *b, int out, int in, int ldy,
                                          const __nv_bfloat16 **bias) {
    CudaCtx *c = cuda_ctx(be);
    const size_t np = (size_t)ldy * in, at = (np + 15) / 16 * 16, need = at + (size_t)ldy;  // room for a bias
    if (need > c->pad_weight_elems) c->pad_of[0] = c->pad_of[1] = nullptr;  // regrown: nothing kept
    __nv_bfloat16 *wp = cuda_grow(be, c->pad_weight, c->pad_weight_elems, need);
    const bool same = c->pad_shape[0] == out && c->pad_shape[1] == in && c->pad_shape[2] == ldy;
    c->pad_shape[0] = out, c->pad_shape[1] = in, c->pad_shape[2] = ldy;
    pad_operand(be, 0, W, (size_t)out * in, wp, np, same);
    if (b) pad_operand(be, 1, b, (size_t)out, wp + at, (size_t)ldy, same);
    if (bias) *bias = b ? wp + at : nullptr;
    return wp;
}

// y[r, c] += b[c] (b may be NULL) for c < cols, y[r, c] = 0 for cols <= c < ld.
template <typename T>
__global__ void bias_pad_kernel(T *__restrict__ y, size_t ld, const float *__restrict__ b, size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * ld; i += (size_t)blockDim.x * gridDim.x) {
        const size_t c = i % ld;
        if (c >= cols)
            store_dual(y, nullptr, i, 0.0f);
        else if (b)
            store_dual(y, nullptr, i, ld_float(y, i) + b[c]);
    }
}

static void check_ld(const char *op, int out, int ldy) {
    if (ldy < out) mhe_fatal("%s: row stride %d below the width %d", op, ldy, out);
}

static void act_linear_forward_ld(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                                  int ldy, Act *y) {
    check_ld("linear_forward_ld", out, ldy);
    if (ldy == out) {
        be->linear_forward(be, x, W, b, N, in, out, y);
        return;
    }
    if (N <= 0) return;
    if (act16(be)) {
        const __nv_bfloat16 *bp;
        const __nv_bfloat16 *wp = padded_weight(be, W, b, out, in, ldy, &bp);
        mhe_cost_gemm_lds_aligned();
        double t0 = cuda_prof_begin(be);
        if (b && cuda_act_linear_forward_padded(be, ab(x), wp, bp, N, in, ldy, ab(y))) {
            cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * ldy * in);
            return;
        }
        if (!b) {
            be->matmul(be, 0, 1, N, ldy, in, 1.0f, mat_act(x, in), mat_act(reinterpret_cast<const Act *>(wp), in),
                       0.0f, out_act(y, ldy));
            return;
        }
    }
    // fp32, or no cuBLASLt plan: the unpadded product into the wide rows, then the bias and zeros.
    be->matmul(be, 0, 1, N, out, in, 1.0f, mat_act(x, in), mat_f32(W, in), 0.0f, out_act(y, ldy));
    const double t0 = cuda_prof_begin(be);
    const size_t n = (size_t)N * ldy, el = act16(be) ? 2 : 4;
    const MheCost cost = mhe_cost((double)N * out, 2.0 * el * N * out + el * N * (ldy - out));
    if (act16(be))
        MHE_LAUNCH(bias_pad_kernel<__nv_bfloat16>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
            ab(y), ldy, b, N, out);
    else
        MHE_LAUNCH(bias_pad_kernel<float>, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), cost)(
            af(y), ldy, b, N, out);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_NORM_ACT, t0, 0);
}

// dW[rows, in] (+)= dyᵀ x over `rows` columns of dy (rows ldy apart), db += their sums: one BGRADB
// GEMM in bf16, else the product and the bias kernel.  aligned: the rows are a multiple of 64.
static void dw_rows(Backend *be, const Act *dy, const Act *x, int N, int in, int rows, int ldy, float *dW, float *db,
                    int dW_zero, bool aligned) {
    const double t0 = cuda_prof_begin(be);
    if (act16(be)) {
        // The mark holds for whichever product records next: the BGRADB GEMM records only with a plan.
        if (aligned) mhe_cost_gemm_lds_aligned();
        if (db && cuda_act_linear_dw(be, ab(dy), ab(x), N, in, rows, dW, db, dW_zero != 0, ldy)) {
            cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * N * in * rows);
            return;
        }
    }
    be->matmul(be, 1, 0, rows, in, N, 1.0f, mat_act(dy, ldy), mat_act(x, in), dW_zero ? 0.0f : 1.0f,
               out_f32(dW, in));
    if (!db) return;
    if (act16(be)) cuda_act_bias_backward_ld(be, dy, N, rows, ldy, db);
    else cuda_bias_backward_ld(be, af(dy), N, rows, ldy, db);
}

static void act_linear_backward_ld(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
                                   int ldy, Act *dx, int accumulate, float *dW, float *db, int dW_zero) {
    check_ld("linear_backward_ld", out, ldy);
    if (ldy == out) {
        be->linear_backward(be, dy, x, W, N, in, out, dx, accumulate, dW, db, dW_zero);
        return;
    }
    if (dW_zero) cuda_check_dw_zero(be, dW, (size_t)out * in, db, db ? (size_t)out : 0, "linear_backward_ld");
    if (N <= 0) return;
    if (dx) {
        if (act16(be)) {  // K = ldy: dy's zero columns meet the weight's zero rows
            const __nv_bfloat16 *wp = padded_weight(be, W, nullptr, out, in, ldy, nullptr);
            mhe_cost_gemm_lds_aligned();
            be->matmul(be, 0, 0, N, in, ldy, 1.0f, mat_act(dy, ldy), mat_act(reinterpret_cast<const Act *>(wp), in),
                       accumulate ? 1.0f : 0.0f, out_act(dx, in));
        } else {
            be->matmul(be, 0, 0, N, in, out, 1.0f, mat_act(dy, ldy), mat_f32(W, in), accumulate ? 1.0f : 0.0f,
                       out_act(dx, in));
        }
    }
    // dW [out, in] keeps `out` rows (the gradient is not padded), its leading dimensions aligned.
    // An odd row count alone kept cuBLAS's heuristic on sm80 CUTLASS for GPT-2's dW (CALIBRATION.md
    // runs 5-6: 3.4 ms a step), so the rows run as two products: the largest multiple of 64 (dy's
    // columns and dW's rows from the row start, 128-byte aligned) and the rest (under 64 rows, priced
    // as the unaligned GEMM it is).
    const int head = out / 64 * 64;
    if (head > 0) dw_rows(be, dy, x, N, in, head, ldy, dW, db, dW_zero, true);
    if (out > head)
        dw_rows(be, act_cat(be, dy, (size_t)head), x, N, in, out - head, ldy, dW + (size_t)head * in,
                db ? db + head : nullptr, dW_zero, false);
}

void cuda_install_linear_ld(Backend *be) {
    be->linear_forward_ld = act_linear_forward_ld;
    be->linear_backward_ld = act_linear_backward_ld;
}
