// Text readers: JSON lines, WikiExtractor <doc> blocks (plain-text books: data/corpus_book.c).
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/byte_source.h"
#include "data/corpus.h"
#include "data/json_nul.h"
#include "data/strbuf.h"
#include "data/wikitext.h"


static void emit(CorpusDocFn fn, void *ctx, CorpusStats *stats, const char *s, size_t n) {
    if (n == 0) {
        stats->empty++;
        return;
    }
    stats->documents++;
    stats->bytes_kept += (long long)n;
    fn(ctx, s, n);
}

// Text whose every line is a paragraph (JSON lines, WikiExtractor): lines trimmed, whitespace
// runs collapsed, empty lines dropped.
static void lines_as_paragraphs(const char *s, size_t n, StrBuf *out) {
    strbuf_clear(out);
    size_t i = 0;
    while (i < n) {
        const char *nl = memchr(s + i, '\n', n - i);
        size_t e = nl ? (size_t)(nl - s) : n;
        bool space = false, any = false;
        for (size_t k = i; k < e; k++) {
            char c = s[k];
            if (c == ' ' || c == '\t' || c == '\r') {
                space = any;
                continue;
            }
            if (!any && out->len) strbuf_putc(out, '\n');
            if (space) strbuf_putc(out, ' ');
            strbuf_putc(out, c);
            space = false;
            any = true;
        }
        i = e + 1;
    }
}

// A document that opens with its title repeats a heading, which the readers drop (as the
// WikiExtractor reader drops its repeated title line); compared after the same whitespace
// normalisation as the text.
static void drop_title_line(StrBuf *doc, const char *title) {
    StrBuf t = {0};
    lines_as_paragraphs(title, strlen(title), &t);
    if (t.len && doc->len >= t.len && memcmp(doc->s, t.s, t.len) == 0 &&
        (doc->len == t.len || doc->s[t.len] == '\n')) {
        size_t cut = doc->len == t.len ? t.len : t.len + 1;
        memmove(doc->s, doc->s + cut, doc->len - cut + 1);
        doc->len -= cut;
    }
    strbuf_free(&t);
}

void corpus_read_jsonl_source(ByteSource *src, const char *file, const char *text_key,
                              const char *title_key, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    char *line = NULL;
    size_t len = 0, cap = 0;
    long long lineno = 0, offset = 0;
    StrBuf doc = {0};
    while (byte_source_getline(src, &line, &len, &cap)) {
        lineno++;
        long long line_offset = offset;
        offset = byte_source_offset(src);
        if (stats) stats->bytes_in += offset - line_offset;
        corpus_check_utf8(file, line, len, line_offset);
        size_t a = 0;
        while (a < len && isspace((unsigned char)line[a])) a++;
        if (a == len) continue;
        // A NUL would end the decoded C string there and drop the rest of the document: a raw
        // one is not JSON, an escaped one becomes U+FFFD and is counted.
        const char *raw_nul = memchr(line, 0, len);
        if (raw_nul)
            mhe_fail_at(file, (int)lineno, (int)(raw_nul - line) + 1,
                        "a raw NUL byte: JSON strings must escape control characters (\\u0000)");
        if (stats) stats->nul_replaced += (long long)json_replace_nul_escapes(line, len);
        cJSON *obj = cJSON_ParseWithLength(line, len);
        if (!obj) {
            const char *at = cJSON_GetErrorPtr();
            int col = at && at >= line && at <= line + len ? (int)(at - line) + 1 : 1;
            mhe_fail_at(file, (int)lineno, col, "malformed JSON line");
        }
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, text_key);
        if (!cJSON_IsObject(obj) || !cJSON_IsString(text))
            mhe_fail_at(file, (int)lineno, 1, "expected a JSON object with a string \"%s\" field", text_key);
        const cJSON *title = cJSON_GetObjectItemCaseSensitive(obj, title_key);
        if (title && !cJSON_IsString(title) && !cJSON_IsNull(title))
            mhe_fail_at(file, (int)lineno, 1, "\"%s\" (the title) must be a string or null", title_key);
        lines_as_paragraphs(text->valuestring, strlen(text->valuestring), &doc);
        if (cJSON_IsString(title) && doc.len) drop_title_line(&doc, title->valuestring);
        emit(fn, ctx, stats, doc.s ? doc.s : "", doc.len);
        cJSON_Delete(obj);
    }
    strbuf_free(&doc);
    free(line);
}

void corpus_read_jsonl_stream(FILE *f, const char *name, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    ByteSource *src = byte_source_open_stream(f, name);
    corpus_read_jsonl_source(src, name, corpus_text_column(), corpus_title_column(), fn, ctx, stats);
    byte_source_close(src);
}

void corpus_read_jsonl(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    ByteSource *src = byte_source_open_threads(file, threads);
    corpus_read_jsonl_source(src, file, corpus_text_column(), corpus_title_column(), fn, ctx, stats);
    byte_source_close(src);
}

// Value of attribute `name` in a <doc ...> line, or "" (into buf).
static void doc_attr(const char *line, const char *name, char *buf, size_t cap) {
    buf[0] = 0;
    char key[64];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *p = strstr(line, key);
    if (!p) return;
    p += strlen(key);
    const char *q = strchr(p, '"');
    if (!q) return;
    size_t n = (size_t)(q - p) < cap - 1 ? (size_t)(q - p) : cap - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
}

