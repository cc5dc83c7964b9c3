#include "trainer/io/run_lock.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fs.h"

int run_lock_take(const char *out_dir, char *why, size_t why_len) {
    char path[4096];
    mhe_mkdirs(out_dir);
    snprintf(path, sizeof path, "%s/.lock", out_dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) {
        snprintf(why, why_len, "%s: cannot open the run lock: %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[128];
        run_lock_holder(fd, holder, sizeof holder);
        // Held exclusively by a trainer, or shared by readers (eval, export, convert): a
        // shared lock succeeding tells which, and is dropped at once.
        bool readers = err == EWOULDBLOCK && flock(fd, LOCK_SH | LOCK_NB) == 0;
        close(fd);
        if (readers)
            snprintf(why, why_len,
                     "%s: mhetrain eval, export or convert is reading this train.out_dir; wait for it to "
                     "finish or choose another out_dir", out_dir);
        else if (err == EWOULDBLOCK)
            snprintf(why, why_len,
                     "%s: another trainer is using this train.out_dir (%s); wait for it or choose another out_dir",
                     out_dir, holder[0] ? holder : "pid unknown");
        else
            snprintf(why, why_len, "%s: cannot lock: %s", path, strerror(err));
        return -1;
    }
    // Ours now: whatever pid the file named is dead (its flock is gone), so overwrite it.
    if (run_lock_claim(fd) != 0) {
        snprintf(why, why_len, "%s: cannot write the run lock: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void run_lock_holder(int fd, char *holder, size_t len) {
    ssize_t n = pread(fd, holder, len - 1, 0);
    holder[n > 0 ? n : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
}

int run_lock_claim(int fd) {
    char host[64] = "?", text[160];
    gethostname(host, sizeof host - 1);
    int len = snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), host);
    return ftruncate(fd, 0) == 0 && pwrite(fd, text, (size_t)len, 0) == len ? 0 : -1;
}

void run_lock_release(int fd) {
    if (fd >= 0) close(fd);
}

// The run directory a checkpoint path belongs to: the path itself when it holds checkpoints/,
// DIR for DIR/checkpoints/step_*; false for a checkpoint outside any run directory.
static bool run_dir_of(const char *path, char *out, size_t n) {
    char real[PATH_MAX], probe[PATH_MAX + 16];
    struct stat st;
    if (!realpath(path, real)) return false;
    snprintf(probe, sizeof probe, "%s/checkpoints", real);
    if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(out, n, "%s", real);
        return true;
    }
    char *slash = strrchr(real, '/');
    if (!slash || slash == real) return false;
    *slash = 0;  // real is now the step directory's parent
    slash = strrchr(real, '/');
    if (!slash || strcmp(slash + 1, "checkpoints") != 0) return false;
    *slash = 0;
    snprintf(out, n, "%s", real[0] ? real : "/");
    return true;
}

int run_lock_read(const char *checkpoint, const char *command) {
    char dir[PATH_MAX], path[PATH_MAX + 16];
    if (!run_dir_of(checkpoint, dir, sizeof dir)) return -1;
    snprintf(path, sizeof path, "%s/.lock", dir);
    // Created when missing (a trainer starting later then sees the reader); a read-only run
    // directory, where no trainer can write either, is read without a lock.
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) return fd;
    int err = errno;
    char holder[128] = "";
    ssize_t got = pread(fd, holder, sizeof holder - 1, 0);
    holder[got > 0 ? got : 0] = 0;
    holder[strcspn(holder, "\n")] = 0;
    close(fd);
    if (err == EWOULDBLOCK)
        mhe_fail("%s: a trainer is writing this run (%s); %s reads it once the trainer has exited "
                 "(its checkpoints may be pruned or replaced meanwhile)", dir, holder[0] ? holder : "pid unknown",
                 command);
    mhe_fail("%s: cannot lock: %s", path, strerror(err));
}
