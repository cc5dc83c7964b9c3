// Runs under mpirun: checks the MPI communicator's collectives and its deadline.
//   comm_ranks sums      every rank checks sums, buckets, broadcast, allgather; exit 0 on success
//   comm_ranks deadline  rank 1 never joins; rank 0 must end the job (non-zero) within the deadline
//   comm_ranks slow_root SLEEP ALLOW  rank 0 sleeps SLEEP s before a barrier that allows ALLOW s
//                        beyond the 5 s deadline: exit 0 when it completes
//   comm_ranks layout    rank 1's gradient buffer is one float longer; the reducer must end every
//                        rank (status 1, one message) before any all-reduce reaches MPI
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/grad_reducer.h"

#define EXPECT(cond)                                                              \
    do {                                                                          \
        if (!(cond)) {                                                            \
            fprintf(stderr, "rank %d: check failed: %s (%s:%d)\n", rank, #cond, __FILE__, __LINE__); \
            comm_abort(c, 3, "test failed");                                      \
        }                                                                         \
    } while (0)

int main(int argc, char **argv) {
    Comm *c = comm_init(&argc, &argv, 5.0f);
    int rank = comm_rank(c), world = comm_world(c);
    if (argc > 1 && strcmp(argv[1], "deadline") == 0) {
        if (rank == 1) sleep(60);  // a stuck peer
        float x = 1.0f;
        comm_allreduce_sum_f32(c, &x, 1);
        fprintf(stderr, "rank %d: the all-reduce returned although a peer never joined\n", rank);
        return 4;
    }
    if (argc > 3 && strcmp(argv[1], "slow_root") == 0) {
        if (rank == 0) sleep((unsigned)atoi(argv[2]));  // rank 0 writing a checkpoint to a slow disk
        comm_barrier_allowing(c, atof(argv[3]), "barrier after the checkpoint");
        comm_finalize(c);
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "layout") == 0) {
        enum { M = 4096 };
        static float g[M + 1];
        size_t total = M + (rank == 1);
        GradPiece p[2] = {{0, M / 2, 0}, {M / 2, total - M / 2, 1}};
        GradReducerSpec spec = {.grads = g, .total = total, .pieces = p, .n_pieces = 2, .bucket_mb = 0.001f};
        GradReducer *r = grad_reducer_create(c, &spec);
        grad_reducer_stage_done(r, 1);
        grad_reducer_stage_done(r, 0);
        grad_reducer_finish(r);
        fprintf(stderr, "rank %d: reduced buffers of different sizes without a refusal\n", rank);
        return 4;
    }
    // Sums of distinct values per rank, blocking and in buckets.
    enum { N = 1000 };
    float a[N], b[N];
    for (int i = 0; i < N; i++) a[i] = b[i] = (float)(rank + 1) * (float)i;
    comm_allreduce_sum_f32(c, a, N);
    float ranksum = (float)(world * (world + 1) / 2);
    for (int i = 0; i < N; i++) EXPECT(a[i] == ranksum * (float)i);
    int h1 = comm_allreduce_start_f32(c, b, N / 2);
    int h2 = comm_allreduce_start_f32(c, b + N / 2, N / 2);
    comm_wait(c, h2);
    comm_wait(c, h1);
    for (int i = 0; i < N; i++) EXPECT(b[i] == ranksum * (float)i);
    double d = rank;
    comm_allreduce_sum_f64(c, &d, 1);
    EXPECT(d == world * (world - 1) / 2.0);
    int64_t m = rank * 7;
    comm_allreduce_max_i64(c, &m, 1);
    EXPECT(m == (world - 1) * 7);
    char msg[16] = {0};
    if (rank == 0) strcpy(msg, "from-root");
    comm_broadcast(c, msg, sizeof msg, 0);
    EXPECT(strcmp(msg, "from-root") == 0);
    int *all = malloc(sizeof(int) * (size_t)world);
    comm_allgather(c, &rank, all, sizeof(int));
    for (int r = 0; r < world; r++) EXPECT(all[r] == r);
    free(all);
    EXPECT(comm_local_world(c) == world);  // all ranks of this test share one host
    comm_barrier(c);
    comm_finalize(c);
    return 0;
}
