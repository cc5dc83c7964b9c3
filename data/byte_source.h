// Sequential reading of an input file, decompressing .bz2 (multistream included) on the fly,
// so corpus readers stream whatever the file size.
#ifndef MHE_DATA_BYTE_SOURCE_H
#define MHE_DATA_BYTE_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

typedef struct ByteSource ByteSource;

// Opens `path`; bz2 is detected from the "BZh" magic, not the name.  Exits 2 when the file
// cannot be opened.
ByteSource *byte_source_open(const char *path);
// Same, decoding a multistream bz2 file with `threads` threads (any other file: as above).
ByteSource *byte_source_open_threads(const char *path, int threads);
// Reads an already open stream (standard input, a pipe from a reader process) from where it
// is; `name` is what error messages call it.  byte_source_close leaves f open.
ByteSource *byte_source_open_stream(FILE *f, const char *name);
// Reads up to n bytes; returns 0 at the end.  A truncated or corrupt bz2 stream exits 2 with
// "file: byte N: ..." (N = offset in the compressed file).
size_t byte_source_read(ByteSource *s, void *buf, size_t n);
// Offset of the next byte to be returned, in the decompressed data.
long long byte_source_offset(const ByteSource *s);
bool byte_source_is_bz2(const ByteSource *s);
const char *byte_source_path(const ByteSource *s);
void byte_source_close(ByteSource *s);

// Reads one line (without its '\n') into *line (grown as needed).  Returns false at the end.
bool byte_source_getline(ByteSource *s, char **line, size_t *len, size_t *cap);

#endif
