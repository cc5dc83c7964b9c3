// NCCL through the emulation (NCCL served by MPI), run under mpirun with 2 ranks:
//   1. all-reduce of device buffers equals the sum of every rank's values;
//   2. data-parallel equivalence: each rank runs the model on the emulated CUDA backend over its
//      half of a global batch, gradients summed with cuda_nccl_allreduce_sum, and the result
//      equals one CPU-backend pass over the whole batch (norm-wise relative 1e-4 per tensor).
// `test_cuda_nccl dead`: rank 1 stops taking part after joining; rank 0's all-reduce must end
// the job through the deadline (exit 1, message) instead of hanging (nccl_dead_peer.sh).
#define OMPI_SKIP_MPICXX 1
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_nccl.h"
#include "tests/common/test_util.h"
#include "trainer/model/model.h"

#define T_ 6
#define V_ 19

static int failures;
#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "rank %d FAIL %s:%d: ", rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            failures++;                                                     \
        }                                                                   \
    } while (0)

static void make_config(Config *cfg) {
    tiny_config(cfg, ARCH_GPT, ATTN_GQA, (TinyShape){1, 8, 2, 0, 16, V_, 8, 0.2f});
    cfg->attention.groups = 1;
    config_resolve(cfg, "test_cuda_nccl");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    int rank, size;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    // One GPU per rank of this host (the emulation has exactly one, shared by its processes).
    MPI_Comm local;
    int local_rank;
    MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &local_rank);
    MPI_Comm_free(&local);
    int devices = backend_cuda_device_count();
    Backend *gpu = backend_cuda_create(devices > 1 ? local_rank % devices : 0, 0);
    const int dead_mode = argc > 1 && strcmp(argv[1], "dead") == 0;
    CudaNccl *nccl = cuda_nccl_create(&world, gpu, dead_mode ? 2.0f : 30.0f);
    if (dead_mode) {
        float *x = gpu->alloc(gpu, 64 * sizeof(float));
        if (rank == 1) {
            sleep(60);  // stuck peer: never joins the collective
            return 0;
        }
        cuda_nccl_allreduce_sum(nccl, x, 64);  // must not return
        fprintf(stderr, "rank 0: all-reduce returned without its peer\n");
        return 3;
    }

    // 1. Plain sum.
    const size_t n = 1001;
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = (float)(rank + 1) * 0.5f + (float)i * 0.25f;
    float *d = gpu->alloc(gpu, n * sizeof *h);
    gpu->upload(gpu, d, h, n * sizeof *h);
    cuda_nccl_allreduce_sum(nccl, d, n);
    gpu->download(gpu, h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        float want = 0.5f * (float)(size * (size + 1) / 2) + (float)size * (float)i * 0.25f;
        if (fabsf(h[i] - want) > 1e-6f * fabsf(want)) {
            EXPECT(0, "element %zu: %g, want %g", i, h[i], want);
            break;
        }
    }
    gpu->free(gpu, d);
    free(h);

    // 2. Data-parallel gradient equivalence: global batch of `size` sequences, one per rank.
    Config cfg;
    make_config(&cfg);
    const int B = size;
    int32_t *ids = malloc((size_t)B * T_ * 4), *labels = malloc((size_t)B * T_ * 4);
    Rng r = rng_stream(3, 0, 0);
    for (int i = 0; i < B * T_; i++) ids[i] = (int32_t)(rng_next(&r) % V_);
    long count = 0;
    for (int i = 0; i < B * T_; i++) {
        labels[i] = (i % T_ + 1 < T_ && i % 5 != 3) ? ids[i + 1] : -100;
        count += labels[i] >= 0;
    }
    Backend *cpu = backend_cpu_create(1);
    Model *ref = model_create(&cfg, cpu, B, T_);
    Model *mine = model_create(&cfg, gpu, 1, T_);
    model_init_params(ref, 9);
    size_t np = model_param_count(ref);
    float *w = malloc(np * sizeof *w), *gref = malloc(np * sizeof *w), *gmine = malloc(np * sizeof *w);
    model_get_params(ref, w);
    model_set_params(mine, w);
    model_zero_grad(ref);
    model_forward(ref, ids, NULL, NULL, labels, B, T_, 0);
    model_backward(ref, (double)count);
    model_get_grads(ref, gref);
    model_zero_grad(mine);
    model_forward(mine, ids + rank * T_, NULL, NULL, labels + rank * T_, 1, T_, 0);
    model_backward(mine, (double)count);  // the global count: the sum over ranks is the global mean
    cuda_nccl_allreduce_sum(nccl, model_grads(mine), np);
    model_get_grads(mine, gmine);
    const ParamTable *t = model_param_table(ref);
    double worst = 0;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        double dd = 0, rr = 0;
        for (size_t k = 0; k < p->numel; k++) {
            double a = gmine[p->offset + k], b = gref[p->offset + k];
            dd += (a - b) * (a - b);
            rr += b * b;
        }
        double e = rr > 1e-12 ? sqrt(dd / rr) : sqrt(dd);
        EXPECT(e <= 1e-4, "grad %s err %.3g", p->name, e);
        if (e > worst) worst = e;
    }
    if (rank == 0)
        printf("%d ranks: all-reduce sums ok; data-parallel grads vs one CPU pass: worst rel err %.2e\n",
               size, worst);
    model_free(ref);
    model_free(mine);
    free(w);
    free(gref);
    free(gmine);
    free(ids);
    free(labels);
    config_free(&cfg);
    cpu->destroy(cpu);
    cuda_nccl_free(nccl);
    gpu->destroy(gpu);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, world);
    MPI_Finalize();
    return total ? 1 : 0;
}
