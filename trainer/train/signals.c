#include "trainer/train/signals.h"

#include <string.h>
#include <unistd.h>

// The one piece of global mutable state in the trainer: a signal handler receives only the
// signal number, so the flag it sets cannot live in a context struct.  Only the handler writes
// it (and signals_clear between signals).
static volatile sig_atomic_t pending_signal;

static void on_signal(int signo) {
    if (pending_signal) {
        // Second request: stop now, saying so.  write(), signal() and raise() are async-signal-safe.
        static const char msg[] = "mhetrain: second signal: abandoning the checkpoint and exiting now\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)ignored;
        signal(signo, SIG_DFL);
        raise(signo);
        return;
    }
    pending_signal = signo;
}

void signals_install(SignalWatch *w) {
    memset(w, 0, sizeof *w);
    pending_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;  // interrupted reads and writes resume; the loop polls the flag
    sigaction(SIGTERM, &sa, &w->old_term);
    sigaction(SIGINT, &sa, &w->old_int);
    sigaction(SIGHUP, &sa, &w->old_hup);  // a closed terminal or ssh session: save, don't lose steps
    w->installed = 1;
}

int signals_pending(const SignalWatch *w) {
    (void)w;
    return pending_signal;
}

void signals_clear(SignalWatch *w) {
    (void)w;
    pending_signal = 0;
}

void signals_restore(SignalWatch *w) {
    if (!w->installed) return;
    sigaction(SIGTERM, &w->old_term, NULL);
    sigaction(SIGINT, &w->old_int, NULL);
    sigaction(SIGHUP, &w->old_hup, NULL);
    w->installed = 0;
}
