// SIGTERM / SIGINT as a request to stop: the handler only records the signal; the training
// loop polls it at step boundaries, saves a checkpoint and exits.  A second signal while the
// first is pending terminates at once (the default action), so an impatient Ctrl-C still works.
#ifndef MHE_TRAINER_SIGNALS_H
#define MHE_TRAINER_SIGNALS_H

#include <signal.h>

typedef struct {
    struct sigaction old_term, old_int;   // restored by signals_restore
    int installed;
} SignalWatch;

void signals_install(SignalWatch *w);
// The signal received since install (SIGTERM or SIGINT), or 0.
int signals_pending(const SignalWatch *w);
// Forgets a received signal (after it has been handled, or in tests).
void signals_clear(SignalWatch *w);
void signals_restore(SignalWatch *w);

#endif
