// UTF-8 decoding and the Unicode character classes the tokenizers need (via utf8proc).
#ifndef MHE_DATA_UNICODE_TEXT_H
#define MHE_DATA_UNICODE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// Decodes one code point at s[*i] (n bytes in total) and advances *i.  An invalid or
// truncated sequence yields U+FFFD and skips its maximal invalid prefix, as Python's
// errors="replace" does, so text with bad bytes tokenizes like its Python decoding.
uint32_t utf8_next(const char *s, size_t n, size_t *i);
// Writes cp as UTF-8 into dst (room for 4 bytes) and returns the byte count.
int utf8_put(char *dst, uint32_t cp);
// Index of the first invalid byte of s, or -1 when s[0..n) is valid UTF-8.
long long utf8_first_invalid(const char *s, size_t n);

bool uni_is_whitespace(uint32_t c);   // Unicode White_Space (Rust char::is_whitespace, \s)
// The classes below are exactly HF tokenizers 0.19.1's (older Unicode than utf8proc's).
bool uni_is_letter(uint32_t c);       // \p{L} of the GPT-2 pattern
bool uni_is_number(uint32_t c);       // \p{N} of the GPT-2 pattern
bool uni_is_punct(uint32_t c);        // non-ASCII punctuation (BertPreTokenizer)
bool uni_is_control(uint32_t c);      // Cc, Cf, Co except \t \n \r (BertNormalizer clean_text)
bool uni_is_nonspacing_mark(uint32_t c);  // Mn (stripped with the accents)
bool uni_is_cjk(uint32_t c);          // the CJK ideograph blocks BERT spaces out
// Canonical decomposition of c into dst (room for 8); returns the count.
int uni_nfd(uint32_t c, uint32_t *dst);
// Canonical combining class (0 for starters).
int uni_ccc(uint32_t c);
// Full lowercase mapping (Rust char::to_lowercase) into dst (room for 3); returns the count.
int uni_lower(uint32_t c, uint32_t *dst);

#endif
