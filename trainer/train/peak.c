#include "trainer/train/peak.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

double peak_matmul_gflops(Backend *be, int n, int reps) {
    // Operands and result in the activation type: the product at the precision the model's
    // matmuls run at (bf16 units in a bf16 run).
    const size_t nn = (size_t)n * n, bytes = nn * dtype_size(be->act);
    float *host = mhe_malloc(nn * sizeof(float));
    for (size_t i = 0; i < nn; i++) host[i] = (float)(i % 7) * 0.01f;
    // The three operands at a few relative placements (offsets that are multiples of 256 bytes but
    // not of 4 KiB): with rows of 2 KiB (1024 bf16 values) their relative placement decides cache-set
    // conflicts, and one placement, set by the process's heap, read 1,580-1,680 GFLOP/s where
    // others read 2,150-2,260 on an AMX Xeon (2026-11-29).  Large sizes take one placement.
    enum { SLACK = 4 * 4096 };
    const int placements = nn <= 2048u * 2048u ? 3 : 1;
    char *mem = be->alloc(be, 3 * bytes + 3 * SLACK);
    const int cpu = strcmp(be->name, "cpu") == 0;
    // A weight [n, n] and an fp32 result [n, n] for the CPU's other forms.
    float *wf = cpu ? be->alloc(be, 2 * nn * sizeof(float)) : NULL;
    if (cpu) {
        be->upload(be, wf, host, nn * sizeof(float));
        if (be->weights_steady) be->weights_steady(be, wf, nn);
    }
    // The profile would count these products as the model's.
    OpProfile *prof = be->profile;
    be->profile = NULL;
    double best = 0;
    for (int p = 0; p < placements; p++) {
        Act *a = (Act *)mem, *b = (Act *)(mem + bytes + SLACK + (size_t)p * 1280),
            *c = (Act *)(mem + 2 * bytes + 2 * SLACK + (size_t)p * 2816);
        be->upload_act(be, a, host, nn);
        be->upload_act(be, b, host, nn);
        // At least `reps` timed products and at least 50 ms of them: a 1024^3 bf16 product takes
        // about a millisecond on an AMX Xeon, and the best of 3 wandered by 10-20% within a process.
        double timed = 0;
        for (int rep = 0; rep <= reps || (timed < 0.05 && rep <= 64); rep++) {
            // Every kernel the model's products run on: A B into the activation type (oneDNN on the
            // CPU), and on the CPU also A Wᵀ with W an fp32 weight (its bf16 copy kept, as in a
            // step) into the activation type and Aᵀ B into fp32 (the linear layers' forms, on AMX
            // tiles on an AMX CPU's bf16 backend, kernels/cpu/cpu_amx_linear.h), so that no product
            // of the model outruns the ceiling unmeasured.  On CUDA they are one cuBLAS GEMM.
            for (int form = 0; form < (cpu ? 3 : 1); form++) {
                double t0 = omp_get_wtime();
                if (form == 0) be->matmul(be, 0, 0, n, n, n, 1.0f, mat_act(a, n), mat_act(b, n), 0.0f, out_act(c, n));
                else if (form == 1) be->matmul(be, 0, 1, n, n, n, 1.0f, mat_act(a, n), mat_f32(wf, n), 0.0f, out_act(c, n));
                else be->matmul(be, 1, 0, n, n, n, 1.0f, mat_act(a, n), mat_act(b, n), 0.0f, out_f32(wf + nn, n));
                be->synchronize(be);
                const double dt = omp_get_wtime() - t0;
                double g = 2.0 * (double)n * n * n / dt / 1e9;
                if (rep > 0) timed += dt;
                if (rep > 0 && g > best) best = g;  // the first call creates the kernels, warms caches
            }
        }
    }
    be->profile = prof;
    be->free(be, mem);
    if (cpu) {
        if (be->weights_steady) be->weights_steady(be, NULL, 0);
        be->free(be, wf);
    }
    free(host);
    return best;
}

