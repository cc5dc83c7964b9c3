// Parallel decoding of multistream bz2 files (Wikipedia's *-multistream.xml.bz2: one stream
// per ~100 pages).  Streams are byte-aligned and start with "BZh<level>" and a block or
// end-of-stream magic, so the compressed file is cut at stream starts into jobs that worker
// threads decode independently; the decoded jobs come back in file order.
#ifndef MHE_DATA_BZ2_PARALLEL_H
#define MHE_DATA_BZ2_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct Bz2Parallel Bz2Parallel;

// True when buf[i..] starts a bz2 stream ("BZh1".."BZh9" + block or end-of-stream magic).
bool bz2_is_stream_start(const unsigned char *buf, size_t n, size_t i);

// Takes over `f` (positioned at the start of the file) and decodes with `threads` workers.
Bz2Parallel *bz2_parallel_open(FILE *f, const char *path, int threads);
// The next decoded piece in file order; false at the end.  Bad data exits 2 with
// "file: byte N: ..." for the first bad job in file order.
bool bz2_parallel_next(Bz2Parallel *p, const char **data, size_t *len);
void bz2_parallel_close(Bz2Parallel *p);

#endif
