// The input account of `prepare`: per file, what its reader read and what it kept, in bytes and
// documents, and why the rest went (empty documents, wiki redirects and other namespaces; the
// remainder is markup, framing such as Gutenberg's licence and headers, and whitespace).
#ifndef MHE_DATA_INPUT_ACCOUNT_H
#define MHE_DATA_INPUT_ACCOUNT_H

#include <stdio.h>

#include "data/corpus.h"

void corpus_stats_add(CorpusStats *total, const CorpusStats *s);
// One warning line to stderr when `file` kept less than half of the bytes its reader read (a
// fifth for a MediaWiki XML dump, which is mostly markup), naming the reasons; returns 1 when it
// warned.
int prepare_account_warning(const char *file, CorpusFormat format, const CorpusStats *s);
// The account over every input, one line ("prepare: read ..."), to `f`.
void prepare_account_print(FILE *f, const CorpusStats *s);

#endif
