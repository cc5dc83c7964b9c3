// defines: the cost model's efficiency table (the "expected" figures) and the formulas that use it.
// The efficiency table of the cost model's "expected" figures and the two formulas that use it
// (cuda_cost_expect.h).  Host code only, compiled by nvcc and by g++ (emulation) alike.
// Sources: CALIBRATION.md (measured here, on an H100 SXM, 2026-11-28) and published figures
// cited in kernels/cuda/PERFORMANCE.md "Bound and expected".
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cuda/cuda_cost_expect.h"

namespace {

// A kernel family (label prefix) and the fraction of its roofline bound it reaches.
struct KernelFit {
    const char *prefix;
    double fraction;
};

struct Efficiency {
    const char *gpu;
    // GEMMs (cuBLAS bf16, fp32 accumulate).  `gemm_frac`: share of the per-SM peak inside a
    // 128x128 tile's K loop; `tile_fixed_s`: prologue + epilogue per wave of tiles.  Fitted to
    // published H100 SXM cuBLAS figures: 8192^3 reaches 81% (798 TFLOP/s, also measured on this
    // workplace's H100), 2048^3 68%, 1024^3 18%, (65536, 1024, 1024) 59%; the fit gives 77%, 68%,
    // 19%, 59%.
    double gemm_frac, tile_fixed_s;
    // Streaming kernels: share of HBM bandwidth (a device-to-device copy measured 3.0 TB/s of
    // 3.35 on this workplace's H100, 0.90; our row kernels are assumed below that).
    double mem_frac;
    // Back-to-back kernels on one stream: the gap between one's end and the next one's start
    // when the host is ahead, and the shortest kernel (launch latency inside the GPU).
    double gap_s, min_kernel_s;
    // After a host synchronisation the GPU idles until the host's next launch arrives: the
    // wake-up of cudaStreamSynchronize plus one launch latency (assumed; not measured yet).
    double sync_s;
    // Our GEMM path against the published-cuBLAS model above (1: as published).
    double gemm_path;
    // A bf16 GEMM with a dimension that is not a multiple of 8 (its leading dimensions then miss
    // the 16-byte alignment tensor-core kernels need): cuBLAS falls back to align-1 kernels or to
    // CUDA cores; priced at this fraction of the bf16 peak.
    double unaligned_frac;
    // Kernel families measured on a GPU: fraction of their bound (roofline, without launch),
    // ending in a null prefix; every other kernel runs at `generic` of its bound.
    const KernelFit *fits;
    double generic;
};

// Fitted on the H100 SXM (CALIBRATION.md):
// - our WMMA flash kernels (run 1): gpu_attn_bench's fractions of their bound (forward
//   0.0218-0.0326, backward 0.0276-0.0443 over three shapes, geometric means 0.0263 and 0.0326),
//   scaled by the attention class's measured/expected ratio in the model steps (0.87-1.32,
//   geometric mean 1.09: dropout's per-element hash, absent from gpu_attn_bench); run 2's
//   kernel profile agrees (the three flash kernels 51.0 ms of BERT-base 512x16's 79.9 ms GPU step);
// - GEMMs (run 2's kernel profile): cuBLAS's sm90 kernels on aligned shapes ran as the published
//   model says (8192x3072x768 in 58 us, 67% of peak), so our path is priced as published; the
//   vocabulary GEMMs (V = 30522, 50257: not multiples of 8) fell to align-1 CUTLASS kernels and
//   a CUDA-core magma kernel at 0.56-15% of the bf16 peak, 1.3% summed over BERT-base's three
//   and 12.7% over GPT-2's: kUnaligned = 5%;
// - everything else (LayerNorm, GELU, dropout, loss, optimizer): kGeneric of the roofline,
//   from run 1's norm/activation class (measured 1.04-1.07 times the model at 0.30).
constexpr double kFlashFwd = 0.0242, kFlashBwd = 0.0299, kGeneric = 0.285, kGemmPath = 1.0, kUnaligned = 0.05;

// cuDNN's fused SDPA (the cudnn attention core), timed through the core itself by gpu_attn_bench
// in CALIBRATION.md run 7 (H200, bf16, 12 heads of 64, no mask or dropout): B 16 T 512 forward
// 0.0466 ms and backward 0.164 ms against bounds of 13.0 us (4 B n T^2 d = 12.9 GFLOP at 989
// TFLOP/s) and 32.6 us (the backward's five products, 2 B n T^2 (3 d_qk + 2 d_v) = 32.2 GFLOP):
// 0.279 / 0.199; B 16 T 1024 causal 0.0997 / 0.309 ms against 26.1 / 65.2 us: 0.262 / 0.211.
// Geometric means below; the same fractions are assumed at other shapes, masks and on the H100.
// (Run 4's PyTorch cuDNN SDPA at T 512, 0.058 / 0.256 ms, included PyTorch's own work per call.)
constexpr double kCudnnFwd = 0.270, kCudnnBwd = 0.205;
// Not measured yet (issue 47), each GPU's own generic fraction until the next GPU run's kernel
// profile refits it: the 16-byte GELU kernels (cuda_gelu.cu), written to stream at a higher share
// of the bandwidth than the 2-byte-access kernels the generic fraction was fitted to.
constexpr double kUnfitted = 0;
// The kernel families measured, in match order.
const KernelFit kRun1Fits[] = {
    {"cudnn_sdpa_fwd", kCudnnFwd},   {"cudnn_sdpa_bwd", kCudnnBwd},
    {"flash_tc_forward", kFlashFwd}, {"flash_tc_dq", kFlashBwd}, {"flash_tc_dkv", kFlashBwd},
    {"flash_rowdot", kFlashBwd},     {"memset", 0.80},          {"memcpy", 0.80},
    {"gelu_vec_", kUnfitted},        {nullptr, 0},
};

// The H200 (CALIBRATION.md run 4): the same flash kernels ran at the same fractions of the same
// bf16 peak (gpu_attn_bench within 1% of the H100's times), but the norm/activation class
// measured 1.47-1.51 times the model at BERT-base with kGeneric: our row kernels reach the
// H100's absolute bandwidth, not the H200's 1.43x more (0.285 x 3.35 / 4.8 = 0.199; 0.285 /
// 1.47 = 0.194).  Memory copies are assumed to scale with the bandwidth (not measured).
constexpr double kGenericH200 = 0.20;

const Efficiency table[] = {
    {"h100", 0.84, 2.0e-6, 0.80, 1.0e-6, 2.0e-6, 8.0e-6, kGemmPath, kUnaligned, kRun1Fits, kGeneric},
    // The H200: the H100's chip; its own fit for the row kernels (above).
    {"h200", 0.84, 2.0e-6, 0.80, 1.0e-6, 2.0e-6, 8.0e-6, kGemmPath, kUnaligned, kRun1Fits, kGenericH200},
    // No A100 has been measured: the same fractions, assumed.
    {"a100", 0.84, 2.0e-6, 0.80, 1.5e-6, 2.5e-6, 8.0e-6, kGemmPath, kUnaligned, kRun1Fits, kGeneric},
};

const Efficiency &efficiency(const GpuSpec *g) {
    for (const Efficiency &e : table)
        if (std::strcmp(e.gpu, g->name) == 0) return e;
    return table[0];
}

double fraction_for(const Efficiency &e, const char *label) {
    for (const KernelFit *f = e.fits; f->prefix; f++)
        if (std::strncmp(label, f->prefix, std::strlen(f->prefix)) == 0)
            return f->fraction > 0 ? f->fraction : e.generic;
    return e.generic;
}

constexpr int kTile = 128;

}  // namespace

