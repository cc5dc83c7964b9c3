// Reading vocab.txt, vocab.json + merges.txt and choosing a loader from a path.  Every
// malformed input ends in "file:line:col: ..." and exit status 2.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fs.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_text.h"

// Line and column (1-based, in bytes) of byte `at` of buf.
static void line_col(const char *buf, size_t at, int *line, int *col) {
    *line = 1;
    size_t ls = 0;
    for (size_t i = 0; i < at; i++)
        if (buf[i] == '\n') {
            (*line)++;
            ls = i + 1;
        }
    *col = (int)(at - ls) + 1;
}

static void check_utf8(const char *path, const char *buf, size_t len) {
    long long bad = utf8_first_invalid(buf, len);
    if (bad >= 0) {
        int line, col;
        line_col(buf, (size_t)bad, &line, &col);
        mhe_fail_at(path, line, col, "invalid UTF-8 (byte 0x%02x)", (unsigned)(uint8_t)buf[bad]);
    }
}

Tokenizer *tokenizer_load_wordpiece_vocab(const char *vocab_txt, bool lowercase) {
    size_t len;
    char *buf = mhe_read_file(vocab_txt, &len);
    check_utf8(vocab_txt, buf, len);
    int cap = 1024, n = 0;
    char **tokens = mhe_malloc((size_t)cap * sizeof *tokens);
    size_t i = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        size_t te = e;
        // HF keeps line.trim_end(): drop trailing ASCII blanks (and the \r of CRLF files).
        while (te > i && (buf[te - 1] == ' ' || buf[te - 1] == '\t' || buf[te - 1] == '\r')) te--;
        if (te == i) mhe_fail_at(vocab_txt, n + 1, 1, "empty token (expected one token per line)");
        if (memchr(buf + i, '\0', te - i))
            mhe_fail_at(vocab_txt, n + 1, 1, "NUL byte in token");
        if (n == cap) tokens = mhe_realloc(tokens, (size_t)(cap *= 2) * sizeof *tokens);
        tokens[n] = mhe_malloc(te - i + 1);
        memcpy(tokens[n], buf + i, te - i);
        tokens[n][te - i] = 0;
        n++;
        i = e + 1;
    }
    free(buf);
    if (n == 0) mhe_fail_at(vocab_txt, 1, 1, "empty vocabulary (expected one token per line)");
    Tokenizer *t = tokenizer_new(TOK_WORDPIECE, n, tokens);
    for (int id = 0; id < n; id++) {
        int first = tokenizer_token_to_id(t, tokens[id]);
        if (first != id)
            mhe_fail_at(vocab_txt, id + 1, 1, "duplicate token \"%s\" (first on line %d)",
                        tokens[id], first + 1);
    }
    t->lowercase = t->strip_accents = lowercase;
    tokenizer_finish(t);
    if (t->unk < 0) mhe_fail_at(vocab_txt, 0, 0, "no [UNK] token in the vocabulary");
    // BertWordPieceTokenizer registers these as special tokens matched verbatim in the text.
    const char *specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int s = 0; s < 5; s++) {
        int id = tokenizer_token_to_id(t, specials[s]);
        if (id >= 0) tokenizer_add_added(t, specials[s], id);
    }
    return t;
}

// Parses JSON text (which must be UTF-8, as RFC 8259 says); an invalid byte or a syntax error
// is reported at its line and column.  Every JSON file we read goes through here: tokenizer
// files and the shards' manifest.
cJSON *tok_parse_json(const char *path, const char *buf, size_t len) {
    check_utf8(path, buf, len);
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!j) {
        size_t at = end && end >= buf && end <= buf + len ? (size_t)(end - buf) : 0;
        int line, col;
        line_col(buf, at, &line, &col);
        mhe_fail_at(path, line, col, "invalid JSON (expected a JSON value here)");
    }
    return j;
}

// Reads a {"token": id, ...} object into an id-indexed array; ids must be 0..N-1.
char **tok_vocab_from_json(const char *path, const cJSON *obj, const char *what, int *n_out) {
    char pre[64];
    snprintf(pre, sizeof pre, "%.40s%s", what, what[0] ? ": " : "");
    if (!cJSON_IsObject(obj)) mhe_fail_at(path, 0, 0, "%sexpected an object {\"token\": id}", pre);
    int n = cJSON_GetArraySize(obj);
    if (n == 0) mhe_fail_at(path, 0, 0, "%sempty vocabulary", pre);
    char **tokens = mhe_calloc((size_t)n, sizeof *tokens);
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        int id = (int)v;
        if (!cJSON_IsNumber(it) || v != (double)id || id < 0)
            mhe_fail_at(path, 0, 0, "%stoken \"%s\": expected a non-negative integer id", pre,
                        it->string);
        if (id >= n)
            mhe_fail_at(path, 0, 0, "%stoken \"%s\" has id %d but there are only %d tokens "
                        "(expected ids 0..%d without gaps)", pre, it->string, id, n, n - 1);
        if (tokens[id])
            mhe_fail_at(path, 0, 0, "%sid %d used by both \"%s\" and \"%s\"", pre, id,
                        tokens[id], it->string);
        if (strlen(it->string) == 0) mhe_fail_at(path, 0, 0, "%sempty token string", pre);
        tokens[id] = mhe_strdup(it->string);
    }
    *n_out = n;
    return tokens;
}

