// defines: the fp32 staging of bf16 activations (bf16 mode): Stage, which widens an op's Act
// inputs into fp32 buffers and rounds its Act outputs back, for the ops without a bf16 kernel (the
// attention core off the tensor-core path, cuda_attention.cu), and the widening and rounding
// calls themselves (cuda_act_stage.cu, also the host boundary's upload_act / download_act).
//
// Each Act input is widened into an fp32 staging buffer (a compact [rows, cols] for strided ones),
// the fp32 op runs there, and each Act output is rounded back (a strided one only over its own
// columns, so the slices of one fused buffer stay each other's).  An output that is the same
// buffer as an input shares its staging buffer, which keeps the in-place contracts of ops.h.
#ifndef MHE_KERNELS_CUDA_ACT_STAGE_H
#define MHE_KERNELS_CUDA_ACT_STAGE_H

#include "kernels/cuda/cuda_internal.h"

// y[r * ldy + c] = fp32(x[r * ldx + c]) (widen) and bf16(x[r * ldx + c]) (round, to nearest even)
// for a [rows, cols] matrix, on the backend's stream.
void cuda_act_widen(Backend *be, const __nv_bfloat16 *x, size_t ldx, float *y, size_t ldy, size_t rows, size_t cols);
void cuda_act_round(Backend *be, const float *x, size_t ldx, __nv_bfloat16 *y, size_t ldy, size_t rows, size_t cols);

// The fp32 staging of one op's Act arguments (see the top of this file).  Slot i uses the
// backend's grow-only buffer i, so steady-state steps allocate nothing.
class Stage {
    struct Slot {
        const void *p;
        size_t rows, cols, ld;
        float *f;
        bool out;
    };
    Backend *be;
    OpClass cls;
    Slot slots[ACT_STAGE_SLOTS];
    int n = 0;

    Slot *find(const void *p, size_t rows, size_t cols, size_t ld) {
        for (int i = 0; i < n; i++)
            if (slots[i].p == p && slots[i].rows == rows && slots[i].cols == cols && slots[i].ld == ld) return &slots[i];
        return nullptr;
    }
    Slot *add(const void *p, size_t rows, size_t cols, size_t ld) {
        if (n == ACT_STAGE_SLOTS) mhe_fatal("cuda_act_stage: more than %d staged activations in one op", ACT_STAGE_SLOTS);
        CudaCtx *c = cuda_ctx(be);
        Slot &s = slots[n];
        s = Slot{p, rows, cols, ld, cuda_grow(be, c->stage[n], c->stage_cap[n], rows * cols > 0 ? rows * cols : 1), false};
        n++;
        return &s;
    }

public:
    Stage(Backend *b, OpClass c) : be(b), cls(c) {}
    // An input [rows, cols] with row stride ld, as a compact fp32 [rows, cols] (NULL stays NULL).
    const Act *in(const Act *p, size_t rows, size_t cols, size_t ld) {
        if (!p) return nullptr;
        Slot *s = find(p, rows, cols, ld);
        if (!s) {
            s = add(p, rows, cols, ld);
            cuda_act_widen(be, ab(p), ld, s->f, cols, rows, cols);
        }
        return fa(s->f);
    }
    const Act *in(const Act *p, size_t count) { return in(p, 1, count, count); }
    // An output, rounded back by done(); `read`: the op reads it first (accumulation, rows left
    // untouched).  The same buffer as an input shares that input's staging.
    Act *out(Act *p, size_t rows, size_t cols, size_t ld, bool read) {
        if (!p) return nullptr;
        Slot *s = find(p, rows, cols, ld);
        if (!s) {
            s = add(p, rows, cols, ld);
            if (read) cuda_act_widen(be, ab(p), ld, s->f, cols, rows, cols);
        }
        s->out = true;
        return fa(s->f);
    }
    Act *out(Act *p, size_t count, bool read) { return out(p, 1, count, count, read); }
    void done() {
        for (int i = 0; i < n; i++)
            if (slots[i].out)
                cuda_act_round(be, slots[i].f, slots[i].cols, ab(const_cast<Act *>(static_cast<const Act *>(slots[i].p))),
                         slots[i].ld, slots[i].rows, slots[i].cols);
        mhe_cost_close_op(cls);  // the roundings belong to the op
    }
};

#endif
