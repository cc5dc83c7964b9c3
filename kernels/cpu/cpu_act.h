// Activation storage of the CPU backend (ops.h's Act): fp32 when Backend.act is DT_F32, bf16
// bits (uint16_t, cpu_bf16.h) when it is DT_BF16.  Ops branch once per call on act_bf16(be) and
// run a loop for each storage type: the fp32 loops are the backend's original ones (results
// bit for bit as before the types existed), the bf16 loops convert on load, compute in fp32 and
// round once per stored element.
#ifndef MHE_KERNELS_CPU_ACT_H
#define MHE_KERNELS_CPU_ACT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/cpu_bf16.h"
#include "kernels/ops.h"

static inline int act_bf16(const Backend *be) { return be->act == DT_BF16; }

// An activation buffer seen as its storage type (the caller has checked act_bf16).
static inline float *act_f(Act *p) { return (float *)p; }
static inline const float *act_cf(const Act *p) { return (const float *)p; }
static inline uint16_t *act_h(Act *p) { return (uint16_t *)p; }
static inline const uint16_t *act_ch(const Act *p) { return (const uint16_t *)p; }

// n bf16 values to fp32 and back (a row an op needs whole in fp32: LayerNorm's row is read
// three times, and its output may alias its input).
static inline void bf16_load(const uint16_t *h, size_t n, float *out) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = from_bf16(h[i]);
}
static inline void bf16_store(const float *x, size_t n, uint16_t *out) {
#pragma omp simd
    for (size_t i = 0; i < n; i++) out[i] = to_bf16(x[i]);
}

// Per-thread fp32 buffers of at least `floats` each, for the bf16 loops that convert whole rows:
// thread t's starts at the returned pointer + t * *stride.  Grown outside parallel regions only
// (call it before the loop); lives until the backend is destroyed.
float *cpu_thread_floats(Backend *be, size_t floats, size_t *stride);

#endif
