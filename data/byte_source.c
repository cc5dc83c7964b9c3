// Byte source: plain files or bz2 (concatenated streams decoded one after another, as in
// Wikipedia's multistream dumps).
#include "data/byte_source.h"

#include <bzlib.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/bz2_parallel.h"

#define RAW_CHUNK (1 << 16)
// Multistream detection looks for a second stream start within the first DETECT bytes.
#define DETECT (4 << 20)
#define OUT_CHUNK (1 << 16)

struct ByteSource {
    FILE *f;
    char *path;
    bool bz2;
    bool bz_active;         // a bz2 stream is open in `bz`
    bool raw_eof;
    bool borrowed;          // f belongs to the caller (standard input, a pipe): not closed here
    bz_stream bz;
    char raw[RAW_CHUNK];
    long long raw_consumed; // compressed bytes handed to libbz2 and consumed
    char out[OUT_CHUNK];    // decoded bytes not yet returned
    size_t out_pos, out_end;
    long long offset;       // decoded bytes returned so far
    Bz2Parallel *par;       // multistream decoded by threads (NULL: sequential)
    const char *piece;      // current decoded piece of par
    size_t piece_len, piece_pos;
};

// True when the bz2 file holds a second stream early on (a multistream dump).
// Leaves the file where it was when it is not (the sequential decoder carries on from there).
static bool looks_multistream(FILE *f) {
    long pos = ftell(f);
    rewind(f);
    unsigned char *buf = mhe_malloc(DETECT);
    size_t n = fread(buf, 1, DETECT, f);
    bool multi = false;
    for (size_t i = 1; i + 10 <= n && !multi; i++) multi = bz2_is_stream_start(buf, n, i);
    free(buf);
    if (multi) rewind(f);
    else if (fseek(f, pos, SEEK_SET) != 0) mhe_fatal("cannot seek in a bz2 file");
    return multi;
}

ByteSource *byte_source_open_threads(const char *path, int threads) {
    ByteSource *s = byte_source_open(path);
    if (threads > 1 && s->bz2 && looks_multistream(s->f)) {
        FILE *f = s->f;
        s->f = NULL;
        s->par = bz2_parallel_open(f, path, threads);
        s->out_pos = s->out_end = 0;
    }
    return s;
}

static ByteSource *open_on(FILE *f, const char *path) {
    ByteSource *s = mhe_calloc(1, sizeof *s);
    s->f = f;
    s->path = mhe_strdup(path);
    size_t n = fread(s->raw, 1, RAW_CHUNK, s->f);
    if (n < RAW_CHUNK) s->raw_eof = true;
    s->bz2 = n >= 3 && memcmp(s->raw, "BZh", 3) == 0;
    if (s->bz2) {
        s->bz.next_in = s->raw;
        s->bz.avail_in = (unsigned)n;
    } else {
        memcpy(s->out, s->raw, n);
        s->out_end = n;
    }
    return s;
}

ByteSource *byte_source_open(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) mhe_fail("%s: cannot open: %s", path, strerror(errno));
    return open_on(f, path);
}

ByteSource *byte_source_open_stream(FILE *f, const char *name) {
    ByteSource *s = open_on(f, name);
    s->borrowed = true;
    return s;
}

bool byte_source_is_bz2(const ByteSource *s) { return s->bz2; }
const char *byte_source_path(const ByteSource *s) { return s->path; }
long long byte_source_offset(const ByteSource *s) { return s->offset; }

static void refill_raw(ByteSource *s) {
    size_t n = fread(s->raw, 1, RAW_CHUNK, s->f);
    if (n < RAW_CHUNK) s->raw_eof = true;
    s->bz.next_in = s->raw;
    s->bz.avail_in = (unsigned)n;
}

