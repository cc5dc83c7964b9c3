// Megatron-LM indexed dataset shards (DESIGN.md §4): PREFIX.idx + PREFIX.bin.
//   .idx: "MMIDIDX\0\0", u64 version = 1, u8 dtype code, u64 S, u64 D,
//         i32 lengths[S], i64 byte pointers[S], i64 document indices[D]   (little-endian,
//         unaligned, arrays from offset 34)
//   .bin: the token ids of every sequence, back to back.
#ifndef MHE_DATA_SHARD_H
#define MHE_DATA_SHARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC "MMIDIDX\0\0"
#define SHARD_MAGIC_LEN 9
#define SHARD_HEADER_LEN 34
#define SHARD_DTYPE_U8 1
#define SHARD_DTYPE_I8 2
#define SHARD_DTYPE_I16 3
#define SHARD_DTYPE_I32 4
#define SHARD_DTYPE_I64 5
#define SHARD_DTYPE_U16 8
// uint16 ids below this vocabulary size (Megatron's own threshold), int32 above.
#define SHARD_U16_VOCAB_LIMIT 65500

// The dtype code Megatron uses for a vocabulary of this size.
int shard_dtype_for_vocab(int vocab_size);
// Bytes per element of an integer dtype code; 0 for codes that are not token ids.
int shard_dtype_size(int code);

typedef struct ShardWriter ShardWriter;

// Creates PREFIX.bin and PREFIX.idx (the .idx is written by shard_writer_close).
ShardWriter *shard_writer_open(const char *prefix, int vocab_size);
// Appends one sequence that is also one document.
void shard_writer_add(ShardWriter *w, const int32_t *ids, size_t n);
int64_t shard_writer_bin_bytes(const ShardWriter *w);
int64_t shard_writer_sequences(const ShardWriter *w);
// Writes the .idx, closes both files and frees w.  Exits 1 on an I/O failure.
void shard_writer_close(ShardWriter *w);

typedef struct {
    char *prefix;
    char *idx_path, *bin_path;
    int dtype, elem_size;
    int64_t n_seq, n_doc;     // n_doc = documents + 1 (Megatron's doc_idx length)
    int32_t *lengths;         // [n_seq], copied out of the unaligned index
    int64_t *pointers;        // [n_seq] byte offsets into .bin
    int64_t *doc_idx;         // [n_doc]
    int64_t n_tokens;
    const unsigned char *bin; // memory-mapped .bin
    size_t bin_size;
} ShardReader;

// Opens and validates PREFIX.idx/.bin: magic, version, dtype, counts against the file size,
// pointers against lengths and the .bin size, document indices.  Exits 2 with
// "file: byte N: message" on the first problem.
ShardReader *shard_reader_open(const char *prefix);
// Checks every id is in [0, vocab_size); exits 2 naming the .bin byte of the first bad one.
void shard_reader_check_ids(const ShardReader *r, int vocab_size);
// Token j of sequence s (no bounds checks beyond assertions).
int32_t shard_reader_token(const ShardReader *r, int64_t s, int64_t j);
// Copies tokens [start, start+count) of sequence s into out.
void shard_reader_tokens(const ShardReader *r, int64_t s, int64_t start, int64_t count,
                         int32_t *out);
void shard_reader_close(ShardReader *r);

#endif
