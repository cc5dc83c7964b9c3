// Run-time ISA dispatch of the CPU backend (cpu_isa.c).  Every kernels/cpu/*.c file except
// cpu_backend.c, cpu_gemm.c, cpu_weights.c and cpu_isa.c (backend creation, the oneDNN primitive
// cache and the weights' bf16 copies it reads, the dispatch: once per process, per backend or per
// micro-batch, nothing per activation element) and cpu_amx.c (its functions name their own
// targets; only the avx512 level calls them) is compiled once per x86-64
// level (CMakeLists.txt: baseline = x86-64-v2, avx2 = x86-64-v3, avx512 = x86-64-v4), with
// MHE_CPU_ISA_SUFFIX naming the level.  The functions those files share are renamed below to
// carry the suffix, so the copies link side by side and each level's ops call their own level's
// helpers; a new shared function missing from this list is a "multiple definition" link error,
// not a silent mix of levels.  The ops themselves stay static; a level is installed whole by
// cpu_install_ops_<level>, chosen once at backend creation.
#ifndef MHE_KERNELS_CPU_ISA_H
#define MHE_KERNELS_CPU_ISA_H

#include "kernels/ops.h"

#ifdef MHE_CPU_ISA_SUFFIX
#define MHE_CPU_ISA_GLUE2(f, s) f##_##s
#define MHE_CPU_ISA_GLUE(f, s) MHE_CPU_ISA_GLUE2(f, s)
#define MHE_CPU_ISA_NAME(f) MHE_CPU_ISA_GLUE(f, MHE_CPU_ISA_SUFFIX)
#define cpu_install_ops MHE_CPU_ISA_NAME(cpu_install_ops)
#define cpu_install_linear MHE_CPU_ISA_NAME(cpu_install_linear)
#define cpu_install_elementwise MHE_CPU_ISA_NAME(cpu_install_elementwise)
#define cpu_install_layernorm MHE_CPU_ISA_NAME(cpu_install_layernorm)
#define cpu_install_activation MHE_CPU_ISA_NAME(cpu_install_activation)
#define cpu_install_embedding MHE_CPU_ISA_NAME(cpu_install_embedding)
#define cpu_install_loss MHE_CPU_ISA_NAME(cpu_install_loss)
#define cpu_install_attention MHE_CPU_ISA_NAME(cpu_install_attention)
#define cpu_install_attention_ref MHE_CPU_ISA_NAME(cpu_install_attention_ref)
#define cpu_attention_affine_grads MHE_CPU_ISA_NAME(cpu_attention_affine_grads)
#define cpu_install_optim MHE_CPU_ISA_NAME(cpu_install_optim)
#define cpu_install_reduce MHE_CPU_ISA_NAME(cpu_install_reduce)
#define softmax_block MHE_CPU_ISA_NAME(softmax_block)
#define probs_block MHE_CPU_ISA_NAME(probs_block)
#define ds_block MHE_CPU_ISA_NAME(ds_block)
#endif

// One level's ops (cpu_install_ops.c, compiled per level): fills every op of the table except
// the memory ops, which cpu_backend.c installs.
void cpu_install_ops(Backend *be);

// The level a new backend runs (cpu_isa.c): MHE_CPU_ISA when set (a level this CPU lacks, or an
// unknown name, is fatal), else the highest this CPU supports.  Returns the level's installer
// and sets *name to the level's name.
typedef void (*CpuInstallFn)(Backend *be);
CpuInstallFn cpu_isa_choose(const char **name);

#endif
