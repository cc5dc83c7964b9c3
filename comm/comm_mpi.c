// comm.h on MPI: blocking and non-blocking collectives, the non-blocking ones polled against
// dist.timeout_s so a dead or stalled rank ends the run with a message instead of a hang.
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "common/clock.h"
#include "common/error.h"

struct Comm {
    MPI_Comm world;
    MPI_Comm node;
    int rank, size, local_rank, local_size;
    double timeout_s;
    MPI_Request pending[COMM_MAX_PENDING];
    double started[COMM_MAX_PENDING];
    int owns_mpi;
};

#define MPI_CHECK(call)                                                                   \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != MPI_SUCCESS) {                                                         \
            char s_[MPI_MAX_ERROR_STRING];                                                \
            int l_ = 0;                                                                   \
            MPI_Error_string(rc_, s_, &l_);                                               \
            fprintf(stderr, "mhetrain: %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__, s_); \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

Comm *comm_init(int *argc, char ***argv, float timeout_s) {
    Comm *c = mhe_calloc(1, sizeof *c);
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
        c->owns_mpi = 1;
    }
    // Errors come back as codes so MPI_CHECK can name the call instead of MPI aborting silently.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    c->world = MPI_COMM_WORLD;
    MPI_CHECK(MPI_Comm_rank(c->world, &c->rank));
    MPI_CHECK(MPI_Comm_size(c->world, &c->size));
    MPI_CHECK(MPI_Comm_split_type(c->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &c->node));
    MPI_CHECK(MPI_Comm_rank(c->node, &c->local_rank));
    MPI_CHECK(MPI_Comm_size(c->node, &c->local_size));
    c->timeout_s = timeout_s;
    for (int i = 0; i < COMM_MAX_PENDING; i++) c->pending[i] = MPI_REQUEST_NULL;
    return c;
}

void comm_finalize(Comm *c) {
    if (!c) return;
    comm_wait_all(c);
    MPI_Comm_free(&c->node);
    if (c->owns_mpi) MPI_Finalize();
    free(c);
}

void comm_set_timeout(Comm *c, float timeout_s) { c->timeout_s = timeout_s; }

int comm_rank(const Comm *c) { return c->rank; }
int comm_world(const Comm *c) { return c->size; }
int comm_local_rank(const Comm *c) { return c->local_rank; }
int comm_local_world(const Comm *c) { return c->local_size; }
void *comm_mpi_handle(Comm *c) { return &c->world; }

_Noreturn void comm_abort(Comm *c, int code, const char *msg) {
    fprintf(stderr, "mhetrain: rank %d: %s\n", c ? c->rank : 0, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

_Noreturn void comm_exit_all(Comm *c, int code, const char *msg) {
    if (c->rank == 0) fprintf(stderr, "mhetrain: %s\n", msg);
    fflush(stderr);
    comm_finalize(c);
    exit(code);
}

// Polls a request until done; past the deadline (dist.timeout_s + allowance_s) the whole job is
// ended (never a hang).
static void wait_allowing(Comm *c, MPI_Request *req, double started, double allowance_s, const char *what) {
    int done = 0;
    unsigned spins = 0;
    for (;;) {
        MPI_CHECK(MPI_Test(req, &done, MPI_STATUS_IGNORE));
        if (done) return;
        if (c->timeout_s > 0 && mhe_now_s() - started > c->timeout_s + allowance_s) {
            char allowed[64] = "", msg[320];
            if (allowance_s > 0) snprintf(allowed, sizeof allowed, " + %.0f s allowed for it", allowance_s);
            snprintf(msg, sizeof msg,
                     "%s did not complete within dist.timeout_s=%.0f s%s: a peer died or is stuck; ending the job",
                     what, c->timeout_s, allowed);
            comm_abort(c, 1, msg);
        }
        // Spin briefly (latency), then yield the core to the computing threads.
        if (++spins > 1000) {
            struct timespec ts = {0, 200000};
            nanosleep(&ts, NULL);
        }
    }
}

static void wait_with_deadline(Comm *c, MPI_Request *req, double started, const char *what) {
    wait_allowing(c, req, started, 0, what);
}

static void blocking(Comm *c, const void *in, void *buf, int n, MPI_Datatype t, MPI_Op op, const char *what) {
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(in, buf, n, t, op, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), what);
}

// MPI counts are int: large buffers go in chunks.
#define CHUNK ((size_t)1 << 30)

void comm_allreduce_sum_f32(Comm *c, float *buf, size_t n) {
    if (c->size == 1) return;
    for (size_t o = 0; o < n; o += CHUNK) {
        size_t k = n - o < CHUNK ? n - o : CHUNK;
        blocking(c, MPI_IN_PLACE, buf + o, (int)k, MPI_FLOAT, MPI_SUM, "all-reduce");
    }
}

void comm_allreduce_sum_f64(Comm *c, double *buf, size_t n) {
    if (c->size == 1) return;
    blocking(c, MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, "all-reduce");
}

void comm_allreduce_max_i64(Comm *c, int64_t *buf, size_t n) {
    if (c->size == 1) return;
    blocking(c, MPI_IN_PLACE, buf, (int)n, MPI_INT64_T, MPI_MAX, "all-reduce");
}

int comm_allreduce_start_f32(Comm *c, float *buf, size_t n) {
    if (n > CHUNK) mhe_fatal("internal error: bucket of %zu floats exceeds one MPI request", n);
    for (int i = 0; i < COMM_MAX_PENDING; i++) {
        if (c->pending[i] != MPI_REQUEST_NULL) continue;
        if (c->size > 1)
            MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, c->world, &c->pending[i]));
        c->started[i] = mhe_now_s();
        return i;
    }
    mhe_fatal("internal error: more than %d outstanding all-reduce requests", COMM_MAX_PENDING);
}

