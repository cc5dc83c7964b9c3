// Tokenizers: BERT WordPiece and GPT-2 byte-level BPE, loaded from the usual files or trained
// from text.  Ids equal those of Hugging Face `tokenizers` on the same files and text.
// A loaded Tokenizer is read-only: tokenizer_encode may run concurrently from many threads.
#ifndef MHE_DATA_TOKENIZER_H
#define MHE_DATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The two tokenizer families (config.h names them in data.tokenizer_kind).
typedef enum { TOK_WORDPIECE, TOK_BPE } TokenizerKind;

typedef struct Tokenizer Tokenizer;

// Growable array of token ids.  Zero-initialise ({0}) before first use; free with idbuf_free.
typedef struct {
    int32_t *ids;
    size_t len, cap;
} IdBuf;

void idbuf_push(IdBuf *b, int32_t id);
void idbuf_clear(IdBuf *b);  // len = 0, keeps the memory
void idbuf_free(IdBuf *b);

// Special ids, -1 when the vocabulary has none.  WordPiece: [CLS] [SEP] [MASK] [PAD] [UNK];
// BPE: eos = <|endoftext|> (GPT-2's document separator; cls/sep/mask/pad/unk are -1).
typedef struct {
    int cls, sep, mask, pad, unk, eos;
} SpecialIds;

// Loads by file name: "*.txt" = WordPiece vocab.txt (uncased: lowercase + strip accents),
// "*.json" = tokenizer.json when it has a "model" object (WordPiece or BPE from model.type),
// otherwise a GPT-2 vocab.json with merges.txt beside it.  A directory loads its
// tokenizer.json, else vocab.json(+merges.txt), else vocab.txt.  Malformed input exits 2 with
// "file:line:col: ..." or "file: byte N: ...".
Tokenizer *tokenizer_load(const char *path);
Tokenizer *tokenizer_load_wordpiece_vocab(const char *vocab_txt, bool lowercase);
Tokenizer *tokenizer_load_bpe_files(const char *vocab_json, const char *merges_txt);
void tokenizer_free(Tokenizer *t);

// Appends the ids of `text` (UTF-8, len bytes; no special tokens added around it) to out.
// Invalid UTF-8 bytes are replaced by U+FFFD first (as Python's errors="replace" does).
void tokenizer_encode(const Tokenizer *t, const char *text, size_t len, IdBuf *out);

int tokenizer_vocab_size(const Tokenizer *t);
const char *tokenizer_id_to_token(const Tokenizer *t, int id);  // NULL when out of range
int tokenizer_token_to_id(const Tokenizer *t, const char *tok);  // -1 if absent
TokenizerKind tokenizer_kind(const Tokenizer *t);
SpecialIds tokenizer_special_ids(const Tokenizer *t);
bool tokenizer_lowercase(const Tokenizer *t);  // WordPiece uncased (always false for BPE)

// For whole-word masking: true when token `id` continues the previous word (WordPiece "##x";
// BPE: a token whose first byte is not a space, i.e. not starting with 'Ġ').  Special tokens
// and out-of-range ids are never continuations.
bool tokenizer_is_continuation(const Tokenizer *t, int id);

// Writes DIR/tokenizer.json (which HF `tokenizers` loads with Tokenizer.from_file) plus
// DIR/vocab.txt for WordPiece or DIR/vocab.json + DIR/merges.txt for BPE.  Creates DIR.
// Returns 0, or exits 1 on an I/O failure.
int tokenizer_save(const Tokenizer *t, const char *dir);

// Training (mhetrain tokenizer train).  `paths` are .txt files or folders of .txt files;
// every line is one training text.  WordPiece: HF WordPieceTrainer semantics (BPE merges on
// BERT-pretokenized words with "##" continuations; [PAD] [UNK] [CLS] [SEP] [MASK] first).
// BPE: HF byte-level BPE trainer semantics (256 byte symbols, <|endoftext|> special).
typedef struct {
    TokenizerKind kind;
    int vocab_size;
    bool lowercase;      // WordPiece only
    int min_frequency;   // pairs seen fewer times are never merged (HF default 0)
    int threads;         // word-counting threads (<= 1: none); the result does not depend on it
} TokenizerTrainOptions;

Tokenizer *tokenizer_train(const TokenizerTrainOptions *opt, int n_paths, char **paths);

#endif