// Adds merge `rank` "a b"; `where` names it in errors.
void tok_add_merge(Tokenizer *t, const char *path, const char *vocab, int line, const char *a,
                   size_t la, const char *b, size_t lb, int rank) {
    int ia = strmap_get(&t->vocab, a, la), ib = strmap_get(&t->vocab, b, lb);
    if (ia < 0 || ib < 0)
        mhe_fail_at(path, line, ia < 0 ? 1 : (int)la + 2, "merge token \"%.*s\" is not in %s",
                    ia < 0 ? (int)la : (int)lb, ia < 0 ? a : b, vocab);
    char *ab = mhe_malloc(la + lb + 1);
    memcpy(ab, a, la);
    memcpy(ab + la, b, lb);
    ab[la + lb] = 0;  // (the message below once printed whatever followed on the heap)
    int m = strmap_get(&t->vocab, ab, la + lb);
    if (m < 0) mhe_fail_at(path, line, 1, "merged token \"%s\" is not in %s", ab, vocab);
    free(ab);
    pairmap_put(&t->merges, ia, ib, rank, m);
    t->n_merges = rank + 1;
}

Tokenizer *tokenizer_load_bpe_files(const char *vocab_json, const char *merges_txt) {
    size_t len;
    char *buf = mhe_read_file(vocab_json, &len);
    check_utf8(vocab_json, buf, len);
    cJSON *j = tok_parse_json(vocab_json, buf, len);
    int n;
    char **tokens = tok_vocab_from_json(vocab_json, j, "", &n);
    cJSON_Delete(j);
    free(buf);
    Tokenizer *t = tokenizer_new(TOK_BPE, n, tokens);
    buf = mhe_read_file(merges_txt, &len);
    check_utf8(merges_txt, buf, len);
    pairmap_init(&t->merges, 1024);
    size_t i = 0;
    int line = 0, rank = 0;
    while (i < len) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        line++;
        size_t te = e;
        if (te > i && buf[te - 1] == '\r') te--;
        if (!(line == 1 && te - i >= 8 && memcmp(buf + i, "#version", 8) == 0)) {
            const char *sp = memchr(buf + i, ' ', te - i);
            if (!sp || sp == buf + i || sp + 1 == buf + te || memchr(sp + 1, ' ', (size_t)(buf + te - sp - 1)))
                mhe_fail_at(merges_txt, line, 1, "expected two tokens separated by one space");
            tok_add_merge(t, merges_txt, vocab_json, line, buf + i, (size_t)(sp - buf - i), sp + 1,
                          (size_t)(buf + te - sp - 1), rank++);
        }
        i = e + 1;
    }
    free(buf);
    tokenizer_finish(t);
    if (t->special.eos >= 0) tokenizer_add_added(t, "<|endoftext|>", t->special.eos);
    return t;
}

static char *sibling(const char *path, const char *name) {
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path + 1) : 0;
    char *r = mhe_malloc(dl + strlen(name) + 1);
    memcpy(r, path, dl);
    strcpy(r + dl, name);
    return r;
}

static bool json_has_model(const char *path) {
    size_t len;
    char *buf = mhe_read_file(path, &len);
    cJSON *j = tok_parse_json(path, buf, len);
    bool has = cJSON_IsObject(j) && cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "model"));
    cJSON_Delete(j);
    free(buf);
    return has;
}

Tokenizer *tokenizer_load(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) mhe_fail("%s: no such tokenizer file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        const char *names[] = {"tokenizer.json", "vocab.json", "vocab.txt"};
        for (int k = 0; k < 3; k++) {
            size_t pl = strlen(path);
            char *p = mhe_malloc(pl + strlen(names[k]) + 2);
            sprintf(p, "%s/%s", path, names[k]);
            if (mhe_is_file(p)) {
                Tokenizer *t = tokenizer_load(p);
                free(p);
                return t;
            }
            free(p);
        }
        mhe_fail("%s: no tokenizer.json, vocab.json or vocab.txt in this directory", path);
    }
    if (mhe_has_suffix(path, "merges.txt")) {
        char *v = sibling(path, "vocab.json");
        Tokenizer *t = tokenizer_load_bpe_files(v, path);
        free(v);
        return t;
    }
    if (mhe_has_suffix(path, ".txt")) return tokenizer_load_wordpiece_vocab(path, true);
    if (mhe_has_suffix(path, ".json")) {
        if (json_has_model(path)) return tokenizer_load_json(path);
        char *m = sibling(path, "merges.txt");
        if (!mhe_is_file(m)) {
            // Also accept the "<prefix>-vocab.json" / "<prefix>-merges.txt" naming.
            size_t pl = strlen(path);
            if (mhe_has_suffix(path, "vocab.json")) {
                free(m);
                m = mhe_malloc(pl + 2);
                memcpy(m, path, pl - 10);
                strcpy(m + pl - 10, "merges.txt");
            }
        }
        if (!mhe_is_file(m)) mhe_fail("%s: no merges.txt beside this vocab.json (looked for %s)", path, m);
        Tokenizer *t = tokenizer_load_bpe_files(path, m);
        free(m);
        return t;
    }
    mhe_fail("%s: unknown tokenizer file type (expected vocab.txt, tokenizer.json, vocab.json "
             "or a directory holding one)", path);
}
