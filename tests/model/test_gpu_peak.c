// MFU on a GPU is counted against the card's dense data-sheet peak (kernels/gpu_peak.h): the
// driver's device names resolve to the right row (the specific names before the general ones),
// unknown cards resolve to none, and the utilisation arithmetic holds, capped at 100%.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/gpu_peak.h"

// The names as cudaGetDeviceProperties reports them on the cards (nvidia-smi -L shows the same).
static void names_resolve_to_their_data_sheet(void **state) {
    (void)state;
    static const struct {
        const char *device, *card;
        double bf16;
    } want[] = {
        {"NVIDIA H100 80GB HBM3", "H100 SXM", 989}, {"NVIDIA H200", "H200 SXM", 989},
        {"NVIDIA H100 PCIe", "H100 PCIe", 756},     {"NVIDIA H100 NVL", "H100 NVL", 835},
        {"NVIDIA GH200 480GB", "GH200", 989},       {"NVIDIA A100-SXM4-80GB", "A100", 312},
        {"NVIDIA A100-PCIE-40GB", "A100", 312},     {"NVIDIA A10G", "A10G", 70},
        {"NVIDIA A10", "A10", 125},                 {"NVIDIA L40S", "L40S", 362},
        {"NVIDIA L4", "L4", 121},                   {"NVIDIA GeForce RTX 4090", "RTX 4090", 165},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const GpuPeak *p = gpu_peak_find(want[i].device);
        assert_non_null(p);
        assert_string_equal(p->card, want[i].card);
        assert_true(p->bf16_tflops == want[i].bf16);
        assert_true(p->fp32_tflops > 0 && p->fp32_tflops < p->bf16_tflops);
    }
    assert_null(gpu_peak_find("NVIDIA Emulated Device"));
    assert_null(gpu_peak_find("Tesla V100-SXM2-16GB"));
    assert_null(gpu_peak_find(""));
    assert_null(gpu_peak_find(NULL));
}

static void mfu_is_the_rate_over_the_peak_capped_at_one(void **state) {
    (void)state;
    int over = -1;
    assert_true(gpu_mfu(98.9e12, 989e12, &over) == 0.1);
    assert_int_equal(over, 0);
    assert_true(gpu_mfu(989e12, 989e12, &over) == 1.0);
    assert_int_equal(over, 0);
    // Faster than the data sheet: the table is wrong for this card; never above 100%.
    assert_true(gpu_mfu(1200e12, 989e12, &over) == 1.0);
    assert_int_equal(over, 1);
    // Unknown peak or no rate: unknown MFU, whatever the other figure.
    assert_true(gpu_mfu(1e12, 0, &over) == -1);
    assert_int_equal(over, 0);
    assert_true(gpu_mfu(0, 989e12, NULL) == -1);
    assert_true(gpu_mfu(-5, 989e12, NULL) == -1);
    assert_true(gpu_mfu(1e12, -1, NULL) == -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_resolve_to_their_data_sheet),
        cmocka_unit_test(mfu_is_the_rate_over_the_peak_capped_at_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
