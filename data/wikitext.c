// Wikitext cleaner: a few linear passes, each removing one kind of markup, in the order that
// keeps nested constructs intact (a <ref> may hold templates, a template may hold tables, a
// file caption may hold links).
#include "data/wikitext.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

// Tags whose content is not prose: dropped with everything inside.
static const char *const DROP_TAGS[] = {
    "ref", "references", "math", "chem", "ce", "gallery", "timeline", "imagemap", "score",
    "syntaxhighlight", "source", "pre", "hiero", "graph", "templatedata", "mapframe",
    "maplink", "categorytree", "inputbox", "includeonly", "table", "noinclude",
    "templatestyles", NULL};
// Formatting tags: the tag goes, the text inside stays.
static const char *const KEEP_TAGS[] = {
    "b", "i", "u", "s", "small", "big", "sub", "sup", "span", "div", "font", "center",
    "blockquote", "poem", "nowiki", "code", "tt", "var", "abbr", "cite", "em", "strong", "del",
    "ins", "p", "br", "hr", "li", "ul", "ol", "dl", "dt", "dd", "onlyinclude", "section",
    "mark", "kbd", "q", "bdi", "strike", "wbr", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "td",
    "th", "caption", "samp", "ruby", "rt", "rp", "dfn", "time", "data", "var", NULL};

static bool in_list(const char *const *list, const char *name, size_t n) {
    for (int i = 0; list[i]; i++)
        if (strlen(list[i]) == n && strncasecmp(list[i], name, n) == 0) return true;
    return false;
}

static bool starts(const char *p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - p) >= n && memcmp(p, lit, n) == 0;
}

static bool starts_ci(const char *p, const char *end, const char *lit) {
    size_t n = strlen(lit);
    return (size_t)(end - p) >= n && strncasecmp(p, lit, n) == 0;
}

typedef struct {
    const char *name;  // points into the text
    size_t name_len;
    bool closing, self_closing;
    const char *end;   // one past '>'
} Tag;

// Parses an HTML-like tag at p ('<'); only known tag names count, so prose such as
// "x < y" stays untouched.
static bool parse_tag(const char *p, const char *end, Tag *t) {
    const char *q = p + 1;
    t->closing = q < end && *q == '/';
    if (t->closing) q++;
    const char *name = q;
    while (q < end && isalnum((unsigned char)*q)) q++;
    if (q == name || !isalpha((unsigned char)*name)) return false;
    t->name = name;
    t->name_len = (size_t)(q - name);
    if (q < end && !(*q == '>' || *q == '/' || isspace((unsigned char)*q))) return false;
    if (!in_list(DROP_TAGS, name, t->name_len) && !in_list(KEEP_TAGS, name, t->name_len))
        return false;
    const char *gt = q;
    while (gt < end && *gt != '>' && *gt != '<' && gt - q < 2000) gt++;
    if (gt >= end || *gt != '>') return false;
    t->self_closing = gt > q && gt[-1] == '/';
    t->end = gt + 1;
    return true;
}

// Finds "</name>" (any case, spaces allowed before '>') at or after p; returns one past its
// '>' or NULL.  Like MediaWiki, "</ref name=x>" does not close a <ref>.
static const char *find_close_tag(const char *p, const char *end, const char *name, size_t n) {
    for (; p + n + 2 < end; p++) {
        if (p[0] == '<' && p[1] == '/' && strncasecmp(p + 2, name, n) == 0) {
            const char *q = p + 2 + n;
            while (q < end && (*q == ' ' || *q == '\t' || *q == '\n')) q++;
            if (q < end && *q == '>') return q + 1;
        }
    }
    return NULL;
}

