// Linear layers whose activation rows are not a whole number of 16-byte units in bf16 (out % 8):
// the vocabulary heads (BERT 30522, GPT-2 50257).  cuBLAS and cuBLASLt take their Hopper
// kernels only for 16-byte-aligned leading dimensions; with a leading dimension of 30522 they
// fell to alignment-1 CUTLASS kernels and a CUDA-core magma kernel on the H200 (CALIBRATION.md
// run 4: 5.5-150 TFLOP/s, 14 ms of BERT-base's step and 31 ms of GPT-2 small's, against 300-600
// TFLOP/s for the aligned GEMMs of the same step).
//
// Here the vocabulary dimension is padded to a multiple of 8: the weight's bf16 copy gains zero
// rows, the forward's product lands in a row-padded scratch (fp32 when a bias follows, added before
// the one rounding) and one copy packs it into y; the backward copies dy in with zero columns, and
// dx (K padded) and dW (leading dimension padded) read it from there.  Rows go in chunks so that
// the scratch stays at most kChunkElems (128 MiB of bf16) whatever the batch.  The values are the
// unpadded path's (the padding adds zeros); dW's and db's fp32 sums over the rows are split at the
// chunk boundaries.
#include <algorithm>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_internal.h"

static constexpr size_t kChunkElems = 64u << 20;
// Below this many elements the copies cost more than the slow kernel loses.
static constexpr size_t kMinElems = 1u << 16;

static size_t padded(int out) { return ((size_t)out + 7) / 8 * 8; }

static bool wanted(const Backend *be, int N, int out) {
    return be->act == DT_BF16 && out % 8 != 0 && (size_t)N * out >= kMinElems;
}

// Rows in one chunk: as many whole groups of 8 as fit in kChunkElems (the whole batch when it fits),
// or fewer where the test seam (cuda_pad_chunk_rows) caps them.
static size_t chunk_rows(Backend *be, int N, int out) {
    const size_t cap = cuda_ctx(be)->pad_chunk_rows;
    size_t rows = std::max<size_t>(8, kChunkElems / padded(out) / 8 * 8);  // whole 16-byte row groups
    if (cap) rows = std::min(rows, cap);
    return std::min(rows, (size_t)N);
}

// y[r, c] = x[r, c] between row lengths lx and ly over `cols` columns; the padding columns of
// a padded destination are zeroed (nothing reads them, but they are then defined).
__global__ void pad_copy_kernel(const __nv_bfloat16 *__restrict__ x, size_t lx, __nv_bfloat16 *__restrict__ y,
                                size_t ly, size_t rows, size_t cols) {
    const size_t w = ly > cols ? ly : cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * w; i += (size_t)blockDim.x * gridDim.x) {
        const size_t r = i / w, c = i % w;
        if (c < cols)
            y[r * ly + c] = x[r * lx + c];
        else if (c < ly)
            y[r * ly + c] = __float2bfloat16(0.0f);
    }
}

static void pad_copy(Backend *be, const __nv_bfloat16 *x, size_t lx, __nv_bfloat16 *y, size_t ly, size_t rows,
                     size_t cols) {
    const double t0 = cuda_prof_begin(be);
    const size_t n = rows * std::max(ly, cols);
    MHE_LAUNCH(pad_copy_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 4.0 * rows * cols))(
        x, lx, y, ly, rows, cols);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_MATMUL, t0, 0);
}

static __nv_bfloat16 *scratch(Backend *be, size_t elems) {
    CudaCtx *c = cuda_ctx(be);
    return cuda_grow(be, c->pad_scratch, c->pad_scratch_elems, elems);
}

static Act *as_act(__nv_bfloat16 *p) { return reinterpret_cast<Act *>(p); }
static const Act *as_act(const __nv_bfloat16 *p) { return reinterpret_cast<const Act *>(p); }

// y[i] = x[i] for i < n, 0 up to np: W's bf16 copy [out, in] grown to [padded(out), in] with zero
// rows, so the products run with the vocabulary dimension a multiple of 8 too (cuBLAS still took
// alignment-1 kernels on the H200 for GPT-2's odd 50257 with aligned leading dimensions).
__global__ void pad_tail_kernel(const __nv_bfloat16 *__restrict__ x, size_t n, __nv_bfloat16 *__restrict__ y,
                                size_t np) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < np; i += (size_t)blockDim.x * gridDim.x)
        y[i] = i < n ? x[i] : __float2bfloat16(0.0f);
}
static const __nv_bfloat16 *padded_weight(Backend *be, const float *W, int out, int in) {
    CudaCtx *c = cuda_ctx(be);
    const size_t n = (size_t)out * in, np = padded(out) * in;
    __nv_bfloat16 *wp = cuda_grow(be, c->pad_weight, c->pad_weight_elems, np);
    const __nv_bfloat16 *wc = cuda_weight_copy(be, W, n);
    if (!wc) {  // not the backend's memory: rounded in place, then the tail
        cuda_round_bf16(be, W, wp, n);
        wc = wp;
    }
    const double t0 = cuda_prof_begin(be);
    MHE_LAUNCH(pad_tail_kernel, cuda_grid_for(np), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(0, 2.0 * n + 2.0 * np))(
        wc, n, wp, np);
    CUDA_CHECK_LAUNCH();
    cuda_prof_end(be, OPC_MATMUL, t0, 0);
    return wp;
}

