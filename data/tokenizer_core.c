// Tokenizer object: vocabulary maps, accessors, added-token splitting and encode dispatch.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_text.h"

void idbuf_push(IdBuf *b, int32_t id) {
    if (b->len == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 256;
        b->ids = mhe_realloc(b->ids, b->cap * sizeof *b->ids);
    }
    b->ids[b->len++] = id;
}

void idbuf_clear(IdBuf *b) { b->len = 0; }

void idbuf_free(IdBuf *b) {
    free(b->ids);
    b->ids = NULL;
    b->len = b->cap = 0;
}

uint64_t tok_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

static uint32_t table_size(int n) {
    uint32_t sz = 16;
    while (sz < (uint32_t)n * 2u + 2u) sz <<= 1;
    return sz;
}

void strmap_build(StrMap *m, int n, const char *const *keys, const uint32_t *lens) {
    uint32_t sz = table_size(n);
    m->slots = mhe_calloc(sz, sizeof *m->slots);
    m->mask = sz - 1;
    m->keys = keys;
    m->key_lens = lens;
    for (int id = 0; id < n; id++) {
        if (!keys[id]) continue;
        uint32_t h = (uint32_t)tok_hash_bytes(keys[id], lens[id]) & m->mask;
        while (m->slots[h]) h = (h + 1) & m->mask;
        m->slots[h] = (uint32_t)id + 1;
    }
}

int strmap_get(const StrMap *m, const char *s, size_t n) {
    uint32_t h = (uint32_t)tok_hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slots[h];
        if (!v) return -1;
        uint32_t id = v - 1;
        if (m->key_lens[id] == n && memcmp(m->keys[id], s, n) == 0) return (int)id;
        h = (h + 1) & m->mask;
    }
}

void strmap_free(StrMap *m) {
    free(m->slots);
    m->slots = NULL;
}

static uint64_t pair_key(int a, int b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

static uint32_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xFF51AFD7ED558CCDull;
    k ^= k >> 33;
    return (uint32_t)k;
}

void pairmap_init(PairMap *m, int expected) {
    uint32_t sz = table_size(expected);
    m->keys = mhe_calloc(sz, sizeof *m->keys);
    m->rank = mhe_malloc(sz * sizeof *m->rank);
    m->merged = mhe_malloc(sz * sizeof *m->merged);
    m->mask = sz - 1;
    m->count = 0;
}

bool pairmap_put(PairMap *m, int a, int b, int rank, int merged) {
    if ((uint32_t)(m->count + 1) * 2u > m->mask) {  // grow
        PairMap bigger;
        pairmap_init(&bigger, (int)(m->mask + 1));
        for (uint32_t i = 0; i <= m->mask; i++) {
            if (!m->keys[i]) continue;
            uint32_t h = pair_hash(m->keys[i]) & bigger.mask;
            while (bigger.keys[h]) h = (h + 1) & bigger.mask;
            bigger.keys[h] = m->keys[i];
            bigger.rank[h] = m->rank[i];
            bigger.merged[h] = m->merged[i];
        }
        bigger.count = m->count;
        pairmap_free(m);
        *m = bigger;
    }
    uint64_t k = pair_key(a, b);
    uint32_t h = pair_hash(k) & m->mask;
    while (m->keys[h]) {
        if (m->keys[h] == k) {  // a repeated merge takes the later rank, as HF's map does
            m->rank[h] = rank;
            m->merged[h] = merged;
            return false;
        }
        h = (h + 1) & m->mask;
    }
    m->keys[h] = k;
    m->rank[h] = rank;
    m->merged[h] = merged;
    m->count++;
    return true;
}

bool pairmap_get(const PairMap *m, int a, int b, int *rank, int *merged) {
    uint64_t k = pair_key(a, b);
    uint32_t h = pair_hash(k) & m->mask;
    for (;;) {
        uint64_t v = m->keys[h];
        if (!v) return false;
        if (v == k) {
            *rank = m->rank[h];
            *merged = m->merged[h];
            return true;
        }
        h = (h + 1) & m->mask;
    }
}

void pairmap_free(PairMap *m) {
    free(m->keys);
    free(m->rank);
    free(m->merged);
    m->keys = NULL;
    m->rank = m->merged = NULL;
}

uint32_t bytelevel_char(uint8_t byte) {
    // GPT-2 keeps printable Latin-1 bytes as themselves and moves the other 68 bytes, in
    // order, to U+0100 onwards so every byte is a visible character.
    if ((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174) return byte;
    int n = 0;
    for (int b = 0; b < byte; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) n++;
    return 256u + (uint32_t)n;
}

int bytelevel_byte(uint32_t cp) {
    if (cp < 256) {
        if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174) return (int)cp;
        return -1;
    }
    if (cp >= 256 + 68) return -1;
    int n = 0;
    for (int b = 0; b < 256; b++)
        if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) && n++ == (int)cp - 256)
            return b;
    return -1;
}