// Pass 1: comments, dropped tags with their content, formatting tags.
static void pass_tags(const char *s, size_t len, StrBuf *out) {
    const char *p = s, *end = s + len;
    strbuf_clear(out);
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt) {
            strbuf_append(out, p, (size_t)(end - p));
            break;
        }
        strbuf_append(out, p, (size_t)(lt - p));
        p = lt;
        if (starts(p, end, "<!--")) {
            const char *c = p + 4;
            while (c < end && !starts(c, end, "-->")) c++;
            p = c < end ? c + 3 : end;
            continue;
        }
        Tag t;
        if (!parse_tag(p, end, &t)) {
            strbuf_putc(out, *p++);
            continue;
        }
        p = t.end;
        if (in_list(DROP_TAGS, t.name, t.name_len)) {
            if (!t.closing && !t.self_closing) {
                const char *c = find_close_tag(p, end, t.name, t.name_len);
                if (c) p = c;
            }
        } else if (t.name_len == 2 && strncasecmp(t.name, "br", 2) == 0) {
            strbuf_putc(out, '\n');
        }
    }
}

// Pass 2: templates {{...}} and tables {|...|}, nested in each other.  Returns the end of
// the construct opened at p, or NULL when it never closes.
static const char *skip_braces(const char *p, const char *end) {
    char stack[256];
    int depth = 0;
    while (p + 1 < end) {
        if (p[0] == '{' && p[1] == '{') {
            if (depth == (int)sizeof stack) return NULL;
            stack[depth++] = 'T';
            p += 2;
        } else if (p[0] == '{' && p[1] == '|') {
            if (depth == (int)sizeof stack) return NULL;
            stack[depth++] = 'B';
            p += 2;
        } else if (p[0] == '}' && p[1] == '}' && memchr(stack, 'T', (size_t)depth)) {
            // Closes the innermost template, and any table left open inside it.
            while (stack[depth - 1] != 'T') depth--;
            depth--;
            p += 2;
            if (depth == 0) return p;
        } else if (p[0] == '|' && p[1] == '}' && depth && stack[depth - 1] == 'B') {
            depth--;
            p += 2;
            if (depth == 0) return p;
        } else {
            p++;
        }
    }
    return NULL;
}

static void pass_braces(const char *s, size_t len, StrBuf *out) {
    const char *p = s, *end = s + len;
    strbuf_clear(out);
    while (p < end) {
        if (p + 1 < end && p[0] == '{' && (p[1] == '{' || p[1] == '|')) {
            const char *c = skip_braces(p, end);
            p = c ? c : p + 2;  // an opener that never closes is dropped alone
            continue;
        }
        if (p + 1 < end && ((p[0] == '}' && p[1] == '}') || (p[0] == '|' && p[1] == '}'))) {
            p += 2;  // stray closer
            continue;
        }
        strbuf_putc(out, *p++);
    }
}

// End of the [[...]] opened at p (one past "]]"), counting nested links; NULL if unclosed.
// Links end with their paragraph, except file links whose captions may span lines.
static const char *skip_link(const char *p, const char *end) {
    const char *t = p + 2;
    while (t < end && *t == ' ') t++;
    bool file = starts_ci(t, end, "file:") || starts_ci(t, end, "image:");
    int depth = 0;
    while (p + 1 < end) {
        if (p[0] == '[' && p[1] == '[') {
            depth++;
            p += 2;
        } else if (p[0] == ']' && p[1] == ']') {
            depth--;
            p += 2;
            if (depth == 0) return p;
        } else {
            if (!file && *p == '\n' && p + 1 < end && p[1] == '\n') return NULL;
            p++;
        }
    }
    return NULL;
}

static bool is_language_prefix(const char *s, size_t n) {
    if (n == 6 && strncmp(s, "simple", 6) == 0) return true;
    size_t i = 0;
    while (i < n && islower((unsigned char)s[i])) i++;
    if (i < 2 || i > 3) return false;
    while (i < n) {
        if (s[i] != '-') return false;
        size_t j = ++i;
        while (i < n && islower((unsigned char)s[i])) i++;
        if (i == j) return false;
    }
    return true;
}

static void pass_links(const char *s, size_t len, StrBuf *out);

