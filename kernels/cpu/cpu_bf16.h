// bf16 conversions of the CPU backend, inline so loops that produce a matmul operand (softmax,
// the attention core's dS) can write it in bf16 directly instead of a second rounding pass.
#ifndef MHE_KERNELS_CPU_BF16_H
#define MHE_KERNELS_CPU_BF16_H

#include <stdint.h>
#include <string.h>

// fp32 -> bf16, round to nearest even (NaN stays NaN: its quiet bit is set first).
static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// keep ? to_bf16(v) : 0, with the rounding made for every element and masked: as a conditional
// call GCC kept it a branch at x86-64-v3 (the dropout loops stayed scalar there); the same bits.
// Here because the dropout op (cpu_activation.c) and LayerNorm's fused backward
// (cpu_layernorm.c) must store the same bits.
static inline uint16_t drop_bf16(int keep, float v) { return (uint16_t)(to_bf16(v) & (uint16_t)-(uint16_t)keep); }

#endif
