// The weight-gradient products dW = dYᵀ X (fp32, transposed A) of bench_vs_torch.sh's tiny and
// small models, and tiny's narrow products x Wᵀ and dY W that cpu_gemm.c's pad_b_wins takes,
// through the CPU backend's matmul, the plain oneDNN product (MHE_CPU_GEMM_TN=0) against the
// backend's default (at oneDNN's AVX2 level: row-padded copies where cpu_gemm.c's tn_wins or
// pad_b_wins takes the shape, the copies' time included), alternating in one process, GFLOP/s
// of the best of R rounds.  Operands are evicted from the caches (a 64 MB pass) before each
// product, as in a training step where dY and X were written long before.  Issue 49:
//   ONEDNN_MAX_CPU_ISA=AVX2 OMP_NUM_THREADS=1 MM_CLOCK=thread build/bench_weight_grads [--rounds R]
// (MM_CLOCK=thread: one thread's CPU time, robust to other jobs' load; needs OMP_NUM_THREADS=1.)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "kernels/ops.h"

static int thread_clock;
static double now(void) { return thread_clock ? mhe_thread_cpu_s() : omp_get_wtime(); }

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
    // M x N x K of op(A) op(B): the weight gradients (QKV, out, FFN up, FFN down, the head's
    // transform and vocabulary over 608 scored rows), then tiny's FFN down-projection x Wᵀ and
    // the dx = dY W of its up-projection, QKV projection and vocabulary head.
    const struct {
        const char *size;
        int ta, tb, M, N, K;
    } shapes[] = {{"tiny", 1, 0, 768, 256, 4096},   {"tiny", 1, 0, 256, 256, 4096},   {"tiny", 1, 0, 1024, 256, 4096},
                  {"tiny", 1, 0, 256, 1024, 4096},  {"tiny", 1, 0, 256, 256, 608},    {"tiny", 1, 0, 8192, 256, 608},
                  {"small", 1, 0, 1536, 512, 4096}, {"small", 1, 0, 512, 512, 4096},  {"small", 1, 0, 2048, 512, 4096},
                  {"small", 1, 0, 512, 2048, 4096}, {"small", 1, 0, 512, 512, 608},   {"small", 1, 0, 30522, 512, 608},
                  {"tiny", 0, 1, 4096, 256, 1024},  {"tiny", 0, 0, 4096, 256, 1024},  {"tiny", 0, 0, 4096, 256, 768},
                  {"tiny", 0, 0, 608, 256, 8192}};
    const size_t flush_n = (size_t)16 << 20;
    float *flush = mhe_malloc(flush_n * sizeof *flush);
    printf("threads=%d clock=%s  GFLOP/s: plain -> default\n", omp_get_max_threads(), thread_clock ? "thread" : "wall");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int ta = shapes[s].ta, tb = shapes[s].tb, M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
        const int lda = ta ? M : K, ldb = tb ? K : N;
        float *a = mhe_malloc((size_t)K * M * sizeof *a), *b = mhe_malloc((size_t)K * N * sizeof *b);
        float *c = mhe_malloc((size_t)M * N * sizeof *c);
        for (size_t i = 0; i < (size_t)K * M; i++) a[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < (size_t)K * N; i++) b[i] = (float)((i * 104729) % 997) / 997.0f - 0.5f;
        double best[2] = {1e30, 1e30};
        for (int r = 0; r <= rounds; r++)  // round 0: primitive creation, not timed
            for (int v = 0; v < 2; v++) {
                Backend *be = v ? dflt : plain;
                memset(flush, r + v, flush_n * sizeof *flush);
                const double t0 = now();
                be->matmul(be, ta, tb, M, N, K, 1.0f, mat_f32(a, lda), mat_f32(b, ldb), 0.0f, out_f32(c, N));
                const double t = now() - t0;
                if (r && t < best[v]) best[v] = t;
            }
        const double gf = 2.0 * M * N * K / 1e9;
        const char *op = ta ? "AᵀB" : tb ? "ABᵀ" : "AB ";
        printf("%-5s %s %5d x %5d x %4d: %6.1f -> %6.1f  (%.2fx)\n", shapes[s].size, op, M, N, K, gf / best[0],
               gf / best[1], best[0] / best[1]);
        fflush(stdout);
        free(a);
        free(b);
        free(c);
    }
    free(flush);
    plain->destroy(plain);
    dflt->destroy(dflt);
    return 0;
}
