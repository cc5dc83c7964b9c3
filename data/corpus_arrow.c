// Parquet and Arrow inputs.  They are read with Apache Arrow's own implementation (pyarrow)
// rather than a parser of ours: parquet's encodings and compressions (dictionary, RLE, snappy,
// zstd, ...) and Arrow's IPC formats are large, versioned specifications, and pyarrow is what
// wrote the Hugging Face files in the first place.  The C++ library would have to be built or
// taken from a third-party apt repository (Debian ships neither libarrow nor python3-pyarrow);
// a PyPI wheel installs anywhere.  data/arrow_bridge.py (embedded at build time) streams the
// rows as JSON lines into a pipe, which the JSON-lines reader consumes: one batch in memory at
// a time on either side.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/error.h"
#include "data/byte_source.h"
#include "data/corpus.h"

extern char **environ;
extern const char MHE_ARROW_BRIDGE_PY[];

// MHE_PYTHON, else the .venv that launch/setup.sh makes next to the build folder (build/mhetrain
// -> .venv/bin/python, where it installs pyarrow), else python3 from PATH.
static void find_python(char *out, size_t cap) {
    const char *env = getenv("MHE_PYTHON");
    if (env && env[0]) {
        snprintf(out, cap, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(out, cap, "%s/../.venv/bin/python", exe);
            if (access(out, X_OK) == 0) return;
        }
    }
    snprintf(out, cap, "python3");
}

void corpus_read_arrow(const char *file, CorpusFormat format, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    char python[PATH_MAX + 32];
    find_python(python, sizeof python);
    const char *fmt = format == CORPUS_PARQUET ? "parquet" : "arrow";
    int fds[2];
    if (pipe(fds) != 0) mhe_fatal("%s: cannot create a pipe: %s", file, strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    char *argv[] = {python, "-c", (char *)MHE_ARROW_BRIDGE_PY, (char *)file, (char *)fmt,
                    (char *)corpus_text_column(), (char *)corpus_title_column(), NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, python, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        mhe_fail("%s: cannot run %s to read the %s file: %s (set MHE_PYTHON to a Python with pyarrow)",
                 file, python, fmt, strerror(rc));
    }
    FILE *f = fdopen(fds[0], "rb");
    if (!f) mhe_fatal("%s: fdopen: %s", file, strerror(errno));
    ByteSource *src = byte_source_open_stream(f, file);
    // The bridge always writes the keys "text" and "title" (it maps the user's columns).
    corpus_read_jsonl_source(src, file, "text", "title", fn, ctx, stats);
    byte_source_close(src);
    fclose(f);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) mhe_fatal("%s: waitpid: %s", file, strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
    // The bridge has printed its one line (file, row or column, what was expected).
    if (WIFEXITED(status) && WEXITSTATUS(status) == MHE_EXIT_INPUT) exit(MHE_EXIT_INPUT);
    if (WIFSIGNALED(status))
        mhe_fatal("%s: the %s reader (%s) was killed by signal %d", file, fmt, python, WTERMSIG(status));
    mhe_fail("%s: the %s reader (%s) failed with exit status %d", file, fmt, python, WEXITSTATUS(status));
}