double cost_expected_gemm(const GpuSpec *g, int M, int N, int K, int batch, int bf16, double bytes, bool ours,
                          bool lds_aligned) {
    const Efficiency &e = efficiency(g);
    if (bf16 && !lds_aligned && (M % 8 || N % 8 || K % 8)) {
        const double t = 2.0 * M * N * K * batch / (g->bf16_flops * e.unaligned_frac);
        return std::max(std::max(t, bytes / (g->bytes_per_s * e.mem_frac)), e.min_kernel_s) + e.gap_s;
    }
    const double tiles = std::ceil((double)M / kTile) * std::ceil((double)N / kTile) * batch;
    // Too few tiles to fill the SMs: cuBLAS splits K (its split-K kernels were seen on the H100)
    // into at most sms / tiles slices of at least 256, then reduces the fp32 partials.
    int split = 1;
    if (tiles < g->sms) split = std::max(1, std::min((int)(g->sms / tiles), K / 256));
    const double waves = std::ceil(tiles * split / g->sms);
    const double per_sm = (bf16 ? g->bf16_flops : g->fp32_flops) / g->sms;
    const double k_slice = std::ceil((double)K / split);
    double t = waves * (2.0 * kTile * kTile * k_slice / (per_sm * e.gemm_frac) + e.tile_fixed_s);
    if (split > 1) t += 2.0 * 4.0 * (double)M * N * batch * split / (g->bytes_per_s * e.mem_frac);
    t = std::max(t, bytes / (g->bytes_per_s * e.mem_frac));
    if (ours) t /= e.gemm_path;
    return std::max(t, e.min_kernel_s) + e.gap_s;
}

double cost_expected_kernel(const GpuSpec *g, const char *label, const MheCost &c) {
    const Efficiency &e = efficiency(g);
    double bound = std::max(c.tc_flops / g->bf16_flops + c.flops / g->fp32_flops, c.bytes / g->bytes_per_s);
    if (c.blocks > 0 && c.blocks < g->sms) bound *= g->sms / c.blocks;
    const double t = bound / fraction_for(e, label) + c.host_bytes / g->pcie_bytes_per_s;
    return std::max(t, e.min_kernel_s) + e.gap_s;
}

double cost_expected_sync(const GpuSpec *g) { return efficiency(g).sync_s; }

extern "C" double backend_cuda_cost_expected_gemm(const GpuSpec *g, int M, int N, int K, int batch, int bf16,
                                                  int ours) {
    const double el = bf16 ? 2.0 : 4.0;
    const double bytes = batch * el * ((double)M * K + (double)K * N + (double)M * N);
    return cost_expected_gemm(g, M, N, K, batch, bf16, bytes, ours != 0);
}

extern "C" double backend_cuda_cost_expected_kernel(const GpuSpec *g, const char *label, double tc_flops,
                                                    double flops, double bytes, double blocks) {
    return cost_expected_kernel(g, label, MheCost{tc_flops, flops, bytes, 0, blocks});
}
