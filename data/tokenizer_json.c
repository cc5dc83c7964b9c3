// Hugging Face tokenizer.json: loading the WordPiece and byte-level BPE pipelines we
// reproduce, and saving ours in the same format (tokenizers 0.19 layout).
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fs.h"
#include "data/tokenizer_internal.h"
#include "data/unicode_text.h"

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static const char *type_of(const cJSON *o) {
    const cJSON *ty = get(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

// A boolean field; `def` when absent or null.
static bool flag(const char *path, const cJSON *o, const char *key, bool def, const char *where) {
    const cJSON *v = get(o, key);
    if (!v || cJSON_IsNull(v)) return def;
    if (!cJSON_IsBool(v)) mhe_fail_at(path, 0, 0, "%s.%s: expected true or false", where, key);
    return cJSON_IsTrue(v);
}

static void load_wordpiece(Tokenizer **tp, const char *path, const cJSON *root, const cJSON *model) {
    int n;
    char **tokens = tok_vocab_from_json(path, get(model, "vocab"), "model.vocab", &n);
    Tokenizer *t = tokenizer_new(TOK_WORDPIECE, n, tokens);
    const cJSON *pre = get(model, "continuing_subword_prefix");
    if (pre && !(cJSON_IsString(pre) && strcmp(pre->valuestring, "##") == 0))
        mhe_fail_at(path, 0, 0, "model.continuing_subword_prefix: only \"##\" is supported");
    const cJSON *mx = get(model, "max_input_chars_per_word");
    if (mx) {
        if (!cJSON_IsNumber(mx) || mx->valueint < 1)
            mhe_fail_at(path, 0, 0, "model.max_input_chars_per_word: expected a positive integer");
        t->max_word_chars = mx->valueint;
    }
    const cJSON *unk = get(model, "unk_token");
    const char *unk_s = cJSON_IsString(unk) ? unk->valuestring : "[UNK]";
    t->unk = tokenizer_token_to_id(t, unk_s);
    if (t->unk < 0) mhe_fail_at(path, 0, 0, "model.unk_token \"%s\" is not in model.vocab", unk_s);
    const cJSON *norm = get(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const char *ty = type_of(norm);
        if (!ty || strcmp(ty, "BertNormalizer") != 0)
            mhe_fail_at(path, 0, 0, "normalizer: only BertNormalizer (or null) is supported for WordPiece, got %s",
                        ty ? ty : "no type");
        t->clean_text = flag(path, norm, "clean_text", true, "normalizer");
        t->chinese_chars = flag(path, norm, "handle_chinese_chars", true, "normalizer");
        t->lowercase = flag(path, norm, "lowercase", true, "normalizer");
        t->strip_accents = flag(path, norm, "strip_accents", t->lowercase, "normalizer");
    } else {
        t->clean_text = t->chinese_chars = t->lowercase = t->strip_accents = false;
    }
    const cJSON *pt = get(root, "pre_tokenizer");
    const char *pty = type_of(pt);
    if (!pty || strcmp(pty, "BertPreTokenizer") != 0)
        mhe_fail_at(path, 0, 0, "pre_tokenizer: only BertPreTokenizer is supported for WordPiece");
    *tp = t;
}

static void load_bpe(Tokenizer **tp, const char *path, const cJSON *root, const cJSON *model) {
    int n;
    char **tokens = tok_vocab_from_json(path, get(model, "vocab"), "model.vocab", &n);
    Tokenizer *t = tokenizer_new(TOK_BPE, n, tokens);
    const char *must_null[] = {"continuing_subword_prefix", "end_of_word_suffix", "dropout"};
    for (int k = 0; k < 3; k++) {
        const cJSON *v = get(model, must_null[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            mhe_fail_at(path, 0, 0, "model.%s: only null is supported", must_null[k]);
    }
    if (flag(path, model, "byte_fallback", false, "model") || flag(path, model, "ignore_merges", false, "model"))
        mhe_fail_at(path, 0, 0, "model: byte_fallback and ignore_merges are not supported");
    const cJSON *merges = get(model, "merges");
    if (!cJSON_IsArray(merges)) mhe_fail_at(path, 0, 0, "model.merges: expected an array");
    pairmap_init(&t->merges, cJSON_GetArraySize(merges));
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) {
            const char *s = m->valuestring, *sp = strchr(s, ' ');
            if (sp && sp != s && sp[1] && !strchr(sp + 1, ' ')) {
                a = s; la = (size_t)(sp - s); b = sp + 1; lb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring; la = strlen(a);
            b = cJSON_GetArrayItem(m, 1)->valuestring; lb = strlen(b);
        }
        if (!a || !la || !lb)
            mhe_fail_at(path, 0, 0, "model.merges[%d]: expected \"left right\" or [\"left\", \"right\"]", rank);
        char where[4200];
        snprintf(where, sizeof where, "%s (model.merges[%d])", path, rank);
        tok_add_merge(t, where, "model.vocab", 0, a, la, b, lb, rank);
        rank++;
    }
    const cJSON *norm = get(root, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        mhe_fail_at(path, 0, 0, "normalizer: only null is supported for byte-level BPE");
    const cJSON *pt = get(root, "pre_tokenizer");
    const char *pty = type_of(pt);
    if (!pty || strcmp(pty, "ByteLevel") != 0)
        mhe_fail_at(path, 0, 0, "pre_tokenizer: only ByteLevel is supported for BPE");
    if (!flag(path, pt, "use_regex", true, "pre_tokenizer"))
        mhe_fail_at(path, 0, 0, "pre_tokenizer.use_regex: only true is supported");
    t->add_prefix_space = flag(path, pt, "add_prefix_space", true, "pre_tokenizer");
    *tp = t;
}

Tokenizer *tokenizer_load_json(const char *path) {
    size_t len;
    char *buf = mhe_read_file(path, &len);
    cJSON *root = tok_parse_json(path, buf, len);
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model)) mhe_fail_at(path, 0, 0, "missing \"model\" object");
    const char *ty = type_of(model);
    if (!ty) mhe_fail_at(path, 0, 0, "model.type: missing (expected \"WordPiece\" or \"BPE\")");
    Tokenizer *t = NULL;
    if (strcmp(ty, "WordPiece") == 0)
        load_wordpiece(&t, path, root, model);
    else if (strcmp(ty, "BPE") == 0)
        load_bpe(&t, path, root, model);
    else
        mhe_fail_at(path, 0, 0, "model.type \"%s\": expected \"WordPiece\" or \"BPE\"", ty);
    tokenizer_finish(t);
    const cJSON *added = get(root, "added_tokens");
    if (added && !cJSON_IsArray(added)) mhe_fail_at(path, 0, 0, "added_tokens: expected an array");
    int k = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, added) {
        const cJSON *id = get(a, "id"), *content = get(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
            mhe_fail_at(path, 0, 0, "added_tokens[%d]: expected \"id\" and \"content\"", k);
        int have = tokenizer_token_to_id(t, content->valuestring);
        if (have != id->valueint)
            mhe_fail_at(path, 0, 0, "added_tokens[%d]: unknown special token \"%s\" (id %d; the "
                        "vocabulary %s)", k, content->valuestring, id->valueint,
                        have < 0 ? "does not have it" : "gives it another id");
        tokenizer_add_added(t, content->valuestring, id->valueint);
        k++;
    }
    cJSON_Delete(root);
    free(buf);
    return t;
}

static cJSON *added_json(int id, const char *content) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddStringToObject(o, "content", content);
    cJSON_AddBoolToObject(o, "single_word", 0);
    cJSON_AddBoolToObject(o, "lstrip", 0);
    cJSON_AddBoolToObject(o, "rstrip", 0);
    cJSON_AddBoolToObject(o, "normalized", 0);
    cJSON_AddBoolToObject(o, "special", 1);
    return o;
}

static cJSON *bytelevel_json(bool prefix) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", prefix);
    cJSON_AddBoolToObject(o, "trim_offsets", 1);
    cJSON_AddBoolToObject(o, "use_regex", 1);
    return o;
}

