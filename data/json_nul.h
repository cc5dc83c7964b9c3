// The JSON escape \u0000 (a NUL character) in a line of JSON text.  cJSON decodes it into a
// NUL byte inside the C string, so everything after it would silently vanish: the corpus
// readers replace it (U+FFFD, counted), the task readers refuse it with file and line.
#ifndef MHE_DATA_JSON_NUL_H
#define MHE_DATA_JSON_NUL_H

#include <stddef.h>

// Byte offset of the first \u0000 escape in text[0..len) (not one whose backslash is itself
// escaped, as in "\\u0000"), or -1.
long json_find_nul_escape(const char *text, size_t len);
// Rewrites every \u0000 escape into \ufffd (the same length) in place; returns how many.
size_t json_replace_nul_escapes(char *text, size_t len);

#endif