double peak_matmul_ceiling(Backend *be, int *n_used, double *seconds_used) {
    double best = 0, prev = 0, spent = 0, at_best = 0;
    int used = 0;
    for (int n = 1024; n <= 4096; n *= 2) {
        const double t0 = omp_get_wtime();
        double g = peak_matmul_gflops(be, n, 3);
        const double dt = omp_get_wtime() - t0;
        spent += dt;
        if (g > best) {
            best = g;
            used = n;
            at_best = dt;
        }
        // The cores are full once doubling the size no longer raises the rate.  The next size
        // costs about 8x this one's measurement (every form and placement, not one product: one
        // product's figure let a 2-core run spend 6 s here, and as long at every evaluation).
        if (g < 1.05 * prev || spent + 8 * dt > 1.0) break;
        prev = g;
    }
    if (n_used) *n_used = used;
    if (seconds_used) *seconds_used = at_best;
    return best;
}

double peak_mfu(double *peak, double achieved) {
    if (*peak <= 0 || achieved <= 0) return -1;
    if (achieved > *peak) {
        static int said;
        if (!said++)
            fprintf(stderr, "mhetrain: the model's step ran at %.1f GFLOP/s, above the peak MFU is counted against "
                            "(%.1f GFLOP/s): MFU is counted against the step's own rate from here (100%% "
                            "there), which only bounds the peak from below\n", achieved, *peak);
        *peak = achieved;
    }
    return achieved / *peak;
}

double peak_products_gflops(Backend *be, const PeakProduct *p, int n, int reps) {
    // Per product: X [M, K] and W [N, K] (fp32, as the model keeps weights), Y [M, N] in the
    // activation type for the forward A Wᵀ, and dW [N, K] fp32 for the weight gradient Yᵀ X.
    size_t act_elems = 0, w_elems = 0;
    for (int i = 0; i < n; i++) {
        act_elems += (size_t)p[i].M * p[i].K + (size_t)p[i].M * p[i].N;
        w_elems += (size_t)p[i].N * p[i].K;
    }
    Act *acts = be->alloc(be, act_elems * dtype_size(be->act));
    float *w = be->alloc(be, 2 * w_elems * sizeof(float));
    const size_t most = act_elems > 2 * w_elems ? act_elems : 2 * w_elems;
    float *host = mhe_malloc(most * sizeof(float));
    for (size_t i = 0; i < most; i++) host[i] = (float)(i % 7) * 0.01f;
    be->upload_act(be, acts, host, act_elems);
    be->upload(be, w, host, 2 * w_elems * sizeof(float));
    if (be->weights_steady) be->weights_steady(be, w, w_elems);
    OpProfile *prof = be->profile;
    be->profile = NULL;
    double flops = 0, best = 1e300;
    for (int i = 0; i < n; i++) flops += 2.0 * 2.0 * (double)p[i].M * p[i].N * p[i].K * p[i].count;
    // The first pass creates the primitives and the weights' bf16 copies (a step's warm-up).
    for (int rep = 0; rep <= reps; rep++) {
        double t0 = omp_get_wtime();
        size_t at = 0, wat = 0;
        for (int i = 0; i < n; i++) {
            const int M = p[i].M, N = p[i].N, K = p[i].K;
            Act *x = act_at(be, acts, at), *y = act_at(be, acts, at + (size_t)M * K);
            float *wi = w + wat, *dw = w + w_elems + wat;
            for (int c = 0; c < p[i].count; c++) {
                be->matmul(be, 0, 1, M, N, K, 1.0f, mat_act(x, K), mat_f32(wi, K), 0.0f, out_act(y, N));
                be->matmul(be, 1, 0, N, K, M, 1.0f, mat_act(y, N), mat_act(x, K), 0.0f, out_f32(dw, K));
            }
            at += (size_t)M * K + (size_t)M * N;
            wat += (size_t)N * K;
        }
        be->synchronize(be);
        const double dt = omp_get_wtime() - t0;
        if (rep > 0 && dt < best) best = dt;
    }
    be->profile = prof;
    if (be->weights_steady) be->weights_steady(be, NULL, 0);
    be->free(be, acts);
    be->free(be, w);
    free(host);
    return best < 1e300 && best > 0 ? flops / best / 1e9 : 0;
}
