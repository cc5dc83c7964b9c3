// Communicators: how data-parallel workers find each other and exchange gradients.
// MPI launches and bootstraps every run (a plain `mhetrain train` is an MPI singleton of one
// worker); the MPI backend reduces host buffers.  Every collective waits with a deadline so a
// dead or stuck peer ends the job with a message instead of a hang.
#ifndef MHE_COMM_COMM_H
#define MHE_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct Comm Comm;

// Initialises MPI (thread level FUNNELED) once per process.  timeout_s <= 0 waits forever.
Comm *comm_init(int *argc, char ***argv, float timeout_s);
void comm_finalize(Comm *c);
void comm_set_timeout(Comm *c, float timeout_s);

int comm_rank(const Comm *c);
int comm_world(const Comm *c);
int comm_local_rank(const Comm *c);   // rank among the processes of this host (picks the GPU)
int comm_local_world(const Comm *c);

// In-place sum over all ranks, blocking (with the deadline).
void comm_allreduce_sum_f32(Comm *c, float *buf, size_t n);
void comm_allreduce_sum_f64(Comm *c, double *buf, size_t n);
// In-place max of int64 values (agreeing on flags such as "stop requested").
void comm_allreduce_max_i64(Comm *c, int64_t *buf, size_t n);

// Non-blocking sum: start returns a handle, wait completes it (deadline applies from start).
// At most COMM_MAX_PENDING outstanding requests.
#define COMM_MAX_PENDING 4096
int comm_allreduce_start_f32(Comm *c, float *buf, size_t n);
void comm_wait(Comm *c, int handle);
// Lets outstanding requests advance (MPI progresses them only inside MPI calls).
void comm_progress(Comm *c);
void comm_wait_all(Comm *c);

void comm_broadcast(Comm *c, void *buf, size_t bytes, int root);
void comm_barrier(Comm *c);
// A barrier that waits allowance_s beyond dist.timeout_s: for peers held up by work that is
// expected to be slow on one rank (rank 0 writing a checkpoint to a busy disk), which is
// neither a dead nor a stuck peer.  The deadline still ends the job if that work never ends.
void comm_barrier_allowing(Comm *c, double allowance_s, const char *what);
// Gathers `bytes` from every rank into out (world * bytes, rank order), on every rank.
void comm_allgather(Comm *c, const void *in, void *out, size_t bytes);

// Sharded collectives (ZeRO-1).  counts[r]/displs[r]: the float range of rank r in a buffer of
// the whole size.  reduce_scatter: out (counts[rank] floats) = the sum over ranks of
// full[displs[rank] ...].  allgatherv: in place, every rank's range of buf goes to all ranks.
// gatherv/scatterv move ranges between a root's full buffer and each rank's shard.
void comm_reduce_scatter_f32(Comm *c, const float *full, float *out, const int *counts);
void comm_allgatherv_f32(Comm *c, float *buf, const int *counts, const int *displs);
void comm_gatherv_f32(Comm *c, const float *shard, float *full, const int *counts, const int *displs, int root);
void comm_scatterv_f32(Comm *c, const float *full, float *shard, const int *counts, const int *displs, int root);

// A decision every rank reached together (after a collective that gave them all the same
// facts): rank 0 prints msg, then every rank finalizes MPI and exits with `code`.  Unlike
// comm_abort, the message is printed once and nothing is killed mid-way.
_Noreturn void comm_exit_all(Comm *c, int code, const char *msg);
// Ends every rank of the job with status `code` after printing msg on this rank.
_Noreturn void comm_abort(Comm *c, int code, const char *msg);

// For tests: the raw MPI communicator handle as an opaque pointer (MPI_Comm *).
void *comm_mpi_handle(Comm *c);

#endif