// One extracted article's text (without its title line) to a document: WikiExtractor escapes
// <, > and & (and leaves some tags and magic words, such as <templatestyles/> and
// __NOEDITSECTION__): unescape, then clean like wikitext.
static void emit_extracted(const StrBuf *raw, StrBuf *unescaped, StrBuf *doc, CorpusDocFn fn, void *ctx,
                           CorpusStats *stats) {
    strbuf_clear(unescaped);
    for (size_t i = 0; i < raw->len;) {
        size_t k = raw->s[i] == '&' ? html_entity_decode(raw->s + i, raw->len - i, unescaped) : 0;
        if (k) i += k;
        else strbuf_putc(unescaped, raw->s[i++]);
    }
    wikitext_clean(unescaped->s ? unescaped->s : "", unescaped->len, doc);
    emit(fn, ctx, stats, doc->s ? doc->s : "", doc->len);
}

// WikiExtractor --json: one object per line, {"id", "revid", "url", "title", "text"}; "text"
// may repeat the title as its first line (dropped like the <doc> form's).
static void wikiextractor_json_line(const char *file, long long lineno, char *line, size_t len, StrBuf *raw,
                                    StrBuf *unescaped, StrBuf *doc, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    const char *raw_nul = memchr(line, 0, len);  // as corpus_read_jsonl_source: never a cut document
    if (raw_nul)
        mhe_fail_at(file, (int)lineno, (int)(raw_nul - line) + 1,
                    "a raw NUL byte: JSON strings must escape control characters (\\u0000)");
    if (stats) stats->nul_replaced += (long long)json_replace_nul_escapes(line, len);
    cJSON *obj = cJSON_ParseWithLength(line, len);
    if (!obj) {
        const char *at = cJSON_GetErrorPtr();
        int col = at && at >= line && at <= line + len ? (int)(at - line) + 1 : 1;
        mhe_fail_at(file, (int)lineno, col, "malformed JSON line (WikiExtractor --json output)");
    }
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(obj, "text");
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(obj, "title");
    if (!cJSON_IsObject(obj) || !cJSON_IsString(text))
        mhe_fail_at(file, (int)lineno, 1, "expected a JSON object with a string \"text\" field (WikiExtractor --json)");
    const char *t = text->valuestring;
    if (cJSON_IsString(title) && title->valuestring[0]) {
        size_t tl = strlen(title->valuestring);
        if (strncmp(t, title->valuestring, tl) == 0 && (t[tl] == '\n' || t[tl] == 0)) t += tl + (t[tl] == '\n');
    }
    strbuf_clear(raw);
    strbuf_append(raw, t, strlen(t));
    emit_extracted(raw, unescaped, doc, fn, ctx, stats);
    cJSON_Delete(obj);
}

void corpus_read_wikiextractor(const char *file, int threads, CorpusDocFn fn, void *ctx,
                               CorpusStats *stats) {
    ByteSource *src = byte_source_open_threads(file, threads);
    char *line = NULL;
    size_t len = 0, cap = 0;
    long long lineno = 0, offset = 0, open_line = 0;
    bool in_doc = false, first = false;
    int json = -1;  // the form, decided by the first non-blank line: <doc> blocks or --json lines
    char title[1024];
    StrBuf raw = {0}, doc = {0}, unescaped = {0};
    while (byte_source_getline(src, &line, &len, &cap)) {
        lineno++;
        long long line_offset = offset;
        offset = byte_source_offset(src);
        if (stats) stats->bytes_in += offset - line_offset;
        corpus_check_utf8(file, line, len, line_offset);
        const size_t lead = strspn(line, " \t\r");
        if (json < 0 && lead < len) json = line[lead] == '{';
        if (json == 1) {
            if (lead < len) wikiextractor_json_line(file, lineno, line, len, &raw, &unescaped, &doc, fn, ctx, stats);
            continue;
        }
        if (!in_doc) {
            if (strncmp(line, "<doc", 4) == 0 && (line[4] == ' ' || line[4] == '>')) {
                in_doc = first = true;
                open_line = lineno;
                doc_attr(line, "title", title, sizeof title);
                strbuf_clear(&raw);
            } else if (len && lead != len) {
                mhe_fail_at(file, (int)lineno, 1, "expected <doc ...> (WikiExtractor output; the --json form "
                            "has one JSON object per line throughout)");
            }
            continue;
        }
        if (strcmp(line, "</doc>") == 0) {
            in_doc = false;
            emit_extracted(&raw, &unescaped, &doc, fn, ctx, stats);
            continue;
        }
        // WikiExtractor repeats the title as the first line: a heading, dropped like wiki ones.
        if (first && strcmp(line, title) == 0) {
            first = false;
            continue;
        }
        first = false;
        strbuf_append(&raw, line, len);
        strbuf_putc(&raw, '\n');
    }
    if (in_doc) mhe_fail_at(file, (int)open_line, 1, "<doc> block never closed by </doc>");
    free(line);
    strbuf_free(&raw);
    strbuf_free(&doc);
    strbuf_free(&unescaped);
    byte_source_close(src);
}
