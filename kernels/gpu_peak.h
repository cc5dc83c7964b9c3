// The dense peak of known GPUs, from the vendors' data sheets: what MFU on a GPU is counted
// against (DESIGN.md §9), never an in-process probe.  Plain C, no CUDA: the table is tested on
// every build (tests/kernels/test_gpu_peak.c).
#ifndef MHE_KERNELS_GPU_PEAK_H
#define MHE_KERNELS_GPU_PEAK_H

typedef struct {
    const char *match;  // substring of the driver's device name ("NVIDIA H100 80GB HBM3")
    const char *card;   // the card as MFU names it ("H100 SXM")
    double bf16_tflops;  // dense bf16 tensor cores with fp32 accumulation (no sparsity)
    double fp32_tflops;  // fp32 on CUDA cores (no TF32)
} GpuPeak;

// The row for a device name as cudaGetDeviceProperties reports it; NULL when the card is unknown.
// Rows are matched by substring in table order, the more specific names first ("H100 PCIe"
// before "H100", "A100" before "A10").
const GpuPeak *gpu_peak_find(const char *device_name);

// Model FLOP utilisation of a step that ran at `flops_per_s` on a card of peak `peak_flops`, capped
// at 1: a rate above the data sheet's means the table is wrong for this card (a clock or variant it
// does not know), and *over (may be NULL) says so.  -1 when either figure is unknown (<= 0).
double gpu_mfu(double flops_per_s, double peak_flops, int *over);

#endif
