// defines: row gather / scatter (ops.h gather_rows, scatter_rows): rows picked by index, moved
// unchanged in the activations' type, fp32 or bf16.
#include "kernels/cuda/cuda_internal.h"

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

void cuda_install_rows(Backend *be) {
    be->gather_rows = act_gather_rows;
    be->scatter_rows = act_scatter_rows;
}
