// Random numbers that depend only on their keys: counter-based, so masks and initial weights
// are the same whatever the number of workers or threads.
#ifndef MHE_COMMON_RNG_H
#define MHE_COMMON_RNG_H

#include <math.h>
#include <stdint.h>

// A strong 64-bit mix (splitmix64 finaliser).
static inline uint64_t rng_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// The value at counter `i` of the stream keyed by (seed, a, b).
static inline uint64_t rng_at(uint64_t seed, uint64_t a, uint64_t b, uint64_t i) {
    return rng_mix64(rng_mix64(rng_mix64(seed ^ rng_mix64(a)) ^ b) + i);
}

// Uniform in [0, 1) from 64 random bits (24-bit float mantissa resolution is not enough
// for masking probabilities over long runs, so use double).
static inline double rng_uniform(uint64_t bits) { return (double)(bits >> 11) * 0x1.0p-53; }

// Sequential generator over a keyed stream.
typedef struct {
    uint64_t seed, a, b, i;
} Rng;

static inline Rng rng_stream(uint64_t seed, uint64_t a, uint64_t b) {
    Rng r = {seed, a, b, 0};
    return r;
}
static inline uint64_t rng_next(Rng *r) { return rng_at(r->seed, r->a, r->b, r->i++); }
static inline double rng_next_uniform(Rng *r) { return rng_uniform(rng_next(r)); }
// Standard normal by Box-Muller (one value per two draws: simple and reproducible).
static inline double rng_next_normal(Rng *r) {
    double u1 = rng_next_uniform(r), u2 = rng_next_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
