// MediaWiki XML dumps through expat: one document per namespace-0 page that is not a redirect.
#include <expat.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/byte_source.h"
#include "data/corpus.h"
#include "data/strbuf.h"
#include "data/wikitext.h"

typedef enum { FIELD_NONE, FIELD_NS, FIELD_TEXT } Field;

typedef struct {
    const char *file;
    CorpusDocFn fn;
    void *ctx;
    CorpusStats *stats;
    int depth;          // element depth; a page is at depth 2 (mediawiki > page)
    int page_depth;     // depth of the open <page>, 0 when outside one
    bool redirect;
    Field field;
    StrBuf ns, text, clean;
} WikiState;

// Local name of an element: dumps use a default namespace, so names come bare.
static bool is(const XML_Char *name, const char *want) { return strcmp(name, want) == 0; }

static void on_start(void *ud, const XML_Char *name, const XML_Char **attrs) {
    (void)attrs;
    WikiState *w = ud;
    w->depth++;
    if (is(name, "page")) {
        w->page_depth = w->depth;
        w->redirect = false;
        strbuf_clear(&w->ns);
        strbuf_clear(&w->text);
        w->stats->pages++;
    } else if (w->page_depth) {
        if (is(name, "ns") && w->depth == w->page_depth + 1) w->field = FIELD_NS;
        else if (is(name, "redirect") && w->depth == w->page_depth + 1) w->redirect = true;
        else if (is(name, "text") && w->depth == w->page_depth + 2) {
            w->field = FIELD_TEXT;
            strbuf_clear(&w->text);  // keep the last revision's text only
        }
    }
}

static void on_end(void *ud, const XML_Char *name) {
    WikiState *w = ud;
    w->field = FIELD_NONE;
    if (w->page_depth && w->depth == w->page_depth && is(name, "page")) {
        w->page_depth = 0;
        bool main_ns = w->ns.len == 1 && w->ns.s[0] == '0';
        if (!main_ns) {
            w->stats->other_namespace++;
        } else if (w->redirect) {
            w->stats->redirects++;
        } else {
            wikitext_clean(w->text.s ? w->text.s : "", w->text.len, &w->clean);
            if (w->clean.len == 0) {
                w->stats->empty++;
            } else {
                w->stats->documents++;
                w->stats->bytes_kept += (long long)w->clean.len;
                w->fn(w->ctx, w->clean.s, w->clean.len);
            }
        }
    }
    w->depth--;
}

static void on_chars(void *ud, const XML_Char *s, int len) {
    WikiState *w = ud;
    if (w->field == FIELD_NS) strbuf_append(&w->ns, s, (size_t)len);
    else if (w->field == FIELD_TEXT) strbuf_append(&w->text, s, (size_t)len);
}

void corpus_read_wiki(const char *file, int threads, CorpusDocFn fn, void *ctx, CorpusStats *stats) {
    ByteSource *src = byte_source_open_threads(file, threads);
    XML_Parser p = XML_ParserCreate("UTF-8");
    if (!p) mhe_fatal("cannot create an XML parser");
    WikiState w = {.file = file, .fn = fn, .ctx = ctx, .stats = stats};
    XML_SetUserData(p, &w);
    XML_SetElementHandler(p, on_start, on_end);
    XML_SetCharacterDataHandler(p, on_chars);
    char buf[1 << 16];
    for (;;) {
        size_t n = byte_source_read(src, buf, sizeof buf);
        w.stats->bytes_in += (long long)n;
        if (XML_Parse(p, buf, (int)n, n == 0) == XML_STATUS_ERROR) {
            enum XML_Error e = XML_GetErrorCode(p);
            int line = (int)XML_GetCurrentLineNumber(p);
            int col = (int)XML_GetCurrentColumnNumber(p) + 1;
            long long byte = (long long)XML_GetCurrentByteIndex(p);
            if (e == XML_ERROR_INVALID_TOKEN || e == XML_ERROR_PARTIAL_CHAR)
                mhe_fail_at(file, line, col, "malformed XML: %s (invalid UTF-8 or a stray "
                            "character at byte %lld of the XML)", XML_ErrorString(e), byte);
            mhe_fail_at(file, line, col, "malformed XML: %s", XML_ErrorString(e));
        }
        if (n == 0) break;
    }
    XML_ParserFree(p);
    byte_source_close(src);
    strbuf_free(&w.ns);
    strbuf_free(&w.text);
    strbuf_free(&w.clean);
}
