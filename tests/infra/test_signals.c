// SIGTERM/SIGINT become a flag the loop polls; a second signal terminates at once.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainer/train/signals.h"

static void test_raise_sets_the_flag(void **state) {
    (void)state;
    SignalWatch w;
    signals_install(&w);
    assert_int_equal(signals_pending(&w), 0);
    raise(SIGTERM);
    assert_int_equal(signals_pending(&w), SIGTERM);
    signals_clear(&w);
    assert_int_equal(signals_pending(&w), 0);
    raise(SIGINT);
    assert_int_equal(signals_pending(&w), SIGINT);
    signals_restore(&w);
    // Restored: the default disposition main() set is back.
    struct sigaction sa;
    sigaction(SIGTERM, NULL, &sa);
    assert_true(sa.sa_handler == SIG_DFL);
}

static int child_exit(void (*body)(void)) {
    pid_t pid = fork();
    if (pid == 0) {
        body();
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A "training loop" that checks the flag at step boundaries and exits with 42 when asked.
static void loop_until_signalled(void) {
    SignalWatch w;
    signals_install(&w);
    kill(getppid(), SIGUSR1);  // ready
    for (int step = 0; step < 2000; step++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);  // one "step"
        if (signals_pending(&w) == SIGTERM) _exit(42);
    }
    _exit(1);
}

static volatile sig_atomic_t ready;
static void on_ready(int s) {
    (void)s;
    ready = 1;
}

static void test_sigterm_stops_the_loop_at_a_step_boundary(void **state) {
    (void)state;
    signal(SIGUSR1, on_ready);
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigprocmask(SIG_BLOCK, &block, &old);
    pid_t pid = fork();
    if (pid == 0) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        loop_until_signalled();
    }
    while (!ready) sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 42);
}

static void second_signal(void) {
    SignalWatch w;
    signals_install(&w);
    raise(SIGINT);
    raise(SIGINT);  // kills the process with SIGINT's default action
    _exit(3);
}

static void test_second_signal_terminates_immediately(void **state) {
    (void)state;
    assert_int_equal(child_exit(second_signal), 128 + SIGINT);
}

int main(void) {
    // The first test checks that restore brings back whatever was there before install.
    signal(SIGTERM, SIG_DFL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raise_sets_the_flag),
        cmocka_unit_test(test_sigterm_stops_the_loop_at_a_step_boundary),
        cmocka_unit_test(test_second_signal_terminates_immediately),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
