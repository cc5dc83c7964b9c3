// Wikitext to prose: what a reader of the rendered article sees as running text, without
// templates, tables, references, files, categories, headings or markup (DESIGN.md §4).
#ifndef MHE_DATA_WIKITEXT_H
#define MHE_DATA_WIKITEXT_H

#include <stddef.h>

#include "data/strbuf.h"

// Cleans `len` bytes of wikitext into `out` (cleared first): one paragraph or list item per
// line, no empty lines, no trailing newline.  Headings are dropped (BERT's Wikipedia keeps
// "text passages only"); list items keep their text without the markers.
void wikitext_clean(const char *src, size_t len, StrBuf *out);

// Decodes the HTML character reference starting at s[0] == '&' (named, &#N; or &#xH;) into
// UTF-8 in out (no-break spaces become plain spaces).  Returns the number of input bytes it
// covers, or 0 when s does not start a reference it knows.
size_t html_entity_decode(const char *s, size_t n, StrBuf *out);

#endif
