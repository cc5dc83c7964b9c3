// Private layout of a Tokenizer and the helpers its source files share (not for other folders).
#ifndef MHE_DATA_TOKENIZER_INTERNAL_H
#define MHE_DATA_TOKENIZER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

// String -> id map over the tokenizer's own token strings (keys are not copied).
typedef struct {
    uint32_t *slots;  // id + 1, 0 = empty
    uint32_t mask;
    const char *const *keys;
    const uint32_t *key_lens;
} StrMap;

// (left id, right id) -> merge rank and merged id, open addressing.
typedef struct {
    uint64_t *keys;  // (left << 32 | right) + 1, 0 = empty
    int32_t *rank;
    int32_t *merged;
    uint32_t mask;
    int count;
} PairMap;

// A token matched verbatim in the raw text before normalisation (HF "added tokens").
typedef struct {
    char *content;
    size_t len;
    int id;
} AddedToken;

struct Tokenizer {
    TokenizerKind kind;
    int n_vocab;
    char **tokens;       // id -> UTF-8 string (NUL-terminated); NULL for a hole
    uint32_t *token_len;
    StrMap vocab;
    SpecialIds special;
    int n_added;
    AddedToken *added;   // sorted longest first, so the longest match wins
    // WordPiece (BertNormalizer + BertPreTokenizer + WordPiece model).
    bool clean_text, chinese_chars, strip_accents, lowercase;
    int max_word_chars;
    int unk;
    // Byte-level BPE.
    PairMap merges;
    int n_merges;
    int byte_id[256];    // id of the single-byte token of each byte, -1 when absent
    bool add_prefix_space;
};

uint64_t tok_hash_bytes(const char *s, size_t n);
void strmap_build(StrMap *m, int n, const char *const *keys, const uint32_t *lens);
int strmap_get(const StrMap *m, const char *s, size_t n);
void strmap_free(StrMap *m);

void pairmap_init(PairMap *m, int expected);
// Returns false when the pair was already present (its rank and id are then replaced).
bool pairmap_put(PairMap *m, int a, int b, int rank, int merged);
bool pairmap_get(const PairMap *m, int a, int b, int *rank, int *merged);
void pairmap_free(PairMap *m);

// A fresh tokenizer owning copies of `tokens[0..n)` (NULL entries allowed for holes).
Tokenizer *tokenizer_new(TokenizerKind kind, int n, char **tokens_taken);
// Finds specials, byte ids and the added-token list from the vocabulary.
void tokenizer_finish(Tokenizer *t);
void tokenizer_add_added(Tokenizer *t, const char *content, int id);

// GPT-2 byte <-> printable code point table.
uint32_t bytelevel_char(uint8_t byte);
int bytelevel_byte(uint32_t cp);  // -1 when cp is not one of the 256 printable stand-ins

// Encoders of one segment that holds no added token.
void wordpiece_encode_segment(const Tokenizer *t, const char *s, size_t n, IdBuf *out);
void bpe_encode_segment(const Tokenizer *t, const char *s, size_t n, IdBuf *out);

// Pre-tokenizers, shared with training.  wordpiece_split normalises with t's BertNormalizer
// flags and calls fn on every word (code points); bpe_split calls fn on every GPT-2
// pre-token (bytes of s, which must be valid UTF-8).
typedef void (*WordpieceWordFn)(void *ctx, const uint32_t *w, size_t m);
typedef void (*BpeWordFn)(void *ctx, const char *s, size_t n);
void wordpiece_split(const Tokenizer *t, const char *s, size_t n, WordpieceWordFn fn, void *ctx);
void bpe_split(const char *s, size_t n, BpeWordFn fn, void *ctx);

// Files (tokenizer_load.c, tokenizer_json.c).
struct cJSON;
Tokenizer *tokenizer_load_json(const char *path);
struct cJSON *tok_parse_json(const char *path, const char *buf, size_t len);
char **tok_vocab_from_json(const char *path, const struct cJSON *obj, const char *what, int *n);
// `vocab` names the vocabulary's file in errors (the merges may live in another file).
void tok_add_merge(Tokenizer *t, const char *path, const char *vocab, int line, const char *a,
                   size_t la, const char *b, size_t lb, int rank);

#endif
