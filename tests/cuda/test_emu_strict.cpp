// The emulation as strict as the hardware and compute-sanitizer (issue 29 B): every rule is
// broken on purpose by a kernel of this file, run in a child process (`test_cuda_emu_strict
// CASE`), which must end non-zero with the rule's message; the same kernels written correctly
// run in-process and must pass.  Under ThreadSanitizer (test_cuda_emu_strict_tsan) the data races
// are cases too.
#include "kernels/cuda/cuda_compat.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "tests/cuda/expect.h"

using namespace nvcuda;

// ---- kernels ----
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

// One warp loads a 16x16 bf16 tile at `offset` elements into dynamic shared memory with leading
// dimension `ldm`, and stores a float accumulator with `ldc`.
__global__ void wmma_tile_kernel(int offset, unsigned ldm, unsigned ldc, float *out) {
    MHE_DYNAMIC_SHARED(__nv_bfloat16, tile);
    for (int e = threadIdx.x; e < 16 * 64; e += blockDim.x) tile[e] = __float2bfloat16(1.0f);
    __syncwarp();
    FragA a;
    FragC c;
    wmma::load_matrix_sync(a, tile + offset, ldm);
    wmma::fill_fragment(c, 2.0f);
    wmma::store_matrix_sync(out, c, ldc, wmma::mem_row_major);
}

// mode 0: every thread at one __syncthreads; 1: warps past the first return first; 2: odd and
// even threads at different __syncthreads.
__global__ void barrier_kernel(int mode, int *out) {
    MHE_SHARED(int, tile, [128]);
    tile[threadIdx.x] = (int)threadIdx.x;
    if (mode == 1 && threadIdx.x >= 32) return;
    if (mode == 2 && (threadIdx.x & 1)) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = tile[(threadIdx.x + 1) % 32];
}

// mode 0: the whole warp sums; 1: half the lanes return first; 2: half the lanes are at a
// __syncthreads instead; 3: halves at different shuffles; 4: a half-warp mask.
__global__ void shuffle_kernel(int mode, float *out) {
    const int lane = threadIdx.x & 31;
    float v = (float)lane;
    if (mode == 1 && lane < 16) return;
    if (mode == 2 && lane < 16) {
        __syncthreads();
        return;
    }
    if (mode == 3) {
        if (lane & 1) v = __shfl_xor_sync(0xffffffffu, v, 1);
        else v = __shfl_xor_sync(0xffffffffu, v, 2);
    } else if (mode == 4) {
        v = __shfl_xor_sync(0x0000ffffu, v, 1);
    } else {
        v = warp_sum(v);
    }
    out[threadIdx.x] = v;
}

__global__ void plain_kernel(float *out) {
    if (threadIdx.x == 0) out[blockIdx.x + blockIdx.y] = 1.0f;
}

// Every block writes its index to the same word: the survivor depends on the block order.
__global__ void last_block_kernel(int *out) {
    if (threadIdx.x == 0) *out = (int)blockIdx.x;
}

// A shared-memory race: the barrier between the writes and the reads is missing.
__global__ void shared_race_kernel(int *out) {
    MHE_SHARED(int, tile, [64]);
    tile[threadIdx.x] = (int)threadIdx.x;
    out[threadIdx.x] = tile[63 - threadIdx.x];
}
// A global-memory race between blocks: non-atomic read-modify-write of one word.
__global__ void global_race_kernel(int *out) {
    if (threadIdx.x == 0) *out += 1;
}
// Reads shared memory nobody wrote.
__global__ void uninit_shared_kernel(float *out) {
    MHE_DYNAMIC_SHARED(float, sm);
    out[threadIdx.x] = sm[threadIdx.x];
}

template <typename T> static T *dalloc(size_t n) {
    T *p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    CUDA_CHECK(cudaMemset(p, 0, n * sizeof(T)));
    return p;
}

