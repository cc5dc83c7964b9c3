// File-system helpers shared by the commands (fs.h): directories, small whole-file writes, and the
// output folders written whole.
#define _GNU_SOURCE  // renameat2, nftw
#include "common/fs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

void mhe_mkdirs(const char *path) {
    size_t n = strlen(path);
    char *buf = mhe_malloc(n + 1);
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1;; p++) {
        const int end = *p == '\0';
        if (*p == '/' || end) {
            *p = '\0';
            struct stat st;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) mhe_fatal("%s: cannot create directory: %s", buf, strerror(errno));
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode)) mhe_fatal("%s: exists and is not a directory", buf);
            if (end) break;
            *p = '/';
        }
    }
    free(buf);
}

void mhe_path_join(char *out, size_t n, const char *dir, const char *file, const char *who) {
    if ((size_t)snprintf(out, n, "%s/%s", dir, file) >= n) mhe_fail("%s: path too long: %s/%s", who, dir, file);
}

int mhe_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void mhe_write_file(const char *path, const void *data, size_t len, const char *who) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) mhe_fatal("%s: cannot write %s: %s", who, path, strerror(errno));
}

void mhe_copy_file(const char *src, const char *dst, const char *who) {
    size_t len;
    char *text = mhe_read_file(src, &len);
    mhe_write_file(dst, text, len, who);
    free(text);
}

// The one staging folder of this process, removed at exit unless committed.
static char pending_staging[MHE_OUTDIR_PATH_MAX];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

void mhe_remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void remove_pending(void) {
    if (pending_staging[0]) mhe_remove_tree(pending_staging);
    pending_staging[0] = 0;
}

static int dir_is_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(d)))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    return empty;
}

// Staging folders of earlier runs into the same target (".BASE.partial-PID", and ".old" beside
// one): a process killed outright (kill -9, a crash, a lost node) cannot remove its own.  Those
// whose process is gone are removed, saying so; one whose PID is alive is named and kept (another
// export into the same target may be running).
static void remove_stale_staging(const char *parent, const char *base, const char *who) {
    DIR *d = opendir(parent);
    if (!d) return;
    char prefix[MHE_OUTDIR_PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, ".%s.partial-", base);
    const size_t np = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, np) != 0) continue;
        const char *digits = e->d_name + np;
        size_t nd = strspn(digits, "0123456789");
        if (nd == 0 || nd > 9 || (digits[nd] && strcmp(digits + nd, ".old") != 0)) continue;
        const long pid = strtol(digits, NULL, 10);
        if (pid == (long)getpid()) continue;
        char path[2 * MHE_OUTDIR_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        if (kill((pid_t)pid, 0) == 0 || errno == EPERM) {
            fprintf(stderr, "%s: note: %s is the staging folder of process %ld, which is still running (another "
                            "write into the same --out?); left alone\n", who, path, pid);
            continue;
        }
        mhe_remove_tree(path);
        fprintf(stderr, "%s: removed %s, left by process %ld, which ended without finishing (killed?)\n", who, path,
                pid);
    }
    closedir(d);
}

void mhe_outdir_begin(MheOutDir *o, const char *target, int force, const char *who) {
    memset(o, 0, sizeof *o);
    size_t n = strlen(target);
    while (n > 1 && target[n - 1] == '/') n--;
    if (n == 0 || n >= sizeof o->target) mhe_fail("%s: --out '%s' is not a usable folder name", who, target);
    memcpy(o->target, target, n);
    const char *slash = strrchr(o->target, '/');
    const char *base = slash ? slash + 1 : o->target;
    char parent[MHE_OUTDIR_PATH_MAX];
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == o->target) snprintf(parent, sizeof parent, "/");
    else snprintf(parent, sizeof parent, "%.*s", (int)(slash - o->target), o->target);
    if (!*base || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        mhe_fail("%s: --out %s: name the folder itself (not . or ..)", who, target);
    struct stat st;
    if (lstat(o->target, &st) == 0) {
        if (S_ISLNK(st.st_mode)) {
            char to[MHE_OUTDIR_PATH_MAX] = "?";
            ssize_t k = readlink(o->target, to, sizeof to - 1);
            if (k >= 0) to[k] = 0;
            mhe_fail("%s: --out %s is a symbolic link (to %s): the folder is replaced whole, which would replace "
                     "the link, not what it points to; give the real folder as --out", who, o->target, to);
        }
        if (!S_ISDIR(st.st_mode)) mhe_fail("%s: --out %s exists and is not a directory", who, o->target);
        if (!force && !dir_is_empty(o->target))
            mhe_fail("%s: --out %s exists and is not empty: pass --force to replace it (the whole folder is "
                     "replaced, and only once the new one is complete)", who, o->target);
    } else if (errno != ENOENT) {
        mhe_fail("%s: --out %s: %s", who, o->target, strerror(errno));
    }
    mhe_mkdirs(parent);
    char parent_abs[PATH_MAX];
    if (!realpath(parent, parent_abs)) mhe_fatal("%s: cannot resolve %s: %s", who, parent, strerror(errno));
    if (snprintf(o->target_abs, sizeof o->target_abs, "%s/%s", strcmp(parent_abs, "/") ? parent_abs : "", base) >=
            (int)sizeof o->target_abs ||
        snprintf(o->staging, sizeof o->staging, "%s/.%s.partial-%ld", parent, base, (long)getpid()) >=
            (int)sizeof o->staging)
        mhe_fail("%s: --out %s: path too long", who, target);
    mhe_remove_tree(o->staging);  // a leftover of a killed process that had this pid
    remove_stale_staging(parent, base, who);
    if (mkdir(o->staging, 0777) != 0)
        mhe_fatal("%s: cannot create %s: %s", who, o->staging, strerror(errno));
    static int registered;
    if (!registered) atexit(remove_pending);
    registered = 1;
    snprintf(pending_staging, sizeof pending_staging, "%s", o->staging);
}

void mhe_outdir_commit(MheOutDir *o) {
    struct stat st;
    if (lstat(o->target, &st) == 0) {
        if (renameat2(AT_FDCWD, o->staging, AT_FDCWD, o->target, RENAME_EXCHANGE) == 0) {
            mhe_remove_tree(o->staging);  // now the previous contents
        } else {
            // No atomic exchange here: the old folder steps aside first, so a failure in between
            // leaves it whole under its side name, named in the message.
            char old[MHE_OUTDIR_PATH_MAX + 8];
            snprintf(old, sizeof old, "%s.old", o->staging);
            if (rename(o->target, old) != 0)
                mhe_fatal("%s: cannot move the previous folder aside: %s", o->target, strerror(errno));
            if (rename(o->staging, o->target) != 0)
                mhe_fatal("%s: cannot rename %s into place: %s (the previous folder is %s)", o->target, o->staging,
                          strerror(errno), old);
            mhe_remove_tree(old);
        }
    } else if (rename(o->staging, o->target) != 0) {
        mhe_fatal("%s: cannot rename %s into place: %s", o->target, o->staging, strerror(errno));
    }
    pending_staging[0] = 0;
}

int mhe_path_within(const char *inner, const char *outer) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(inner, a) || !realpath(outer, b)) return 0;
    size_t n = strlen(b);
    if (strcmp(b, "/") == 0) return 1;
    return strncmp(a, b, n) == 0 && (a[n] == 0 || a[n] == '/');
}

int mhe_has_suffix(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}
