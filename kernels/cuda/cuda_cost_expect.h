// defines: the interface of the cost model's expected side (cuda_cost_expect.cu).
// The cost model's "expected" side (kernels/cuda/PERFORMANCE.md "Bound and expected"):
// each recorded call at the efficiency GPUs are measured to reach, next to the roofline bound of
// cuda_cost.cu.  The efficiency table in cuda_cost_expect.cu is the one place real measurements
// change (kernels/cuda/CALIBRATION.md says where each figure comes from).
#ifndef MHE_KERNELS_CUDA_CUDA_COST_EXPECT_H
#define MHE_KERNELS_CUDA_CUDA_COST_EXPECT_H

extern "C" {
#include "kernels/backend_info.h"
}
#include "kernels/cuda/cuda_cost.h"

// A cuBLAS/cuBLASLt GEMM of C[M,N] = A[M,K] B[K,N], `batch` times, moving `bytes`: output tiles
// in waves over the SMs (split-K when the tiles cannot fill them), each tile's K loop at the
// table's share of the per-SM peak plus a fixed cost per tile, never faster than its bytes at the
// streaming share of bandwidth; plus the gap between back-to-back kernels.  `ours`: at our GEMM
// path's measured share of that (the table's gemm_path), else as published for cuBLAS.
double cost_expected_gemm(const GpuSpec *g, int M, int N, int K, int batch, int bf16, double bytes, bool ours,
                          bool lds_aligned = false);
// Any other call (a kernel named `label`, a memset, a copy): its roofline time (the bound without
// the launch) divided by the fraction the table gives that kernel family, at least the shortest
// kernel a GPU runs, plus the gap.  `blocks` as MheCost.blocks.
double cost_expected_kernel(const GpuSpec *g, const char *label, const MheCost &c);

// The GPU's idle time after a host synchronisation: the host wakes and its next launch arrives.
double cost_expected_sync(const GpuSpec *g);

#endif
