// A run whose loss is not finite at its end has diverged: it is named as such (the step it
// diverged at, "non-finite" instead of "-nan") and ends with status 1, never 0.
#ifndef MHE_TRAINER_DIVERGENCE_H
#define MHE_TRAINER_DIVERGENCE_H

#include <stddef.h>
#include <stdint.h>

// "1.2345" with `digits` decimals, or "non-finite (nan)" / "non-finite (inf)".
void divergence_format(char *buf, size_t n, double value, int digits);

// The step a run has diverged at, as evaluated at `step`: the first step of the trailing run of
// non-finite training losses (diverged_at), else `step` when the validation loss is not finite,
// else 0 (not diverged).
int64_t divergence_step(int64_t diverged_at, double valid_loss, int64_t step);

// At the end of a run: 0 when it did not diverge; else rank 0 prints one line naming the step
// and the final validation loss, and the status is 1.
int divergence_check(int rank, int64_t diverged_at, double valid_loss, int64_t step);

#endif