// One [[...]] link (inner = text between the brackets).
static void emit_link(const char *inner, size_t n, StrBuf *out) {
    const char *end = inner + n;
    // The target ends at the first '|' outside nested links.
    const char *bar = NULL;
    int depth = 0;
    for (const char *q = inner; q < end; q++) {
        if (q + 1 < end && q[0] == '[' && q[1] == '[') depth++, q++;
        else if (q + 1 < end && q[0] == ']' && q[1] == ']') depth--, q++;
        else if (*q == '|' && depth == 0) {
            bar = q;
            break;
        }
    }
    const char *t = inner, *tend = bar ? bar : end;
    while (t < tend && isspace((unsigned char)*t)) t++;
    bool colon_link = t < tend && *t == ':';
    if (colon_link) t++;
    const char *colon = memchr(t, ':', (size_t)(tend - t));
    if (colon && !colon_link) {
        size_t pn = (size_t)(colon - t);
        if ((pn == 4 && (strncasecmp(t, "file", 4) == 0)) ||
            (pn == 5 && strncasecmp(t, "image", 5) == 0) ||
            (pn == 8 && strncasecmp(t, "category", 8) == 0))
            return;
        if (!bar && is_language_prefix(t, pn)) return;  // interlanguage link
    }
    if (bar) {
        const char *d = bar + 1;
        while (d < end && isspace((unsigned char)*d)) d++;
        if (d < end) {
            pass_links(d, (size_t)(end - d), out);
            return;
        }
        // Pipe trick: [[Paris, Texas|]] shows "Paris"; [[Help:Link (x)|]] shows "Link".
        const char *c2 = colon ? colon + 1 : t;
        const char *stop = c2;
        while (stop < tend && *stop != '(' && *stop != ',') stop++;
        while (stop > c2 && isspace((unsigned char)stop[-1])) stop--;
        strbuf_append(out, c2, (size_t)(stop - c2));
        return;
    }
    while (tend > t && isspace((unsigned char)tend[-1])) tend--;
    strbuf_append(out, t, (size_t)(tend - t));
}

static bool is_url_start(const char *p, const char *end) {
    return starts_ci(p, end, "http://") || starts_ci(p, end, "https://") ||
           starts_ci(p, end, "ftp://") || starts_ci(p, end, "//") ||
           starts_ci(p, end, "mailto:") || starts_ci(p, end, "news:") ||
           starts_ci(p, end, "irc://");
}

// Pass 3: internal links [[...]] and external links [url text].  Appends to out.
static void pass_links(const char *s, size_t len, StrBuf *out) {
    const char *p = s, *end = s + len;
    while (p < end) {
        if (p + 1 < end && p[0] == '[' && p[1] == '[') {
            const char *c = skip_link(p, end);
            if (c) emit_link(p + 2, (size_t)(c - 2 - (p + 2)), out);
            p = c ? c : p + 2;
            continue;
        }
        if (p + 1 < end && p[0] == ']' && p[1] == ']') {
            p += 2;
            continue;
        }
        if (p[0] == '[' && is_url_start(p + 1, end)) {
            const char *c = p + 1;
            while (c < end && *c != ']' && *c != '\n') c++;
            if (c < end && *c == ']') {
                const char *sp = p + 1;
                while (sp < c && *sp != ' ') sp++;
                if (sp < c) pass_links(sp + 1, (size_t)(c - sp - 1), out);
                p = c + 1;
                continue;
            }
        }
        strbuf_putc(out, *p++);
    }
}