static void write_text(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len || fclose(f) != 0)
        mhe_fatal("cannot write %s: %s", path, strerror(errno));
}

static char *join(const char *dir, const char *name) {
    char *p = mhe_malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

typedef struct { int a, b, rank; } MergeRow;

static int merge_cmp(const void *x, const void *y) {
    return ((const MergeRow *)x)->rank - ((const MergeRow *)y)->rank;
}

// Merges in rank order (recovered from the pair map).
static MergeRow *merges_in_order(const Tokenizer *t, int *count) {
    MergeRow *rows = mhe_malloc((size_t)(t->merges.count + 1) * sizeof *rows);
    int n = 0;
    for (uint32_t i = 0; i <= t->merges.mask; i++) {
        uint64_t k = t->merges.keys[i];
        if (!k) continue;
        k -= 1;
        rows[n++] = (MergeRow){(int)(k >> 32), (int)(uint32_t)k, t->merges.rank[i]};
    }
    qsort(rows, (size_t)n, sizeof *rows, merge_cmp);
    *count = n;
    return rows;
}

int tokenizer_save(const Tokenizer *t, const char *dir) {
    mhe_mkdirs(dir);
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    for (int id = 0; id < t->n_vocab; id++)
        for (int a = 0; a < t->n_added; a++)
            if (t->added[a].id == id) cJSON_AddItemToArray(added, added_json(id, t->added[a].content));
    cJSON *model = cJSON_CreateObject();
    cJSON *vocab = cJSON_CreateObject();
    for (int id = 0; id < t->n_vocab; id++)
        if (t->tokens[id]) cJSON_AddNumberToObject(vocab, t->tokens[id], id);
    size_t vlen = 0;
    for (int id = 0; id < t->n_vocab; id++) vlen += t->token_len[id] + 1;
    char *text = mhe_malloc(vlen + 1), *p = text;
    if (t->kind == TOK_WORDPIECE) {
        cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
        cJSON_AddStringToObject(norm, "type", "BertNormalizer");
        cJSON_AddBoolToObject(norm, "clean_text", t->clean_text);
        cJSON_AddBoolToObject(norm, "handle_chinese_chars", t->chinese_chars);
        cJSON_AddBoolToObject(norm, "strip_accents", t->strip_accents);
        cJSON_AddBoolToObject(norm, "lowercase", t->lowercase);
        cJSON *pre = cJSON_AddObjectToObject(root, "pre_tokenizer");
        cJSON_AddStringToObject(pre, "type", "BertPreTokenizer");
        cJSON_AddNullToObject(root, "post_processor");
        cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
        cJSON_AddStringToObject(dec, "type", "WordPiece");
        cJSON_AddStringToObject(dec, "prefix", "##");
        cJSON_AddBoolToObject(dec, "cleanup", 1);
        cJSON_AddStringToObject(model, "type", "WordPiece");
        cJSON_AddStringToObject(model, "unk_token", t->tokens[t->unk]);
        cJSON_AddStringToObject(model, "continuing_subword_prefix", "##");
        cJSON_AddNumberToObject(model, "max_input_chars_per_word", t->max_word_chars);
        cJSON_AddItemToObject(model, "vocab", vocab);
        for (int id = 0; id < t->n_vocab; id++) {
            memcpy(p, t->tokens[id], t->token_len[id]);
            p += t->token_len[id];
            *p++ = '\n';
        }
        char *vp = join(dir, "vocab.txt");
        write_text(vp, text, (size_t)(p - text));
        free(vp);
    } else {
        cJSON_AddNullToObject(root, "normalizer");
        cJSON_AddItemToObject(root, "pre_tokenizer", bytelevel_json(t->add_prefix_space));
        cJSON_AddItemToObject(root, "post_processor", bytelevel_json(true));
        cJSON_AddItemToObject(root, "decoder", bytelevel_json(true));
        cJSON_AddStringToObject(model, "type", "BPE");
        cJSON_AddNullToObject(model, "dropout");
        cJSON_AddNullToObject(model, "unk_token");
        cJSON_AddNullToObject(model, "continuing_subword_prefix");
        cJSON_AddNullToObject(model, "end_of_word_suffix");
        cJSON_AddBoolToObject(model, "fuse_unk", 0);
        cJSON_AddBoolToObject(model, "byte_fallback", 0);
        cJSON_AddItemToObject(model, "vocab", vocab);
        int nm;
        MergeRow *rows = merges_in_order(t, &nm);
        cJSON *marr = cJSON_AddArrayToObject(model, "merges");
        size_t mlen = 16;
        for (int i = 0; i < nm; i++) mlen += t->token_len[rows[i].a] + t->token_len[rows[i].b] + 2;
        char *mt = mhe_malloc(mlen), *q = mt;
        q += sprintf(q, "#version: 0.2\n");
        for (int i = 0; i < nm; i++) {
            q += sprintf(q, "%s %s", t->tokens[rows[i].a], t->tokens[rows[i].b]);
            cJSON_AddItemToArray(marr, cJSON_CreateString(q - t->token_len[rows[i].a] - t->token_len[rows[i].b] - 1));
            *q++ = '\n';
        }
        char *mp = join(dir, "merges.txt");
        write_text(mp, mt, (size_t)(q - mt));
        free(mp);
        free(mt);
        free(rows);
        char *vj = cJSON_PrintUnformatted(vocab);
        char *vp = join(dir, "vocab.json");
        write_text(vp, vj, strlen(vj));
        free(vp);
        free(vj);
    }
    free(text);
    cJSON_AddItemToObject(root, "model", model);
    char *js = cJSON_Print(root);
    char *jp = join(dir, "tokenizer.json");
    write_text(jp, js, strlen(js));
    free(jp);
    free(js);
    cJSON_Delete(root);
    return 0;
}
