// User-facing errors and internal checks, shared by every folder.
#ifndef MHE_COMMON_ERROR_H
#define MHE_COMMON_ERROR_H

#include <stddef.h>

// Exit status for bad user input (config, corpus, tokenizer, shard, checkpoint).
#define MHE_EXIT_INPUT 2

// Prints "file:line:col: message" (line/col omitted when 0) to stderr and exits with status 2.
_Noreturn void mhe_fail_at(const char *file, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
// Prints "file: byte N: message" and exits with status 2 (binary inputs).
_Noreturn void mhe_fail_byte(const char *file, long long byte, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
// Prints "mhetrain: message" and exits with status 2.
_Noreturn void mhe_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Same as mhe_fail but exits with status 1 (a runtime failure, not bad input).
_Noreturn void mhe_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Allocation that never returns NULL: running out of memory is a runtime failure.
void *mhe_malloc(size_t n);
void *mhe_calloc(size_t n, size_t size);
void *mhe_realloc(void *p, size_t n);
char *mhe_strdup(const char *s);
// Zeroed, 64-byte aligned; from MHE_HUGE_PAGE bytes up, aligned and rounded to it and advised
// as transparent huge pages (Debian's kernels give them only where madvise asks), so passes
// that stream large buffers (activations, the optimizer's moments) do not miss the TLB every
// 4 KiB.  Where THP is off the advice does nothing.  Freed with free().
#define MHE_HUGE_PAGE ((size_t)2 << 20)
void *mhe_alloc_huge(size_t bytes);

// Reads a whole file; exits with a clear message when it cannot.  *len may be NULL.
char *mhe_read_file(const char *path, size_t *len);

#endif
