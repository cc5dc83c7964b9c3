// Chooses the ISA level of a new CPU backend (cpu_isa.h): the levels this build has, which of
// them the running CPU supports, and the MHE_CPU_ISA override.  Compiled once, for the build's
// baseline, like the rest of the program.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kernels/cpu/cpu_isa.h"

// The installers CMakeLists.txt builds, one per level (cpu_install_ops.c with the suffix).
void cpu_install_ops_baseline(Backend *be);
#if MHE_CPU_ISA_X86
void cpu_install_ops_avx2(Backend *be);
void cpu_install_ops_avx512(Backend *be);
#endif

typedef struct {
    const char *name;
    const char *needs;  // what the level's -march implies, for the error message
    CpuInstallFn install;
} Level;

// Highest first: the default is the first the CPU supports.
static const Level levels[] = {
#if MHE_CPU_ISA_X86
    {"avx512", "x86-64-v4: AVX-512 F, BW, CD, DQ, VL", cpu_install_ops_avx512},
    {"avx2", "x86-64-v3: AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE", cpu_install_ops_avx2},
    {"baseline", "x86-64-v2: SSE4.2, POPCNT, CX16, LAHF", cpu_install_ops_baseline},
#else
    {"baseline", "the build's target", cpu_install_ops_baseline},
#endif
};
enum { LEVELS = sizeof levels / sizeof *levels };

// libgcc's checks include the OS's support (XSAVE state enabled for the ymm / zmm registers),
// not only CPUID.  The level names need GCC >= 12 or Clang >= 16 (CMakeLists.txt checks).
static int supported(int i) {
#if MHE_CPU_ISA_X86
    __builtin_cpu_init();
    switch (i) {
    case 0: return __builtin_cpu_supports("x86-64-v4");
    case 1: return __builtin_cpu_supports("x86-64-v3");
    default: return __builtin_cpu_supports("x86-64-v2");
    }
#else
    (void)i;
    return 1;
#endif
}

static int find(const char *name) {
    for (int i = 0; i < LEVELS; i++)
        if (strcmp(levels[i].name, name) == 0) return i;
    return -1;
}

int backend_cpu_isa_supported(const char *name) {
    const int i = find(name);
    return i >= 0 && supported(i);
}

CpuInstallFn cpu_isa_choose(const char **name) {
    const char *want = getenv("MHE_CPU_ISA");
    if (want && *want) {
        const int i = find(want);
        if (i < 0) {
#if MHE_CPU_ISA_X86
            mhe_fail("MHE_CPU_ISA=%s: expected avx512, avx2 or baseline", want);
#else
            mhe_fail("MHE_CPU_ISA=%s: this build has one level, baseline", want);
#endif
        }
        if (!supported(i)) mhe_fail("MHE_CPU_ISA=%s: this CPU lacks %s", want, levels[i].needs);
        *name = levels[i].name;
        return levels[i].install;
    }
    for (int i = 0; i < LEVELS; i++)
        if (supported(i)) {
            *name = levels[i].name;
            return levels[i].install;
        }
    mhe_fatal("this CPU lacks %s, the oldest level this build runs", levels[LEVELS - 1].needs);
}
