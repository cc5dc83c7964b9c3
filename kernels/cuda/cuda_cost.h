// defines: the cost model's recording interface (MheCost, mhe_cost_record*, MHE_LAUNCH's cost).
// The cost model's recording side (kernels/cuda/README.md "Cost model"): every kernel launch
// (MHE_LAUNCH), cuBLAS call, memset and copy of the backend states its work here, at the place
// it is issued, so a new kernel cannot be left out: MHE_LAUNCH does not compile without a cost.
// Included by cuda_compat.h and emu/cuda_emu.h (host code in both builds).
#ifndef MHE_KERNELS_CUDA_CUDA_COST_H
#define MHE_KERNELS_CUDA_CUDA_COST_H

#include <stddef.h>

// Work of one call: FLOPs on tensor cores, FLOPs on CUDA cores (fp32 pipes; exp/erf/tanh
// count as a few FLOPs each, integer hashing as none), bytes moved in global memory (each
// distinct element once: the working set of a row or tile is assumed to stay in L1/L2), and
// bytes over PCIe (uploads and downloads).
struct MheCost {
    double tc_flops, flops, bytes, host_bytes;
    // Blocks the real build launches when that can be fewer than the GPU's SMs (column kernels
    // over C columns, one block per tensor, ...): the call is priced on that share of the GPU.
    // 0: enough blocks to fill it (grid-stride and row kernels).  Set by the call site because
    // the emulation launches other grids (64-thread blocks, at most 8 per grid-stride loop).
    double blocks;
};
static inline MheCost mhe_cost(double flops, double bytes) { return MheCost{0, flops, bytes, 0, 0}; }
// The same for a kernel whose real grid has `blocks` blocks (see MheCost.blocks).
static inline MheCost mhe_cost_blocks(double flops, double bytes, double blocks) {
    return MheCost{0, flops, bytes, 0, blocks};
}

// Records the call when recording is on; returns whether the work should really run (false
// only in the emulation's record-only mode, where nothing executes and no memory is touched).
bool mhe_cost_record(const char *name, MheCost c);
// A GEMM about to be issued through cuBLAS: C[M,N] (+)= A[M,K] B[K,N], `batch` times, with bf16
// operands (tensor cores) or fp32 (CUDA cores, no TF32); beta != 0 reads C.
// The next gemm recorded has 16-byte-aligned leading dimensions although M, N or K is not a
// multiple of 8 (cuda_pad_ld.cu): the expected time uses the aligned kernels' model.
void mhe_cost_gemm_lds_aligned(void);
bool mhe_cost_record_gemm(int M, int N, int K, int batch, int bf16, int reads_c);
// The same for a cuBLASLt matmul with a fused epilogue (`epilogue` ends the label, e.g. "+bias";
// `epilogue_bytes`: what the epilogue reads or writes besides A, B, C: the bias vector or the
// bias gradient, 4 B per element).
bool mhe_cost_record_gemm_epilogue(int M, int N, int K, int bf16, int reads_c, const char *epilogue,
                                   double epilogue_bytes);
// The same with bf16 operands and a bf16 output (2 B per element of C, not read): the bf16
// activations' matmuls and linear layers (cuda_matmul.cu, cuda_linear.cu).
bool mhe_cost_record_gemm_bf16_out(int M, int N, int K, const char *epilogue, double epilogue_bytes);
// The same reading and writing a bf16 C (beta != 0: accumulating into a bf16 activation).
bool mhe_cost_record_gemm_bf16_acc(int M, int N, int K);
// `batch` products of bf16 operands into a bf16 (c_bf16) or fp32 C, not read (the gemm_bf16
// attention core's per-head products).
bool mhe_cost_record_gemm_bf16_batched(int M, int N, int K, int batch, int c_bf16);
// The emulated cuBLAS asks this before each call: fatal when no mhe_cost_record_gemm preceded
// it (an unrecorded library call), else whether to compute.
bool mhe_cost_take_blas(void);
// The records since the last call belong to op class `op_class` (an OpClass).
void mhe_cost_close_op(int op_class);
// Streams of the timeline (README "Streams and the all-reduce"): the backend issues every call
// above on its one compute stream; the NCCL communicator reduces gradient buckets on its own.
enum { MHE_STREAM_COMPUTE = 0, MHE_STREAM_COMM = 1, MHE_STREAMS = 2 };
// `event` (any stable pointer: the cudaEvent_t) is recorded on `stream` after what was issued
// there so far; a later wait makes `stream` start its next call no earlier than that point.
void mhe_cost_event_record(const void *event, int stream);
void mhe_cost_stream_wait(int stream, const void *event);
// A ring all-reduce of `bytes` over `world` ranks on `stream`; its time is
// 2 (n-1)/n * bytes / bus bandwidth + latency, with n = world or the rank count the
// prediction is asked for (backend_cuda_cost_ranks).  Returns whether to really run it.
bool mhe_cost_record_allreduce(double bytes, int world, int stream);
// A ring collective of `passes` passes over `bytes` (all-reduce 2, reduce or broadcast 1), labelled.
bool mhe_cost_record_collective(const char *label, double passes, double bytes, int world, int stream);
// The host waits for the compute stream to drain (a download it needs, the synchronize op, a
// free): every stream idles from the drain until the host's next launch reaches the GPU.
void mhe_cost_record_sync(const char *why);
// Device allocations, for the peak.
void mhe_cost_alloc(const void *p, size_t bytes);
void mhe_cost_free(const void *p);
// A backend was created: the high-water mark restarts from what is live (CostReport.peak_bytes
// is "since backend creation", so a process creating several backends sees each one's peak).
void mhe_cost_restart_peak(void);
// Record-only mode (emulation only).
bool mhe_cost_dry_run(void);

#endif
