// The nominal peak MFU is counted against (issues 49 and 50: one rule for true figures): the
// cores' vector multiply-add rate times the clock, at the precision of the run, from the CPU's
// description rather than from a measurement, so a busy machine at start cannot lower it.
#ifndef MHE_TRAINER_PEAK_NOMINAL_H
#define MHE_TRAINER_PEAK_NOMINAL_H

#include <stddef.h>

typedef struct {
    char vendor[32];   // "GenuineIntel", "AuthenticAMD", ...
    int family;        // CPUID family (AMD 25 = Zen 3/4, 26 = Zen 5)
    double mhz;        // clock: cpufreq's maximum where the kernel exposes it, else cpuinfo's "cpu MHz"
    char model[128];   // "model name"
} CpuDesc;

// Parses /proc/cpuinfo's text (its first processor); 0 on success, -1 when it names no clock.
int cpu_desc_parse(const char *cpuinfo, CpuDesc *d);

// FLOP per cycle per core for the matmul library's instruction set (oneDNN's effective ISA name,
// backend_cpu_library: "avx512_core_amx", "avx512_core_bf16", "avx2", ...), fp32 or bf16, and a
// short basis ("2 x 512-bit FMA").  0 when unknown.
//   fp32: FMA ports x lanes x 2.  AVX-512 on Intel: 2 x 16; on AMD Zen 4 (family 25) 512-bit
//   FMAs run as two 256-bit halves: 1 x 16; Zen 5 (family >= 26): 2 x 16.  AVX2: 2 x 8.  Older: 2 x 4.
//   bf16: AMX tiles 1024 (16x32x16 multiply-adds per 16 cycles); AVX-512 bf16 dot products
//   (two multiply-adds per fp32 lane) as fast as the fp32 FMAs on Intel (one port against two),
//   twice as fast on AMD (same ports, twice the work); without native bf16, fp32's rate.
double cpu_flops_per_cycle(const CpuDesc *d, const char *isa, int bf16, char *basis, size_t len);

// cores x flops_per_cycle x GHz, in GFLOP/s.
double peak_nominal_gflops(int cores, double flops_per_cycle, double mhz);

// This process's CPU: the nominal peak in GFLOP/s for `threads` cores running the matmul library's
// ISA `isa`, and a description ("2 cores x 64 FLOP/cycle (2 x 512-bit FMA) x 2.60 GHz") in desc.
// 0 when the CPU or its clock is unknown.
double peak_nominal_cpu(int threads, const char *isa, int bf16, char *desc, size_t len);

// A measured rate above the nominal figure means the cores run faster than the clock the CPU
// reports (a virtual machine shows the base clock; AMD Zen 4 at 2.60 GHz "cpu MHz" measured 224
// GFLOP/s fp32 on 2 cores against a nominal 166): *nominal is raised to `measured` and desc says
// so.  Nothing when the nominal figure is unknown (<= 0) or already above.
void peak_nominal_floor(double *nominal, double measured, char *desc, size_t len);

#endif
