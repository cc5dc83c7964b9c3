// defines: the embeddings: word + position (+ token type) rows forward, their scatter-add backward
// (threads split the columns, so rows hit by several tokens never race).
#include "kernels/cpu/cpu_internal.h"

static void cpu_embedding_forward(Backend *be, const int32_t *ids, const int32_t *type_ids,
                                  const float *word, const float *pos, const float *type, int B,
                                  int T, int D, Act *out) {
    double t0 = cpu_prof_begin(be);
    const int bf = act_bf16(be);
#pragma omp parallel for schedule(dynamic, 8) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *w = word + (size_t)ids[bt] * D, *p = pos + (size_t)t * D;
        const float *ty = type ? type + (size_t)(type_ids ? type_ids[bt] : 0) * D : NULL;
        if (bf) {
            uint16_t *o = act_h(out) + (size_t)bt * D;
            for (int c = 0; c < D; c++) o[c] = to_bf16(w[c] + p[c] + (ty ? ty[c] : 0.0f));
        } else {
            float *o = act_f(out) + (size_t)bt * D;
            for (int c = 0; c < D; c++) o[c] = w[c] + p[c] + (ty ? ty[c] : 0.0f);
        }
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

// g[0, w) of one row of dout as fp32: the row itself (fp32) or its conversion into buf.
static inline const float *dout_block(const Backend *be, const Act *dout, size_t at, int w, float *buf) {
    if (!act_bf16(be)) return act_cf(dout) + at;
    bf16_load(act_ch(dout) + at, (size_t)w, buf);
    return buf;
}

// Scatter-add: threads split the D columns (blocks of 64), so rows hit twice never race.
static void cpu_embedding_backward(Backend *be, const Act *dout, const int32_t *ids,
                                   const int32_t *type_ids, int B, int T, int D, float *dword,
                                   float *dpos, float *dtype) {
    double t0 = cpu_prof_begin(be);
#pragma omp parallel for schedule(dynamic, 1) if ((size_t)B * T * D >= CPU_PARALLEL_MIN_MEM)
    for (int c0 = 0; c0 < D; c0 += 64) {
        const int w = D - c0 < 64 ? D - c0 : 64;
        float buf[64];
        for (int bt = 0; bt < B * T; bt++) {
            const float *g = dout_block(be, dout, (size_t)bt * D + c0, w, buf);
            float *dw = dword + (size_t)ids[bt] * D + c0;
            float *dp = dpos ? dpos + (size_t)(bt % T) * D + c0 : NULL;
            float *dt = dtype ? dtype + (size_t)(type_ids ? type_ids[bt] : 0) * D + c0 : NULL;
            for (int c = 0; c < w; c++) dw[c] += g[c];
            if (dp)
                for (int c = 0; c < w; c++) dp[c] += g[c];
            if (dt)
                for (int c = 0; c < w; c++) dt[c] += g[c];
        }
    }
    cpu_prof_end(be, OPC_OTHER, t0, 0);
}

void cpu_install_embedding(Backend *be) {
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
}
