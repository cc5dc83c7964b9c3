// Crash safety: a writer process saves checkpoints in a loop (keep-last 2) and is killed with
// SIGKILL at random instants; every time, checkpoint_find_latest must return a checkpoint that
// loads and holds exactly the values of its step, never older than the one found before.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/rng.h"
#include "tests/infra/crash_model.h"

#define KILLS 25

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pid_t spawn(const char *writer, const char *out, int64_t first, int64_t count) {
    char a[32], b[32];
    snprintf(a, sizeof a, "%lld", (long long)first);
    snprintf(b, sizeof b, "%lld", (long long)count);
    pid_t pid = fork();
    if (pid == 0) {
        execl(writer, writer, out, a, b, (char *)NULL);
        _exit(127);
    }
    return pid;
}

// Whether the writer left temporaries behind (it was killed inside a save or a prune).
static int has_leftovers(const char *out) {
    char ck[4200];
    snprintf(ck, sizeof ck, "%s/checkpoints", out);
    DIR *d = opendir(ck);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, ".tmp.", 5) || !strncmp(e->d_name, ".del.", 5);
    if (d) closedir(d);
    return n > 0;
}

static void test_kill9_during_writes_leaves_a_valid_checkpoint(void **state) {
    (void)state;
    const char *writer = getenv("MHE_CKPT_WRITER");
    assert_non_null(writer);
    char *out = infra_scratch_dir("ckpt_crash");
    // One complete checkpoint to start from; its duration sets the kill window.
    int status;
    double t0 = now_s();
    pid_t pid = spawn(writer, out, 1, 3);
    waitpid(pid, &status, 0);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const double per_save = (now_s() - t0) / 3;
    printf("one save (~9 MB) takes %.0f ms\n", per_save * 1e3);

    CrashModel cm, want;
    crash_model_init(&cm);
    crash_model_init(&want);
    int64_t last = 3;
    int mid_write = 0, advanced = 0;
    Rng r = rng_stream(2024, 5, 0);
    // KILLS kills, and more (up to 4x) while fewer than half have hit a write: the window is sized
    // from the first saves, and on a loaded machine later saves (and process start-up) can take
    // several times longer, so a fixed count could end with most kills landing before any write.
    int kills = 0;
    for (int k = 0; k < 4 * KILLS && (k < KILLS || mid_write < KILLS / 2); k++, kills++) {
        pid = spawn(writer, out, last + 1, 0);
        // Uniform over roughly three saves (process start-up included).
        const double delay = rng_next_uniform(&r) * 3.0 * per_save;
        struct timespec ts = {(time_t)delay, (long)((delay - (double)(time_t)delay) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        mid_write += has_leftovers(out);

        char *dir = checkpoint_find_latest(out);
        assert_non_null(dir);
        CheckpointState got;
        checkpoint_load(dir, &cm.t, cm.params, &cm.opt, &got);
        assert_true(got.step >= last);
        advanced += got.step > last;
        crash_model_fill(&want, got.step);
        assert_memory_equal(cm.params, want.params, want.t.total * sizeof(float));
        assert_memory_equal(cm.opt.m, want.opt.m, want.t.total * sizeof(float));
        assert_memory_equal(cm.opt.v, want.opt.v, want.t.total * sizeof(float));
        assert_int_equal(cm.opt.step, got.step);
        assert_int_equal(got.consumed_samples, got.step * 8);
        last = got.step;
        checkpoint_state_free(&got);
        free(dir);
    }
    printf("%d kills: %d inside a save or prune, %d advanced the newest valid checkpoint (now step %lld)\n", kills,
           mid_write, advanced, (long long)last);
    // The kills must really hit writes, or the test proves nothing.
    assert_true(mid_write >= KILLS / 2);
    assert_true(advanced >= 3);
    crash_model_free(&cm);
    crash_model_free(&want);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9_during_writes_leaves_a_valid_checkpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
