// What the CUDA side reports about itself.  Without the CUDA backend these answer "none".
#ifndef MHE_KERNELS_BACKEND_INFO_H
#define MHE_KERNELS_BACKEND_INFO_H

#include <stdio.h>

#include "kernels/ops.h"

int backend_cuda_compiled(void);
int backend_cuda_device_count(void);  // 0 without a GPU or without the backend
void backend_cuda_print_versions(FILE *out);  // cuda runtime, cuBLAS, NCCL lines
// The CUDA backend on GPU `device` (bf16 compute when bf16 != 0).  Without the backend, or
// without a GPU, a clear message and exit status 2.
Backend *backend_cuda_create_for(int device, int bf16);
// runtime.attention_core on backend be: NULL, "" or "auto" (the fastest core serving each layer
// shape), or a core's name (a CUDA backend's; `mhetrain info` lists them).  verbose: the backend
// says once per distinct layer shape which core runs it, and why the faster ones did not.  0
// with a one-line message in err for a name no core has, or a core this process cannot run.
int backend_attention_core_select(Backend *be, const char *name, int verbose, char *err, size_t err_len);
// The CUDA backend's attention cores in auto's order of preference: name, one line of what it
// is, and "available" or why it cannot run here; returns how many (0 without the CUDA backend).
int backend_attention_cores(const char **names, const char **whats, const char **status, int max);
// The dense peak (FLOP/s) of GPU `device`: bf16 tensor cores (bf16 != 0) or fp32 CUDA cores, from
// the data sheets' table (kernels/gpu_peak.h) by device name, or MHE_GPU_PEAK_TFLOPS; 0 when
// unknown (MFU not shown: never an in-process probe).  *card (may be NULL): the card as MFU names
// it ("H100 SXM", "MHE_GPU_PEAK_TFLOPS"), NULL when unknown.
double backend_cuda_peak_flops(int device, int bf16, const char **card);

// Gradient all-reduce on device buffers between GPUs (NCCL, bootstrapped over the MPI
// communicator `mpi_comm`, an MPI_Comm *), with a deadline.  Only for a CUDA backend.
typedef struct DeviceComm DeviceComm;
DeviceComm *device_comm_create(void *mpi_comm, Backend *be, float timeout_s);
void device_comm_allreduce_sum(DeviceComm *c, float *buf, size_t n);
// Overlapped form (kernels/cuda/README.md "Streams and the all-reduce"): start enqueues the sum
// of buf on the communicator's own stream, after the work the backend has issued so far, and
// returns at once; finish orders the backend's later work after every started sum and returns
// when they are complete.
void device_comm_allreduce_start(DeviceComm *c, float *buf, size_t n);
void device_comm_allreduce_finish(DeviceComm *c);
// ZeRO-1 in the same overlapped form: the sum of buf onto rank root's buf (the others' unchanged),
// and root's buf copied into everyone's; both completed by device_comm_allreduce_finish.
void device_comm_reduce_start(DeviceComm *c, float *buf, size_t n, int root);
void device_comm_broadcast_start(DeviceComm *c, float *buf, size_t n, int root);
void device_comm_free(DeviceComm *c);

// ---- The GPU cost model (kernels/cuda/README.md "Cost model") ----
// Published figures of one GPU: dense bf16 tensor-core and fp32 CUDA-core FLOP/s, memory and
// PCIe bandwidth (bytes/s), seconds per kernel launch.
typedef struct {
    const char *name;  // "a100", "h100", "h200" (SXM)
    double bf16_flops, fp32_flops, bytes_per_s, pcie_bytes_per_s, launch_s;
    // NCCL all-reduce between the GPUs of one NVLink node: bus bandwidth (bytes/s, the
    // nccl-tests "busbw" a ring reaches) and the fixed cost of one call (seconds).
    double allreduce_bus_bytes_per_s, allreduce_latency_s;
    // Streaming multiprocessors: a kernel whose grid has fewer blocks than this runs on that
    // share of the GPU (its FLOPs and bandwidth scaled down).
    int sms;
} GpuSpec;
const GpuSpec *gpu_spec_find(const char *name);  // NULL: unknown (or no CUDA backend)

