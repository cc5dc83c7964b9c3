#include "trainer/io/run_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

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
        char holder[128] = "";
        ssize_t n = pread(fd, holder, sizeof holder - 1, 0);
        holder[n > 0 ? n : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(fd);
        if (err == EWOULDBLOCK)
            snprintf(why, why_len,
                     "%s: another trainer is using this train.out_dir (%s); wait for it or choose another out_dir",
                     out_dir, holder[0] ? holder : "pid unknown");
        else
            snprintf(why, why_len, "%s: cannot lock: %s", path, strerror(err));
        return -1;
    }
    // Ours now: whatever pid the file named is dead (its flock is gone), so overwrite it.
    char host[64] = "?", text[160];
    gethostname(host, sizeof host - 1);
    int len = snprintf(text, sizeof text, "pid %ld on %s\n", (long)getpid(), host);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)len, 0) != len) {
        snprintf(why, why_len, "%s: cannot write the run lock: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

void run_lock_release(int fd) {
    if (fd >= 0) close(fd);
}
