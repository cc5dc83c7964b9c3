// Text-file helpers of the readers: lines with their numbers, tab splitting, UTF-8 offsets.
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/corpus.h"
#include "data/json_nul.h"
#include "trainer/task/task_internal.h"

void task_check_utf8(const char *path, const char *buf, size_t len) {
    long long bad = utf8_invalid_offset(buf, len);
    const char *nul = memchr(buf, 0, len);  // C strings would end there: the rest of a field lost
    if (nul && (bad < 0 || nul - buf < bad)) {
        int line = 1;
        long long start = 0;
        for (long long i = 0; i < nul - buf; i++)
            if (buf[i] == '\n') line++, start = i + 1;
        mhe_fail_at(path, line, (int)(nul - buf - start) + 1, "NUL byte: expected text");
    }
    if (bad < 0) return;
    int line = 1;
    long long start = 0;
    for (long long i = 0; i < bad; i++)
        if (buf[i] == '\n') line++, start = i + 1;
    mhe_fail_at(path, line, (int)(bad - start) + 1, "invalid UTF-8 (byte 0x%02x): fine-tuning text must be UTF-8, as "
                "prepare's inputs are (re-encode the file; nothing is dropped silently)", (unsigned char)buf[bad]);
}

void text_lines_read(TextLines *l, const char *path) {
    size_t len = 0;  // mhe_read_file NUL-terminates
    l->buf = mhe_read_file(path, &len);
    task_check_utf8(path, l->buf, len);
    char *p = l->buf, *end = l->buf + len;
    // The GLUE processors open with encoding utf-8-sig: a BOM is not part of the first field.
    if (len >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3;
    long cap = 0;
    l->n = 0;
    l->line = NULL;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (stop > p && stop[-1] == '\r') stop[-1] = '\0';
        if (nl) *nl = '\0';
        if (l->n == cap) {
            cap = cap ? 2 * cap : 1024;
            l->line = mhe_realloc(l->line, (size_t)cap * sizeof *l->line);
        }
        l->line[l->n++] = p;
        if (!nl) break;  // the last line, without a newline: the buffer's NUL ends it
        p = nl + 1;
    }
}

void task_check_json_line(const char *path, int line, const char *text) {
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if (*p < 0x20 && *p != '\t' && *p != '\r')
            mhe_fail_at(path, line, (int)(p - (const unsigned char *)text) + 1,
                        "control byte 0x%02x: JSON must escape it (\\u%04x)", *p, *p);
    // The escape decodes to a NUL byte that would end the field there (the rest silently gone).
    const long nul = json_find_nul_escape(text, strlen(text));
    if (nul >= 0)
        mhe_fail_at(path, line, (int)nul + 1,
                    "a NUL character (\\u0000) in a JSON string: the text would end there; remove or replace it");
}

void text_lines_free(TextLines *l) {
    free(l->buf);
    free(l->line);
    memset(l, 0, sizeof *l);
}

int split_tabs(char *line, char **fields, int cap) {
    int n = 0;
    for (char *p = line;;) {
        char *tab = strchr(p, '\t');
        if (n < cap) fields[n] = p;
        n++;
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

size_t utf8_offset(const char *s, size_t len, long cp) {
    size_t i = 0;
    for (long c = 0; i < len && c < cp; c++) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

long utf8_count(const char *s, size_t len) {
    long n = 0;
    for (size_t i = 0; i < len; i++) n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}