// Decodes into s->out; returns false at the clean end of the input.
static bool fill_bz2(ByteSource *s) {
    s->out_pos = s->out_end = 0;
    while (s->out_end == 0) {
        if (s->bz.avail_in == 0 && !s->raw_eof) refill_raw(s);
        if (!s->bz_active) {
            if (s->bz.avail_in == 0) return false;  // every stream ended: clean end
            if (BZ2_bzDecompressInit(&s->bz, 0, 0) != BZ_OK)
                mhe_fatal("%s: cannot initialise bz2 decoder", s->path);
            s->bz_active = true;
        }
        unsigned before = s->bz.avail_in;
        s->bz.next_out = s->out;
        s->bz.avail_out = OUT_CHUNK;
        int rc = BZ2_bzDecompress(&s->bz);
        s->raw_consumed += before - s->bz.avail_in;
        s->out_end = OUT_CHUNK - s->bz.avail_out;
        if (rc == BZ_STREAM_END) {
            // Multistream: the next stream (if any) starts right after this one.
            BZ2_bzDecompressEnd(&s->bz);
            s->bz_active = false;
        } else if (rc == BZ_DATA_ERROR_MAGIC) {
            mhe_fail_byte(s->path, s->raw_consumed, "not a bz2 stream (bad magic after a stream end)");
        } else if (rc == BZ_DATA_ERROR) {
            mhe_fail_byte(s->path, s->raw_consumed, "corrupt bz2 data (checksum or block error)");
        } else if (rc != BZ_OK) {
            mhe_fatal("%s: bz2 decoder error %d", s->path, rc);
        } else if (s->out_end == 0 && s->bz.avail_in == 0 && s->raw_eof) {
            mhe_fail_byte(s->path, s->raw_consumed,
                          "truncated bz2 stream (file ends before the stream end marker)");
        }
    }
    return true;
}

static bool fill_parallel(ByteSource *s) {
    while (s->piece_pos == s->piece_len) {
        if (!bz2_parallel_next(s->par, &s->piece, &s->piece_len)) return false;
        s->piece_pos = 0;
    }
    size_t n = s->piece_len - s->piece_pos < OUT_CHUNK ? s->piece_len - s->piece_pos : OUT_CHUNK;
    memcpy(s->out, s->piece + s->piece_pos, n);
    s->piece_pos += n;
    s->out_pos = 0;
    s->out_end = n;
    return true;
}

static bool fill(ByteSource *s) {
    if (s->par) return fill_parallel(s);
    if (s->bz2) return fill_bz2(s);
    if (s->raw_eof) return false;
    size_t n = fread(s->out, 1, OUT_CHUNK, s->f);
    if (n < OUT_CHUNK) s->raw_eof = true;
    s->out_pos = 0;
    s->out_end = n;
    return n > 0;
}

size_t byte_source_read(ByteSource *s, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        if (s->out_pos == s->out_end && !fill(s)) break;
        size_t k = s->out_end - s->out_pos;
        if (k > n - got) k = n - got;
        memcpy((char *)buf + got, s->out + s->out_pos, k);
        s->out_pos += k;
        got += k;
    }
    s->offset += (long long)got;
    return got;
}

bool byte_source_getline(ByteSource *s, char **line, size_t *len, size_t *cap) {
    size_t n = 0;
    bool any = false;
    for (;;) {
        if (s->out_pos == s->out_end && !fill(s)) break;
        any = true;
        char *start = s->out + s->out_pos;
        size_t avail = s->out_end - s->out_pos;
        char *nl = memchr(start, '\n', avail);
        size_t take = nl ? (size_t)(nl - start) : avail;
        if (n + take + 1 > *cap) {
            size_t c = *cap ? *cap : 256;
            while (c < n + take + 1) c *= 2;
            *line = mhe_realloc(*line, c);
            *cap = c;
        }
        memcpy(*line + n, start, take);
        n += take;
        s->out_pos += take + (nl ? 1 : 0);
        s->offset += (long long)(take + (nl ? 1 : 0));
        if (nl) break;
    }
    if (!any) return false;
    if (!*line) {
        *line = mhe_malloc(1);
        *cap = 1;
    }
    (*line)[n] = 0;
    *len = n;
    return true;
}

void byte_source_close(ByteSource *s) {
    if (!s) return;
    if (s->bz_active) BZ2_bzDecompressEnd(&s->bz);
    if (s->par) bz2_parallel_close(s->par);
    else if (!s->borrowed) fclose(s->f);
    free(s->path);
    free(s);
}
