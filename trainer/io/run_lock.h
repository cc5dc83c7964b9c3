// One trainer per output directory: out_dir/.lock held with flock() by rank 0 for the whole run.
// The kernel releases a flock when its holder exits however it exits (kill -9 included), so a
// lock file left by a dead process is stale by construction: the next trainer takes it.  The
// file holds the holder's pid and host, for the refusal message only.
#ifndef MHE_TRAINER_RUN_LOCK_H
#define MHE_TRAINER_RUN_LOCK_H

#include <stddef.h>

// Creates out_dir if needed and locks it.  Returns the lock's descriptor (>= 0), or -1 with a
// one-line reason in `why` (held by a live process: its pid; or the file cannot be opened).
int run_lock_take(const char *out_dir, char *why, size_t why_len);
// Releases (closing the descriptor drops the flock); the file stays, harmlessly.
void run_lock_release(int fd);

#endif