void comm_wait(Comm *c, int handle) {
    if (handle < 0 || handle >= COMM_MAX_PENDING || c->pending[handle] == MPI_REQUEST_NULL) return;
    wait_with_deadline(c, &c->pending[handle], c->started[handle], "gradient all-reduce");
}

void comm_progress(Comm *c) {
    for (int i = 0; i < COMM_MAX_PENDING; i++) {
        if (c->pending[i] == MPI_REQUEST_NULL) continue;
        int done = 0;
        MPI_CHECK(MPI_Test(&c->pending[i], &done, MPI_STATUS_IGNORE));
    }
}

void comm_wait_all(Comm *c) {
    for (int i = 0; i < COMM_MAX_PENDING; i++) comm_wait(c, i);
}

void comm_broadcast(Comm *c, void *buf, size_t bytes, int root) {
    if (c->size == 1) return;
    MPI_Request r;
    MPI_CHECK(MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "broadcast");
}

void comm_barrier(Comm *c) { comm_barrier_allowing(c, 0, "barrier"); }

void comm_barrier_allowing(Comm *c, double allowance_s, const char *what) {
    if (c->size == 1) return;
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(c->world, &r));
    wait_allowing(c, &r, mhe_now_s(), allowance_s > 0 ? allowance_s : 0, what);
}

void comm_allgather(Comm *c, const void *in, void *out, size_t bytes) {
    if (c->size == 1) {
        memcpy(out, in, bytes);
        return;
    }
    MPI_Request r;
    MPI_CHECK(MPI_Iallgather(in, (int)bytes, MPI_BYTE, out, (int)bytes, MPI_BYTE, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "all-gather");
}

void comm_reduce_scatter_f32(Comm *c, const float *full, float *out, const int *counts) {
    if (c->size == 1) {
        memcpy(out, full, (size_t)counts[0] * sizeof(float));
        return;
    }
    MPI_Request r;
    MPI_CHECK(MPI_Ireduce_scatter(full, out, counts, MPI_FLOAT, MPI_SUM, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "gradient reduce-scatter");
}

void comm_allgatherv_f32(Comm *c, float *buf, const int *counts, const int *displs) {
    if (c->size == 1) return;
    MPI_Request r;
    MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "parameter all-gather");
}

void comm_gatherv_f32(Comm *c, const float *shard, float *full, const int *counts, const int *displs, int root) {
    if (c->size == 1) {
        memcpy(full + displs[0], shard, (size_t)counts[0] * sizeof(float));
        return;
    }
    MPI_Request r;
    MPI_CHECK(MPI_Igatherv(shard, counts[c->rank], MPI_FLOAT, full, counts, displs, MPI_FLOAT, root, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "gather");
}

void comm_scatterv_f32(Comm *c, const float *full, float *shard, const int *counts, const int *displs, int root) {
    if (c->size == 1) {
        memcpy(shard, full + displs[0], (size_t)counts[0] * sizeof(float));
        return;
    }
    MPI_Request r;
    MPI_CHECK(MPI_Iscatterv(full, counts, displs, MPI_FLOAT, shard, counts[c->rank], MPI_FLOAT, root, c->world, &r));
    wait_with_deadline(c, &r, mhe_now_s(), "scatter");
}
