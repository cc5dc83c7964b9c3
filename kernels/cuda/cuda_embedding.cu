// defines: the embeddings: word + position (+ token type) rows forward; backward by a scatter
// with atomics for the word and type rows (they repeat across tokens) and one thread per column
// of the positions' sums (T·D columns, in order: deterministic).
#include "kernels/cuda/cuda_internal.h"

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

void cuda_install_embedding(Backend *be) {
    be->embedding_forward = act_embedding_forward;
    be->embedding_backward = act_embedding_backward;
}
