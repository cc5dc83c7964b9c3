// One trainer per output directory: out_dir/.lock held with flock() by rank 0 for the whole run.
// The kernel releases a flock when its holder exits however it exits (kill -9 included), so a
// lock file left by a dead process is stale by construction: the next trainer takes it.  The
// file holds the holder's pid and host, for the refusal message only.  Readers (eval, export,
// convert) take it shared, so a trainer refuses to start while one reads.
#ifndef MHE_TRAINER_RUN_LOCK_H
#define MHE_TRAINER_RUN_LOCK_H

#include <stddef.h>

// Creates out_dir if needed and locks it.  Returns the lock's descriptor (>= 0), or -1 with a
// one-line reason in `why` (held by a live process: its pid; or the file cannot be opened).
int run_lock_take(const char *out_dir, char *why, size_t why_len);
// Readers of a run (eval, export, convert) hold the same lock shared, for their whole run, so
// they never see a checkpoint being pruned or a half-finished run: `checkpoint` is what the
// user named (a run directory or one of its checkpoints/step_* directories).  A trainer holding
// it ends the command with exit 2 and one line naming the run and the trainer's pid; a
// checkpoint outside any run directory (or a read-only one) is read unlocked (-1).  Returns
// the descriptor to release, or -1.
int run_lock_read(const char *checkpoint, const char *command);
// For any lock file of this kind (prepare's too): the holder a refused flock names ("pid N on
// HOST", or "" when unreadable), and writing our own into a lock just taken (0, or -1 and errno).
void run_lock_holder(int fd, char *holder, size_t len);
int run_lock_claim(int fd);
// Releases (closing the descriptor drops the flock); the file stays, harmlessly.
void run_lock_release(int fd);

#endif