// Inline cleanup of one line: emphasis, magic words, entities, spacing.
static void clean_inline(const char *p, const char *end, StrBuf *out) {
    strbuf_reserve(out, 0);  // out->s exists even when the line cleans to nothing
    size_t start = out->len;
    while (p < end) {
        if (*p == '\'' && p + 1 < end && p[1] == '\'') {
            while (p < end && *p == '\'') p++;
            continue;
        }
        if (p + 1 < end && p[0] == '_' && p[1] == '_') {
            const char *q = p + 2;
            while (q < end && isupper((unsigned char)*q)) q++;
            if (q > p + 2 && q + 1 < end && q[0] == '_' && q[1] == '_') {
                p = q + 2;
                continue;
            }
        }
        if (*p == '&') {
            size_t k = html_entity_decode(p, (size_t)(end - p), out);
            if (k) {
                p += k;
                continue;
            }
        }
        char c = *p++;
        if (c == '\t' || c == '\r') c = ' ';
        strbuf_putc(out, c);
    }
    // Spacing: collapse runs, drop spaces before punctuation and inside brackets, and the
    // empty brackets that removed templates leave behind.
    char *b = out->s + start;
    size_t n = out->len - start, w = 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (c == ' ' && (w == 0 || b[w - 1] == ' ' || b[w - 1] == '(')) continue;
        if ((c == ',' || c == '.' || c == ';' || c == ':' || c == ')') && w > 0 &&
            b[w - 1] == ' ')
            w--;
        if ((c == ',' || c == ';') && w > 0 && b[w - 1] == '(') continue;
        if (c == ')' && w > 0 && b[w - 1] == '(') {
            w--;
            while (w > 0 && b[w - 1] == ' ') w--;
            continue;
        }
        b[w++] = c;
    }
    while (w > 0 && b[w - 1] == ' ') w--;
    out->len = start + w;
    out->s[out->len] = 0;
}

// Removes whatever markup survived the structural passes (malformed wikitext, markup
// produced by entities), so the output never carries wiki syntax.  Repeats until stable: a
// removal can join "'" and "''", or "<" and "ref".
static void strip_leftovers(StrBuf *b, size_t start) {
    static const char *const PAIRS[] = {"{{", "}}", "[[", "]]", "{|", "|}", "''", NULL};
    for (bool changed = true; changed;) {
        changed = false;
        char *s = b->s + start;
        size_t n = b->len - start, w = 0;
        for (size_t i = 0; i < n;) {
            bool hit = false;
            for (int k = 0; PAIRS[k] && !hit; k++)
                hit = i + 1 < n && s[i] == PAIRS[k][0] && s[i + 1] == PAIRS[k][1];
            if (hit) {
                i += 2;
                changed = true;
                continue;
            }
            if (i + 3 < n && s[i] == '<' && strncasecmp(s + i + 1, "ref", 3) == 0) {
                i += 4;
                changed = true;
                continue;
            }
            s[w++] = s[i++];
        }
        b->len = start + w;
        b->s[b->len] = 0;
    }
}

// Pass 4: lines: headings, table remnants and rules dropped, list markers stripped.
static void pass_lines(const char *s, size_t len, StrBuf *out) {
    const char *p = s, *end = s + len;
    strbuf_clear(out);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end, *ls = p;
        p = nl ? nl + 1 : end;
        while (ls < le && isspace((unsigned char)*ls)) ls++;
        const char *re = le;
        while (re > ls && isspace((unsigned char)re[-1])) re--;
        if (ls == re) continue;
        if (*ls == '=' && re[-1] == '=') continue;       // heading
        if (*ls == '|' || *ls == '!') continue;          // table row outside a table
        if (starts(ls, re, "----")) continue;            // horizontal rule
        while (ls < re && (*ls == '*' || *ls == '#' || *ls == ':' || *ls == ';')) ls++;
        size_t before = out->len;
        if (before) strbuf_putc(out, '\n');
        size_t text_start = out->len;
        clean_inline(ls, re, out);
        strip_leftovers(out, text_start);
        // A line that cleans to nothing (or punctuation only) is not a paragraph.
        bool has_word = false;
        for (size_t i = text_start; i < out->len && !has_word; i++)
            has_word = isalnum((unsigned char)out->s[i]) || (unsigned char)out->s[i] >= 0x80;
        if (!has_word) {
            out->len = before;
            if (out->s) out->s[before] = 0;
        }
    }
}

void wikitext_clean(const char *src, size_t len, StrBuf *out) {
    StrBuf a = {0}, b = {0};
    pass_tags(src, len, &a);
    pass_braces(a.s ? a.s : "", a.len, &b);
    strbuf_clear(&a);
    pass_links(b.s ? b.s : "", b.len, &a);
    pass_lines(a.s ? a.s : "", a.len, out);
    if (!out->s) strbuf_puts(out, "");
    strbuf_free(&a);
    strbuf_free(&b);
}