// y[r, c] = bf16(x[r, c] + b[c]) from the fp32 product: the bias added before the one rounding,
// as cuBLASLt's BIAS epilogue does.
__global__ void pack_bias_kernel(const float *__restrict__ x, size_t lx, const float *__restrict__ b,
                                 __nv_bfloat16 *__restrict__ y, size_t rows, size_t cols) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < rows * cols; i += (size_t)blockDim.x * gridDim.x) {
        const size_t r = i / cols, c = i % cols;
        y[i] = __float2bfloat16(x[r * lx + c] + b[c]);
    }
}

bool cuda_pad_linear_forward(Backend *be, const Act *x, const float *W, const float *b, int N, int in, int out,
                             Act *y) {
    if (!wanted(be, N, out)) return false;
    const size_t ld = padded(out), step = chunk_rows(be, N, out);
    const __nv_bfloat16 *wp = padded_weight(be, W, out, in);
    // With a bias the product stays fp32 until the bias is in (two bf16 scratch elements per value).
    __nv_bfloat16 *P = scratch(be, step * ld * (b ? 2 : 1));
    for (size_t r0 = 0; r0 < (size_t)N; r0 += step) {
        const int rows = (int)std::min(step, (size_t)N - r0);
        const MatIn xr = mat_act(as_act(ab(x) + r0 * in), in), wr = mat_act(as_act(wp), in);
        if (b) {
            float *P32 = reinterpret_cast<float *>(P);
            mhe_cost_gemm_lds_aligned();
            be->matmul(be, 0, 1, rows, (int)ld, in, 1.0f, xr, wr, 0.0f, out_f32(P32, (int)ld));
            const double t0 = cuda_prof_begin(be);
            const size_t n = (size_t)rows * out;
            MHE_LAUNCH(pack_bias_kernel, cuda_grid_for(n), MHE_BLOCK, 0, cuda_stream(be), mhe_cost(n, 6.0 * n))(
                P32, ld, b, ab(y) + r0 * out, rows, out);
            CUDA_CHECK_LAUNCH();
            cuda_prof_end(be, OPC_MATMUL, t0, 0);
        } else {
            mhe_cost_gemm_lds_aligned();
            be->matmul(be, 0, 1, rows, (int)ld, in, 1.0f, xr, wr, 0.0f, out_act(as_act(P), (int)ld));
            pad_copy(be, P, ld, ab(y) + r0 * out, out, rows, out);
        }
    }
    return true;
}

bool cuda_pad_linear_backward(Backend *be, const Act *dy, const Act *x, const float *W, int N, int in, int out,
                              Act *dx, int accumulate, float *dW, float *db) {
    if (!wanted(be, N, out)) return false;
    const size_t ld = padded(out), step = chunk_rows(be, N, out);
    const __nv_bfloat16 *wp = dx ? padded_weight(be, W, out, in) : nullptr;
    __nv_bfloat16 *P = scratch(be, step * ld);
    for (size_t r0 = 0; r0 < (size_t)N; r0 += step) {
        const int rows = (int)std::min(step, (size_t)N - r0);
        const __nv_bfloat16 *xr = ab(x) + r0 * in;
        pad_copy(be, ab(dy) + r0 * out, out, P, ld, rows, out);  // zero columns past out: K runs to ld
        if (dx) {
            mhe_cost_gemm_lds_aligned();
            be->matmul(be, 0, 0, rows, in, (int)ld, 1.0f, mat_act(as_act(P), (int)ld), mat_act(as_act(wp), in),
                       accumulate ? 1.0f : 0.0f, out_act(as_act(ab(dx) + r0 * in), in));
        }
        // dW [out, in]: out stays the row count (dW is not padded); its leading dimensions are
        // aligned.  The mark holds for whichever of the two forms records the product: the BGRADB
        // GEMM records only once it has a plan.
        const double t0 = cuda_prof_begin(be);
        mhe_cost_gemm_lds_aligned();
        if (db && cuda_act_linear_dw(be, P, xr, rows, in, out, dW, db, (int)ld)) {
            cuda_prof_end(be, OPC_MATMUL, t0, 2.0 * rows * in * out);
            continue;
        }
        be->matmul(be, 1, 0, out, in, rows, 1.0f, mat_act(as_act(P), (int)ld), mat_act(as_act(xr), in), 1.0f,
                   out_f32(dW, in));
        if (db) be->bias_backward(be, as_act(ab(dy) + r0 * out), rows, out, db);
    }
    return true;
}

extern "C" void cuda_pad_chunk_rows(Backend *be, size_t rows) { cuda_ctx(be)->pad_chunk_rows = rows; }
