// A growable byte string, shared by the corpus readers and the wikitext cleaner.
#ifndef MHE_DATA_STRBUF_H
#define MHE_DATA_STRBUF_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

typedef struct {
    char *s;       // always NUL-terminated once anything was appended
    size_t len, cap;
} StrBuf;

static inline void strbuf_reserve(StrBuf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    b->s = mhe_realloc(b->s, cap);
    b->cap = cap;
}
static inline void strbuf_append(StrBuf *b, const char *p, size_t n) {
    strbuf_reserve(b, n);
    memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}
static inline void strbuf_putc(StrBuf *b, char c) {
    strbuf_reserve(b, 1);
    b->s[b->len++] = c;
    b->s[b->len] = 0;
}
static inline void strbuf_puts(StrBuf *b, const char *s) { strbuf_append(b, s, strlen(s)); }
static inline void strbuf_clear(StrBuf *b) {
    b->len = 0;
    if (b->s) b->s[0] = 0;
}
static inline void strbuf_free(StrBuf *b) {
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

#endif
