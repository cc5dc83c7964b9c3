#include "common/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void vreport(const char *prefix, const char *fmt, va_list ap) {
    fflush(stdout);
    fputs(prefix, stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void mhe_fail_at(const char *file, int line, int col, const char *fmt, ...) {
    char prefix[1024];
    if (line > 0 && col > 0)
        snprintf(prefix, sizeof prefix, "%s:%d:%d: ", file, line, col);
    else if (line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d: ", file, line);
    else
        snprintf(prefix, sizeof prefix, "%s: ", file);
    va_list ap;
    va_start(ap, fmt);
    vreport(prefix, fmt, ap);
    va_end(ap);
    exit(MHE_EXIT_INPUT);
}

void mhe_fail_byte(const char *file, long long byte, const char *fmt, ...) {
    char prefix[1024];
    snprintf(prefix, sizeof prefix, "%s: byte %lld: ", file, byte);
    va_list ap;
    va_start(ap, fmt);
    vreport(prefix, fmt, ap);
    va_end(ap);
    exit(MHE_EXIT_INPUT);
}

void mhe_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("mhetrain: ", fmt, ap);
    va_end(ap);
    exit(MHE_EXIT_INPUT);
}

void mhe_fatal(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vreport("mhetrain: ", fmt, ap);
    va_end(ap);
    exit(1);
}

void *mhe_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) mhe_fatal("out of memory allocating %zu bytes", n);
    return p;
}

void *mhe_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) mhe_fatal("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *mhe_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) mhe_fatal("out of memory reallocating %zu bytes", n);
    return q;
}

void *mhe_alloc_huge(size_t bytes) {
    size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
    void *p;
    if (rounded >= MHE_HUGE_PAGE) {
        rounded = (rounded + MHE_HUGE_PAGE - 1) / MHE_HUGE_PAGE * MHE_HUGE_PAGE;
        p = aligned_alloc(MHE_HUGE_PAGE, rounded);
        if (p) (void)madvise(p, rounded, MADV_HUGEPAGE);
    } else {
        p = aligned_alloc(64, rounded);
    }
    if (!p) mhe_fatal("out of memory allocating %zu bytes", bytes);
    memset(p, 0, rounded);  // after the advice: the first touch takes the huge pages
    return p;
}

char *mhe_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = mhe_malloc(n);
    memcpy(d, s, n);
    return d;
}

char *mhe_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) mhe_fail("%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = mhe_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = mhe_realloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) mhe_fail("%s: read error: %s", path, strerror(errno));
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}
