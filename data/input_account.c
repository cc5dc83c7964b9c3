#include "data/input_account.h"

void corpus_stats_add(CorpusStats *total, const CorpusStats *s) {
    total->documents += s->documents;
    total->pages += s->pages;
    total->redirects += s->redirects;
    total->other_namespace += s->other_namespace;
    total->empty += s->empty;
    total->nul_replaced += s->nul_replaced;
    total->bytes_in += s->bytes_in;
    total->bytes_kept += s->bytes_kept;
}

static void reasons(char *buf, size_t n, CorpusFormat format, const CorpusStats *s) {
    const char *rest = format == CORPUS_WIKI || format == CORPUS_WIKIEXTRACTOR
                           ? "XML and wiki markup, templates, tables and whitespace"
                       : format == CORPUS_BOOKS || format == CORPUS_AUTO
                           ? "Project Gutenberg header, licence and credits, and whitespace"
                           : "JSON framing, other fields and whitespace";
    snprintf(buf, n, "%lld empty documents, %lld redirects and %lld pages of other namespaces skipped; the rest: %s",
             s->empty, s->redirects, s->other_namespace, rest);
}

int prepare_account_warning(const char *file, CorpusFormat format, const CorpusStats *s) {
    // A MediaWiki dump is mostly XML and markup (the shared sample keeps 47%): below a fifth is
    // unusual there; every other format is mostly text, so below half is.
    const long long per = format == CORPUS_WIKI ? 5 : 2;
    if (s->bytes_in <= 0 || per * s->bytes_kept >= s->bytes_in) return 0;
    char why[256];
    reasons(why, sizeof why, format, s);
    fprintf(stderr, "prepare: warning: %s: kept %lld of %lld bytes (%.1f%%) in %lld documents (%s)\n", file,
            s->bytes_kept, s->bytes_in, 100.0 * (double)s->bytes_kept / (double)s->bytes_in, s->documents, why);
    return 1;
}

void prepare_account_print(FILE *f, const CorpusStats *s) {
    fprintf(f,
            "prepare: input account: read %lld bytes of text, kept %lld (%.1f%%) in %lld documents; skipped %lld empty "
            "documents, %lld wiki redirects, %lld pages of other namespaces (manifest.json: inputs[].account)\n",
            s->bytes_in, s->bytes_kept, s->bytes_in > 0 ? 100.0 * (double)s->bytes_kept / (double)s->bytes_in : 0.0,
            s->documents, s->empty, s->redirects, s->other_namespace);
}