// Calls grouped by label (kernel name; gemms with their shape) and op class.
typedef struct {
    char label[96];
    int op_class;  // OpClass
    long calls;
    double seconds, tc_flops, flops, bytes;
    double compute_seconds, memory_seconds, launch_seconds;  // the terms of `seconds`
    double expected_seconds;  // at the efficiency table's rates (cuda_cost_expect.cu)
} CostEntry;
#define COST_TOP 40  // kept; bench --top N prints the first N
// One call on the predicted timeline (the all-reduces are kept for the report).
typedef struct {
    double start, end, bytes;
} CostSpan;
#define COST_COMM_MAX 64
typedef struct {
    double seconds;                   // predicted step (bound): the last stream to finish
    double class_seconds[OPC_COUNT];
    // The same at the efficiency table's rates (kernels/cuda/cuda_cost_expect.cu): "expected".
    double expected_seconds, expected_compute_seconds, expected_exposed_comm_seconds;
    double expected_class_seconds[OPC_COUNT];
    long class_calls[OPC_COUNT];
    double class_bytes[OPC_COUNT];    // bytes moved (device memory and PCIe) per op class
    long launches;                    // kernels + library calls + memsets/copies
    long syncs;                       // host waits for the stream (each drains the GPU)
    double sync_seconds;              // the GPU's idle time after them (bound), in `seconds`
    double tc_flops, flops, bytes, gemm_flops;
    double peak_bytes;                // device memory high-water mark since backend creation
    int n_top;
    CostEntry top[COST_TOP];          // most expensive first
    // The two streams (compute, communication): busy time of each, the compute stream's idle
    // time waiting for the all-reduces (exposed communication), and the step had every
    // all-reduce run after the backward pass instead (compute + communication, no overlap).
    int ranks;                        // ranks the all-reduces were predicted for
    double compute_seconds, comm_seconds, exposed_comm_seconds, serial_seconds;
    long comm_calls;
    double comm_bytes;
    int n_comm;
    CostSpan comm[COST_COMM_MAX];     // the first all-reduces, in issue order
} CostReport;
// Record-only mode: kernels, cuBLAS, memsets and copies are recorded but not run, allocations
// are address space only.  Returns 1 when available (the emulated backend), else 0.
int backend_cuda_cost_dry_run(int on);
void backend_cuda_cost_start(void);                        // record from now
void backend_cuda_cost_stop(const GpuSpec *g, CostReport *r);  // stop, predict on g
double backend_cuda_cost_predict(const GpuSpec *g, double tc_flops, double flops, double bytes,
                                 double host_bytes);
double backend_cuda_cost_peak_bytes(void);
// The "expected" figures of single calls (kernels/cuda/cuda_cost_expect.cu): a GEMM C[M,N] =
// A[M,K] B[K,N] (x batch) as published for cuBLAS (ours = 0) or at our GEMM path's measured share
// (ours = 1), and a kernel labelled `label` with the given work (blocks as MheCost.blocks).
double backend_cuda_cost_expected_gemm(const GpuSpec *g, int M, int N, int K, int batch, int bf16, int ours);
double backend_cuda_cost_expected_kernel(const GpuSpec *g, const char *label, double tc_flops, double flops,
                                         double bytes, double blocks);
// Predict the all-reduces as if over `ranks` GPUs (bench --ranks); 0: the communicator's size.
void backend_cuda_cost_ranks(int ranks);
// Writes the last predicted step's timeline (stream, start and end in microseconds, call), one
// call a line, tab-separated; returns 0 on success.
int backend_cuda_cost_write_timeline(const char *path);

#endif
