#include "kernels/gpu_peak.h"

#include <stddef.h>
#include <string.h>

// TFLOP/s, dense (the data sheets' sparse figures are twice these).  SXM unless named: the
// driver calls an H100 SXM "NVIDIA H100 80GB HBM3", a PCIe card "NVIDIA H100 PCIe".
static const GpuPeak kPeaks[] = {
    {"H100 PCIe", "H100 PCIe", 756, 51},
    {"H100 NVL", "H100 NVL", 835, 60},
    {"GH200", "GH200", 989, 67},
    {"H200", "H200 SXM", 989, 67},
    {"H800", "H800 SXM", 989, 67},
    {"H100", "H100 SXM", 989, 67},
    {"B200", "B200", 2250, 80},
    {"A100", "A100", 312, 19.5},
    {"A800", "A800", 312, 19.5},
    {"L40S", "L40S", 362, 91.6},
    {"L40", "L40", 181, 90.5},
    {"L4", "L4", 121, 30.3},
    {"A10G", "A10G", 70, 31.2},
    {"A10", "A10", 125, 31.2},
    {"A30", "A30", 165, 10.3},
    {"RTX 4090", "RTX 4090", 165, 82.6},
    {"RTX 3090", "RTX 3090", 71, 35.6},
};

const GpuPeak *gpu_peak_find(const char *device_name) {
    if (!device_name) return NULL;
    for (size_t i = 0; i < sizeof kPeaks / sizeof kPeaks[0]; i++)
        if (strstr(device_name, kPeaks[i].match)) return &kPeaks[i];
    return NULL;
}

double gpu_mfu(double flops_per_s, double peak_flops, int *over) {
    if (over) *over = 0;
    if (!(flops_per_s > 0) || !(peak_flops > 0)) return -1;
    if (flops_per_s > peak_flops) {
        if (over) *over = 1;
        return 1.0;
    }
    return flops_per_s / peak_flops;
}
