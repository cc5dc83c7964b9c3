// SIGTERM / SIGINT / SIGHUP as a request to stop: the handler only records the signal; the
// training loop polls it at step boundaries, saves a checkpoint and exits with status
// 128 + signal number (143, 130, 129: the shell's convention), so `train && export` does not
// export an unfinished model.  A second signal while the first is pending says it abandons the
// checkpoint and terminates at once (the default action), so an impatient Ctrl-C still works.
#ifndef MHE_TRAINER_SIGNALS_H
#define MHE_TRAINER_SIGNALS_H

#include <signal.h>

typedef struct {
    struct sigaction old_term, old_int, old_hup;   // restored by signals_restore
    int installed;
} SignalWatch;

void signals_install(SignalWatch *w);
// The signal received since install (SIGTERM, SIGINT or SIGHUP), or 0.
int signals_pending(const SignalWatch *w);
// Forgets a received signal (after it has been handled, or in tests).
void signals_clear(SignalWatch *w);
void signals_restore(SignalWatch *w);

#endif
