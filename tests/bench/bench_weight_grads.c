// The weight-gradient products dW = dYᵀ X (fp32, transposed A) of bench_vs_torch.sh's tiny and
// small models through the CPU backend's matmul, the plain oneDNN product (MHE_CPU_GEMM_TN=0)
// against the backend's default (at oneDNN's AVX2 level: K-chunked transposes where cpu_gemm.c's
// tn_wins takes the shape, the transposes' time included), alternating in one process, GFLOP/s
// of the best of R rounds.  Operands are evicted from the caches (a 64 MB pass) before each
// product, as in a training step where dY and X were written long before.  Issue 49:
//   ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1 MM_CLOCK=thread build/bench_weight_grads [--rounds R]
// (MM_CLOCK=thread: one thread's CPU time, robust to other jobs' load; needs OMP_NUM_THREADS=1.)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "kernels/ops.h"

static int thread_clock;
static double now(void) {
    if (!thread_clock) return omp_get_wtime();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    int rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_weight_grads [--rounds R]\n");
            return 2;
        }
    }
    const char *clk = getenv("MM_CLOCK");
    thread_clock = clk && !strcmp(clk, "thread");
    if (thread_clock && omp_get_max_threads() != 1) {
        fprintf(stderr, "MM_CLOCK=thread needs OMP_NUM_THREADS=1\n");
        return 2;
    }
    // The same backend twice: the plain products, and the default (setenv before each creation:
    // cpu_gemm.c reads the variable there).
    setenv("MHE_CPU_GEMM_TN", "0", 1);
    Backend *plain = backend_cpu_create(0);
    unsetenv("MHE_CPU_GEMM_TN");
    Backend *dflt = backend_cpu_create(0);
    // M x N x K: QKV, out, FFN up, FFN down, the head's transform and vocabulary (608 scored rows).
    const struct {
        const char *size;
        int M, N, K;
    } shapes[] = {{"tiny", 768, 256, 4096},   {"tiny", 256, 256, 4096},   {"tiny", 1024, 256, 4096},
                  {"tiny", 256, 1024, 4096},  {"tiny", 256, 256, 608},    {"tiny", 8192, 256, 608},
                  {"small", 1536, 512, 4096}, {"small", 512, 512, 4096},  {"small", 2048, 512, 4096},
                  {"small", 512, 2048, 4096}, {"small", 512, 512, 608},   {"small", 30522, 512, 608}};
    const size_t flush_n = (size_t)16 << 20;
    float *flush = mhe_malloc(flush_n * sizeof *flush);
    printf("threads=%d clock=%s  GFLOP/s: plain -> default\n", omp_get_max_threads(), thread_clock ? "thread" : "wall");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
        float *dy = mhe_malloc((size_t)K * M * sizeof *dy), *x = mhe_malloc((size_t)K * N * sizeof *x);
        float *dw = mhe_malloc((size_t)M * N * sizeof *dw);
        for (size_t i = 0; i < (size_t)K * M; i++) dy[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < (size_t)K * N; i++) x[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r <= rounds; r++)  // round 0: primitive creation, not timed
            for (int v = 0; v < 2; v++) {
                Backend *be = v ? dflt : plain;
                memset(flush, r + v, flush_n * sizeof *flush);
                const double t0 = now();
                be->matmul(be, 1, 0, M, N, K, 1.0f, mat_f32(dy, M), mat_f32(x, N), 0.0f, out_f32(dw, N));
                const double t = now() - t0;
                if (r && t < best[v]) best[v] = t;
            }
        const double gf = 2.0 * M * N * K / 1e9;
        printf("%-5s %5d x %5d x %4d: %6.1f -> %6.1f  (%.2fx)\n", shapes[s].size, M, N, K, gf / best[0], gf / best[1],
               best[0] / best[1]);
        fflush(stdout);
        free(dy);
        free(x);
        free(dw);
    }
    free(flush);
    plain->destroy(plain);
    dflt->destroy(dflt);
    return 0;
}
