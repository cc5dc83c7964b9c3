// oneDNN matmul GFLOP/s on bench_vs_torch's product shapes (tiny, small: the linear layers' and
// the MLM head's), fp32 and bf16 (bf16 operands, fp32 accumulation), forward X Wᵀ, input
// gradient dY W and weight gradient dYᵀ X, each the best of >= 150 ms.  Not part of the build: it
// compares oneDNN versions (issue 49), built once against Debian's 2.6.3 and once against PyPI's onednn-cpu-gomp 3.2
// (both on GNU OpenMP), then run alternately:
//   gcc -O2 -fopenmp -I../.. onednn_compare.c -o mm26 -ldnnl                 (in tests/bench)
//   pip download --no-deps onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0 -d W; unzip both
//   gcc -O2 -fopenmp -I../.. -IW/include onednn_compare.c -o mm32 -LW/lib -l:libdnnl.so.3 -Wl,-rpath,W/lib
//   for r in 1 2 3; do OMP_NUM_THREADS=2 ./mm26; OMP_NUM_THREADS=2 ./mm32; done
//   on a busy machine: for r in 1 2 3; do for b in mm26 mm32; do MM_CLOCK=thread OMP_NUM_THREADS=1 ./$b; done; done
// Each line: the 12 products' GFLOP/s (4 forward, 4 dX, 4 dW; "-": no kernel, bf16 below
// avx512_core_bf16), then the rate over all of them (total FLOPs / total time).
// The AVX2 column: the same binaries under ONEDNN_MAX_CPU_ISA=AVX2 (isa= prints the effective ISA).
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#define OK(x) do { dnnl_status_t s_ = (x); if (s_) { fprintf(stderr, "%s: %d\n", #x, s_); exit(1); } } while (0)
#define NP 12  // products per size and precision
static dnnl_engine_t eng;
static dnnl_stream_t st;
static void md2(dnnl_memory_desc_t *md, int r, int c, int trans, dnnl_data_type_t dt) {
    dnnl_dims_t d = {r, c}, s = {trans ? 1 : c, trans ? r : 1};
#if DNNL_VERSION_MAJOR >= 3
    OK(dnnl_memory_desc_create_with_strides(md, 2, d, dt, s));
#else
    OK(dnnl_memory_desc_init_by_strides(md, 2, d, dt, s));
#endif
}
// Wall time, or with MM_CLOCK=thread the calling thread's CPU time: with OMP_NUM_THREADS=1 the
// product runs on this thread alone, and time spent descheduled (a busy machine) is not counted.
static int thread_clock;
static double now(void) { return thread_clock ? mhe_thread_cpu_s() : omp_get_wtime(); }
// C[M,N] = op(A)[M,K] op(B)[K,N]
static double run(int M, int N, int K, int ta, int tb, dnnl_data_type_t ab, dnnl_data_type_t cd) {
    dnnl_memory_desc_t a, b, c;
    md2(&a, M, K, ta, ab); md2(&b, K, N, tb, ab); md2(&c, M, N, 0, cd);
    dnnl_primitive_desc_t pd;
#if DNNL_VERSION_MAJOR >= 3
    dnnl_status_t made = dnnl_matmul_primitive_desc_create(&pd, eng, a, b, NULL, c, NULL);
#else
    dnnl_matmul_desc_t desc;
    OK(dnnl_matmul_desc_init(&desc, &a, &b, NULL, &c));
    dnnl_status_t made = dnnl_primitive_desc_create(&pd, &desc, NULL, eng, NULL);
#endif
    if (made == dnnl_unimplemented && ab == dnnl_bf16) return 0;  // no bf16 kernel at this ISA
    OK(made);
    dnnl_primitive_t p;
    OK(dnnl_primitive_create(&p, pd));
    size_t es = ab == dnnl_f32 ? 4 : 2, cs = cd == dnnl_f32 ? 4 : 2;
    void *A = calloc((size_t)M * K, es), *B = calloc((size_t)K * N, es), *C = calloc((size_t)M * N, cs);
    for (size_t i = 0; i < (size_t)M * K * es / 2; i++) ((unsigned short *)A)[i] = 0x3c00 + (i % 7);
    for (size_t i = 0; i < (size_t)K * N * es / 2; i++) ((unsigned short *)B)[i] = 0x3c00 + (i % 5);
    dnnl_memory_t ma, mb, mc;
#if DNNL_VERSION_MAJOR >= 3
    OK(dnnl_memory_create(&ma, a, eng, A)); OK(dnnl_memory_create(&mb, b, eng, B)); OK(dnnl_memory_create(&mc, c, eng, C));
#else
    OK(dnnl_memory_create(&ma, &a, eng, A)); OK(dnnl_memory_create(&mb, &b, eng, B)); OK(dnnl_memory_create(&mc, &c, eng, C));
#endif
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double best = 1e30, total = 0;
    for (int r = 0; r < 200 && (r < 4 || total < 0.15); r++) {
        double t0 = now();
        OK(dnnl_primitive_execute(p, st, 3, args));
        OK(dnnl_stream_wait(st));
        double dt = now() - t0;
        if (r) { total += dt; if (dt < best) best = dt; }
    }
    dnnl_memory_destroy(ma); dnnl_memory_destroy(mb); dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(p); dnnl_primitive_desc_destroy(pd);
    free(A); free(B); free(C);
    return 2.0 * M * N * K / best / 1e9;
}
int main(void) {
    const char *clk = getenv("MM_CLOCK");
    thread_clock = clk && !strcmp(clk, "thread");
    if (clk && !thread_clock && strcmp(clk, "wall")) { fprintf(stderr, "MM_CLOCK=%s: expected wall or thread\n", clk); return 2; }
    if (thread_clock && omp_get_max_threads() != 1) { fprintf(stderr, "MM_CLOCK=thread needs OMP_NUM_THREADS=1\n"); return 2; }
    OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    OK(dnnl_stream_create(&st, eng, dnnl_stream_default_flags));
    const dnnl_version_t *v = dnnl_version();
    // size: M rows, D, F, V, head rows
    struct { const char *name; int M, D, F, V, H; } s[] = {{"tiny", 4096, 256, 1024, 8192, 608}, {"small", 4096, 512, 2048, 30522, 608}};
    for (int i = 0; i < 2; i++)
        for (int bf = 0; bf < 2; bf++) {
            dnnl_data_type_t ab = bf ? dnnl_bf16 : dnnl_f32;
            int M = s[i].M, D = s[i].D, F = s[i].F;
            // forward X W^T (W [N, K] stored row-major = B transposed), weight grads dY^T X (A transposed)
            double fl = 0, t = 0;
            // forward X Wᵀ, input gradient dY W, weight gradient dYᵀ X: QKV/out, FFN up, FFN down, head
            int shapes[NP][5] = {{M, D, D, 0, 1}, {M, F, D, 0, 1}, {M, D, F, 0, 1}, {s[i].H, s[i].V, D, 0, 1},
                                 {M, D, D, 0, 0}, {M, D, F, 0, 0}, {M, F, D, 0, 0}, {s[i].H, D, s[i].V, 0, 0},
                                 {D, D, M, 1, 0}, {F, D, M, 1, 0}, {D, F, M, 1, 0}, {s[i].V, D, s[i].H, 1, 0}};
            printf("oneDNN %d.%d.%d isa=0x%x %s %s:", v->major, v->minor, v->patch, (unsigned)dnnl_get_effective_cpu_isa(),
                   s[i].name, bf ? "bf16" : "fp32");
            for (int k = 0; k < NP; k++) {
                // the weight gradient into fp32, the others into the operands' type (as cpu_gemm.c)
                double g = run(shapes[k][0], shapes[k][1], shapes[k][2], shapes[k][3], shapes[k][4], ab,
                               shapes[k][3] ? dnnl_f32 : ab);
                double f = 2.0 * shapes[k][0] * shapes[k][1] * shapes[k][2];
                if (g == 0) { printf(" -"); continue; }
                fl += f; t += f / (g * 1e9);
                printf(" %.0f", g);
            }
            printf(" | all %.1f GFLOP/s\n", t > 0 ? fl / t / 1e9 : 0.0);
        }
    return 0;
}
