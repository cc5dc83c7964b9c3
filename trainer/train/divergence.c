#include "trainer/train/divergence.h"

#include <math.h>
#include <stdio.h>

void divergence_format(char *buf, size_t n, double value, int digits) {
    if (isfinite(value)) snprintf(buf, n, "%.*f", digits, value);
    else snprintf(buf, n, "non-finite (%s)", isnan(value) ? "nan" : "inf");
}

int64_t divergence_step(int64_t diverged_at, double valid_loss, int64_t step) {
    if (diverged_at > 0) return diverged_at;
    return isfinite(valid_loss) ? 0 : step;
}

int divergence_check(int rank, int64_t diverged_at, double valid_loss, int64_t step) {
    const int64_t at = divergence_step(diverged_at, valid_loss, step);
    if (at == 0) return 0;
    if (rank == 0) {
        char loss[48], where[160];
        divergence_format(loss, sizeof loss, valid_loss, 4);
        if (diverged_at > 0)
            snprintf(where, sizeof where, "the training loss is not finite from step %lld to the end (step %lld)",
                     (long long)at, (long long)step);
        else
            snprintf(where, sizeof where, "the validation loss at the end (step %lld) is not finite", (long long)step);
        fprintf(stderr,
                "mhetrain: the run diverged at step %lld: %s, final validation loss %s; no checkpoint of the "
                "diverged model is written (the last one is kept) -- lower optim.lr or raise optim.warmup_steps, "
                "then resume from that checkpoint or start afresh\n",
                (long long)at, where, loss);
    }
    return 1;
}