// ---- the cases, each run alone in a child ----
static int run_case(const std::string &c) {
    float *f = dalloc<float>(4096);
    int *n = dalloc<int>(1024);
    const size_t wmma_smem = 16 * 64 * sizeof(__nv_bfloat16);
    if (c == "wmma_align") MHE_LAUNCH(wmma_tile_kernel, 1, 32, wmma_smem, 0, mhe_cost(0, 0))(8, 16u, 16u, f);
    else if (c == "wmma_ldm") MHE_LAUNCH(wmma_tile_kernel, 1, 32, wmma_smem, 0, mhe_cost(0, 0))(0, 12u, 16u, f);
    else if (c == "wmma_ldc") MHE_LAUNCH(wmma_tile_kernel, 1, 32, wmma_smem, 0, mhe_cost(0, 0))(0, 16u, 18u, f);
    else if (c == "sync_after_return") MHE_LAUNCH(barrier_kernel, 1, 128, 0, 0, mhe_cost(0, 0))(1, n);
    else if (c == "sync_divergent") MHE_LAUNCH(barrier_kernel, 1, 128, 0, 0, mhe_cost(0, 0))(2, n);
    else if (c == "shfl_after_return") MHE_LAUNCH(shuffle_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(1, f);
    else if (c == "shfl_vs_sync") MHE_LAUNCH(shuffle_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(2, f);
    else if (c == "shfl_divergent") MHE_LAUNCH(shuffle_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(3, f);
    else if (c == "shfl_mask") MHE_LAUNCH(shuffle_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(4, f);
    else if (c == "block_1056") MHE_LAUNCH(plain_kernel, 1, 1056, 0, 0, mhe_cost(0, 0))(f);
    else if (c == "grid_y") MHE_LAUNCH(plain_kernel, dim3(1, 65536), 32, 0, 0, mhe_cost(0, 0))(f);
    else if (c == "grid_0") MHE_LAUNCH(plain_kernel, 0, 32, 0, 0, mhe_cost(0, 0))(f);
    else if (c == "smem_48k_static") {
        // 256 B static (as LayerNorm's backward) + 48 KB - 128 B dynamic, without opting in.
        mhe_emu::set_resources("uninit_shared_kernel", 32, 256);
        MHE_LAUNCH(uninit_shared_kernel, 1, 32, 48 * 1024 - 128, 0, mhe_cost(0, 0))(f);
    } else if (c == "smem_sm80") {
        CUDA_CHECK(cudaFuncSetAttribute(uninit_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
        MHE_LAUNCH(uninit_shared_kernel, 1, 32, 200 * 1024, 0, mhe_cost(0, 0))(f);
    } else if (c == "smem_over_optin") {
        CUDA_CHECK(cudaFuncSetAttribute(uninit_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
        MHE_LAUNCH(uninit_shared_kernel, 1, 32, 80 * 1024, 0, mhe_cost(0, 0))(f);
    } else if (c == "registers") {
        mhe_emu::set_resources("plain_kernel", 201, 0);  // flash_tc_dkv_kernel<64>'s figure on sm_90
        MHE_LAUNCH(plain_kernel, 1, 512, 0, 0, mhe_cost(0, 0))(f);
    } else if (c == "no_figures") {
        mhe_emu::launch(reinterpret_cast<const void *>(&plain_kernel), "plain_kernel", "kernels/cuda/cuda_x.cu", 1, 32,
                        0, [&] { plain_kernel(f); });
    } else if (c == "order") {
        MHE_LAUNCH(last_block_kernel, 64, 32, 0, 0, mhe_cost(0, 0))(n);
        int v = -1;
        CUDA_CHECK(cudaMemcpy(&v, n, sizeof v, cudaMemcpyDeviceToHost));
        std::printf("last block %d\n", v);
    } else if (c == "shared_race") {
        MHE_LAUNCH(shared_race_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(n);
    } else if (c == "global_race") {
        MHE_LAUNCH(global_race_kernel, 64, 32, 0, 0, mhe_cost(0, 0))(n);
    } else {
        std::fprintf(stderr, "unknown case %s\n", c.c_str());
        return 2;
    }
    CUDA_CHECK(cudaFree(f));
    CUDA_CHECK(cudaFree(n));
    return 0;
}

// Runs `env self CASE` (a minute at most: a hang is a failure too); its status and output.
static int child(const char *self, const char *env, const char *c, std::string &out) {
    std::string cmd = std::string("env ") + env + " timeout 120 " + self + " " + c + " 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    out.clear();
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void expect_fails(const char *self, const char *c, const char *message, const char *env = "") {
    std::string out;
    const int rc = child(self, env, c, out);
    EXPECT(rc != 0 && rc != 124 && out.find(message) != std::string::npos,
           "case %s: exit %d (124: hung), output lacks \"%s\":\n%s", c, rc, message, out.c_str());
    const size_t at = out.rfind('\n', out.find(message)) + 1;  // the line with the message
    std::printf("%-18s refused: %s", c, out.substr(at, out.find('\n', at) + 1 - at).c_str());
}

int main(int argc, char **argv) {
    if (argc == 2) return run_case(argv[1]);
#if defined(__SANITIZE_THREAD__)
    const bool tsan = true;
#else
    const bool tsan = false;
#endif
    // The rules kept: each kernel written correctly runs and gives its values.
    float *f = dalloc<float>(4096);
    int *n = dalloc<int>(1024);
    MHE_LAUNCH(wmma_tile_kernel, 1, 32, 16 * 64 * 2, 0, mhe_cost(0, 0))(16, 24u, 20u, f);
    std::vector<float> hf(4096);
    CUDA_CHECK(cudaMemcpy(hf.data(), f, hf.size() * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(hf[0] == 2.0f && hf[15 * 20 + 15] == 2.0f && hf[16] == 0.0f, "wmma store: %g %g %g", hf[0], hf[315], hf[16]);
    MHE_LAUNCH(barrier_kernel, 1, 128, 0, 0, mhe_cost(0, 0))(0, n);
    MHE_LAUNCH(shuffle_kernel, 1, 64, 0, 0, mhe_cost(0, 0))(0, f);
    CUDA_CHECK(cudaMemcpy(hf.data(), f, 64 * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(hf[0] == 496.0f && hf[63] == 496.0f, "warp sums %g %g", hf[0], hf[63]);
    MHE_LAUNCH(plain_kernel, dim3(3, 2), 1024, 0, 0, mhe_cost(0, 0))(f);
    // Past 48 KB with the opt-in, up to sm_80's 163 KB with LayerNorm's 256 B static part.
    mhe_emu::set_resources("uninit_shared_kernel", 32, 256);
    const size_t big = 166912 - 256;
    CUDA_CHECK(cudaFuncSetAttribute(uninit_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)big));
    MHE_LAUNCH(uninit_shared_kernel, 1, 32, big, 0, mhe_cost(0, 0))(f);
    // Shared memory nobody wrote reads as NaN, as initcheck would flag it.
    CUDA_CHECK(cudaMemcpy(hf.data(), f, 32 * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(std::isnan(hf[0]) && std::isnan(hf[31]), "unwritten shared memory read %g, not NaN", hf[0]);
    // So does fresh device memory, as initcheck would flag it.
    float *fresh = nullptr;
    CUDA_CHECK(cudaMalloc(&fresh, 64 * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(hf.data(), fresh, 64 * sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT(std::isnan(hf[0]) && std::isnan(hf[63]), "fresh device memory read %g, not NaN", hf[0]);
    CUDA_CHECK(cudaFree(fresh));
    CUDA_CHECK(cudaFree(f));
    CUDA_CHECK(cudaFree(n));

    const char *self = argv[0];
    expect_fails(self, "wmma_align", "load_matrix_sync: pointer");
    expect_fails(self, "wmma_align", "kernel wmma_tile_kernel");
    expect_fails(self, "wmma_ldm", "ldm 12 is not a multiple of 8 elements");
    expect_fails(self, "wmma_ldc", "store_matrix_sync: ldm 18 is not a multiple of 4 elements");
    expect_fails(self, "sync_after_return", "__syncthreads reached by part of the block");
    expect_fails(self, "sync_divergent", "__syncthreads reached by part of the block");
    expect_fails(self, "shfl_after_return", "a warp barrier that cannot complete");
    expect_fails(self, "shfl_vs_sync", "a warp barrier that cannot complete");
    expect_fails(self, "shfl_divergent", "lanes at different warp operations");
    expect_fails(self, "shfl_mask", "whole warps only");
    expect_fails(self, "block_1056", "at most 1024 threads");
    expect_fails(self, "grid_y", "grid (1,65536,1)");
    expect_fails(self, "grid_0", "grid (0,1,1)");
    expect_fails(self, "smem_48k_static", "exceed 48 KB (sm_80) without cudaFuncSetAttribute");
    expect_fails(self, "smem_sm80", "exceed sm_80's 166912 B");
    expect_fails(self, "smem_over_optin", "more than the 65536 B it opted in to");
    expect_fails(self, "registers", "201 registers x 512 threads");
    expect_fails(self, "no_figures", "no ptxas figures");

    // Blocks in a shuffled order: the survivor of last_block_kernel varies with the seed (in order
    // it is always the last block).
    std::set<std::string> seen;
    for (int seed = 1; seed <= 4; seed++) {
        // One block at a time: the order alone decides (and ThreadSanitizer sees no race).
        std::string out, env = "MHE_EMU_CONCURRENT_BLOCKS=1 MHE_EMU_SHUFFLE=" + std::to_string(seed);
        EXPECT(child(self, env.c_str(), "order", out) == 0, "order, seed %d:\n%s", seed, out.c_str());
        seen.insert(out);
    }
    std::string in_order;
    EXPECT(child(self, "", "order", in_order) == 0 && in_order == "last block 63\n", "in order: %s", in_order.c_str());
    EXPECT(seen.size() >= 2, "4 shuffled orders all gave %s", seen.begin()->c_str());
    std::printf("order-dependent kernel: %zu distinct results over 4 seeds\n", seen.size());

    if (tsan) {
        // Kept out of the report: the CPU reference's OpenMP threads (OMP_NUM_THREADS=1 here).
        expect_fails(self, "shared_race", "ThreadSanitizer: data race");
        expect_fails(self, "global_race", "ThreadSanitizer: data race", "MHE_EMU_SHUFFLE=1");
    }
    return failures ? 1 : 0;
}