Tokenizer *tokenizer_new(TokenizerKind kind, int n, char **tokens_taken) {
    Tokenizer *t = mhe_calloc(1, sizeof *t);
    t->kind = kind;
    t->n_vocab = n;
    t->tokens = tokens_taken;
    t->token_len = mhe_malloc((size_t)(n > 0 ? n : 1) * sizeof *t->token_len);
    for (int i = 0; i < n; i++) t->token_len[i] = tokens_taken[i] ? (uint32_t)strlen(tokens_taken[i]) : 0;
    strmap_build(&t->vocab, n, (const char *const *)t->tokens, t->token_len);
    t->special = (SpecialIds){-1, -1, -1, -1, -1, -1};
    t->clean_text = t->chinese_chars = true;
    t->max_word_chars = 100;
    t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    return t;
}

static int added_cmp(const void *a, const void *b) {
    const AddedToken *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : 0;
}

void tokenizer_add_added(Tokenizer *t, const char *content, int id) {
    if (!content[0]) return;
    for (int i = 0; i < t->n_added; i++)
        if (strcmp(t->added[i].content, content) == 0) return;
    t->added = mhe_realloc(t->added, (size_t)(t->n_added + 1) * sizeof *t->added);
    t->added[t->n_added++] = (AddedToken){mhe_strdup(content), strlen(content), id};
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_cmp);
}

void tokenizer_finish(Tokenizer *t) {
    SpecialIds *s = &t->special;
    if (t->kind == TOK_WORDPIECE) {
        s->cls = tokenizer_token_to_id(t, "[CLS]");
        s->sep = tokenizer_token_to_id(t, "[SEP]");
        s->mask = tokenizer_token_to_id(t, "[MASK]");
        s->pad = tokenizer_token_to_id(t, "[PAD]");
        if (t->unk < 0) t->unk = tokenizer_token_to_id(t, "[UNK]");
        s->unk = t->unk;
    } else {
        s->eos = tokenizer_token_to_id(t, "<|endoftext|>");
        for (int b = 0; b < 256; b++) {
            char buf[4];
            int k = utf8_put(buf, bytelevel_char((uint8_t)b));
            t->byte_id[b] = strmap_get(&t->vocab, buf, (size_t)k);
        }
    }
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_vocab; i++) free(t->tokens[i]);
    free(t->tokens);
    free(t->token_len);
    strmap_free(&t->vocab);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    if (t->merges.keys) pairmap_free(&t->merges);
    free(t);
}

static void encode_plain(const Tokenizer *t, const char *s, size_t n, IdBuf *out) {
    if (n == 0) return;
    if (t->kind == TOK_WORDPIECE)
        wordpiece_encode_segment(t, s, n, out);
    else
        bpe_encode_segment(t, s, n, out);
}

void tokenizer_encode(const Tokenizer *t, const char *text, size_t len, IdBuf *out) {
    if (t->n_added == 0) {
        encode_plain(t, text, len, out);
        return;
    }
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        for (int a = 0; a < t->n_added; a++) {
            const AddedToken *at = &t->added[a];
            if (at->content[0] != text[i] || at->len > len - i ||
                memcmp(at->content, text + i, at->len) != 0)
                continue;
            encode_plain(t, text + start, i - start, out);
            idbuf_push(out, at->id);
            i += at->len - 1;
            start = i + 1;
            break;
        }
    }
    encode_plain(t, text + start, len - start, out);
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->n_vocab; }

const char *tokenizer_id_to_token(const Tokenizer *t, int id) {
    return id >= 0 && id < t->n_vocab ? t->tokens[id] : NULL;
}

int tokenizer_token_to_id(const Tokenizer *t, const char *tok) {
    return strmap_get(&t->vocab, tok, strlen(tok));
}

TokenizerKind tokenizer_kind(const Tokenizer *t) { return t->kind; }
SpecialIds tokenizer_special_ids(const Tokenizer *t) { return t->special; }
bool tokenizer_lowercase(const Tokenizer *t) { return t->kind == TOK_WORDPIECE && t->lowercase; }

bool tokenizer_is_continuation(const Tokenizer *t, int id) {
    if (id < 0 || id >= t->n_vocab || !t->tokens[id]) return false;
    for (int a = 0; a < t->n_added; a++)
        if (t->added[a].id == id) return false;
    const char *s = t->tokens[id];
    if (t->kind == TOK_WORDPIECE) return s[0] == '#' && s[1] == '#' && s[2];
    return !((uint8_t)s[0] == 0xC4 && (uint8_t)s[1] == 0xA0);  // 'Ġ' = U+0120, a space
}
