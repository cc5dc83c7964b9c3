// Corpus inputs: listing, format detection, dispatch to the readers.
#include "data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/fs.h"
#include "data/byte_source.h"
#include "data/unicode_text.h"

static const char *const FORMAT_NAMES[] = {"auto", "wiki", "wikiextractor", "books", "jsonl", "parquet", "arrow"};
#define N_FORMATS (int)(sizeof FORMAT_NAMES / sizeof *FORMAT_NAMES)

bool corpus_format_parse(const char *name, CorpusFormat *out) {
    for (int i = 0; i < N_FORMATS; i++)
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (CorpusFormat)i;
            return true;
        }
    return false;
}

const char *corpus_format_name(CorpusFormat f) { return FORMAT_NAMES[f]; }

static const char *text_column = "text", *title_column = "title";

void corpus_set_columns(const char *text, const char *title) {
    text_column = text;
    title_column = title;
}
const char *corpus_text_column(void) { return text_column; }
const char *corpus_title_column(void) { return title_column; }

typedef struct {
    char **v;
    int n, cap;
} PathList;

static void list_push(PathList *l, char *p) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = mhe_realloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = p;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void list_dir(const char *dir, PathList *out) {
    DIR *d = opendir(dir);
    if (!d) mhe_fail("%s: cannot open directory: %s", dir, strerror(errno));
    PathList here = {0};
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        size_t n = strlen(dir) + strlen(e->d_name) + 2;
        char *p = mhe_malloc(n);
        snprintf(p, n, "%s/%s", dir, e->d_name);
        list_push(&here, p);
    }
    closedir(d);
    if (here.n) qsort(here.v, (size_t)here.n, sizeof *here.v, cmp_str);
    for (int i = 0; i < here.n; i++) {
        struct stat st;
        if (stat(here.v[i], &st) != 0) mhe_fail("%s: %s", here.v[i], strerror(errno));
        if (S_ISDIR(st.st_mode)) {
            list_dir(here.v[i], out);
            free(here.v[i]);
        } else if (S_ISREG(st.st_mode)) {
            list_push(out, here.v[i]);
        } else {
            free(here.v[i]);
        }
    }
    free(here.v);
}

static bool is_table_file(const char *path) { return mhe_has_suffix(path, ".parquet") || mhe_has_suffix(path, ".arrow"); }

char **corpus_list_files(const char *path, int *n_files) {
    PathList l = {0};
    struct stat st;
    if (strcmp(path, CORPUS_STDIN) == 0) {
        list_push(&l, mhe_strdup(path));
    } else if (stat(path, &st) != 0) {
        mhe_fail("%s: cannot read input: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        list_dir(path, &l);
        if (l.n == 0) mhe_fail("%s: directory holds no input files", path);
        int tables = 0;
        for (int i = 0; i < l.n; i++) tables += is_table_file(l.v[i]);
        if (tables) {
            int k = 0;
            for (int i = 0; i < l.n; i++) {
                if (is_table_file(l.v[i])) l.v[k++] = l.v[i];
                else free(l.v[i]);
            }
            l.n = k;
        }
    } else if (!S_ISREG(st.st_mode)) {
        // A pipe would be read twice (format detection, then the reader): its start lost.
        mhe_fail("%s: not a regular file or folder (a pipe or a device?): give a file, or - to read JSON lines "
                 "from standard input", path);
    } else {
        list_push(&l, mhe_strdup(path));
    }
    *n_files = l.n;
    return l.v;
}

void corpus_free_files(char **files, int n_files) {
    for (int i = 0; i < n_files; i++) free(files[i]);
    free(files);
}

CorpusFormat corpus_detect(const char *file, CorpusFormat requested) {
    if (strcmp(file, CORPUS_STDIN) == 0) {
        if (requested != CORPUS_AUTO && requested != CORPUS_JSONL)
            mhe_fail("-: standard input is read as JSON lines; --format %s does not apply to it",
                     corpus_format_name(requested));
        return CORPUS_JSONL;
    }
    if (requested != CORPUS_AUTO) return requested;
    if (mhe_has_suffix(file, ".parquet")) return CORPUS_PARQUET;
    if (mhe_has_suffix(file, ".arrow")) return CORPUS_ARROW;
    char name[4096];
    snprintf(name, sizeof name, "%s", file);
    if (mhe_has_suffix(name, ".bz2")) name[strlen(name) - 4] = 0;
    if (mhe_has_suffix(name, ".xml")) return CORPUS_WIKI;
    if (mhe_has_suffix(name, ".jsonl") || mhe_has_suffix(name, ".json")) return CORPUS_JSONL;
    if (mhe_has_suffix(name, ".txt")) return CORPUS_BOOKS;
    // No telling extension (WikiExtractor writes AA/wiki_00): look at the content.
    ByteSource *s = byte_source_open(file);
    char head[512];
    size_t n = byte_source_read(s, head, sizeof head - 1);
    byte_source_close(s);
    head[n] = 0;
    const char *p = head;
    if (n >= 3 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB) p += 3;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
    // Binary tables by their magic: parquet opens with PAR1, an Arrow file with ARROW1, an
    // Arrow stream with the 0xFFFFFFFF continuation marker of its first message.
    if (n >= 4 && memcmp(head, "PAR1", 4) == 0) return CORPUS_PARQUET;
    if ((n >= 6 && memcmp(head, "ARROW1", 6) == 0) || (n >= 8 && memcmp(head, "\xff\xff\xff\xff", 4) == 0))
        return CORPUS_ARROW;
    if (strncmp(p, "<doc", 4) == 0) return CORPUS_WIKIEXTRACTOR;
    if (strncmp(p, "<mediawiki", 10) == 0 || strncmp(p, "<?xml", 5) == 0) return CORPUS_WIKI;
    if (*p == '{') return CORPUS_JSONL;
    return CORPUS_BOOKS;
}

void corpus_read_file_threads(const char *file, CorpusFormat format, int threads, CorpusDocFn fn,
                              void *ctx, CorpusStats *stats) {
    switch (corpus_detect(file, format)) {
    case CORPUS_WIKI: corpus_read_wiki(file, threads, fn, ctx, stats); break;
    case CORPUS_WIKIEXTRACTOR: corpus_read_wikiextractor(file, threads, fn, ctx, stats); break;
    case CORPUS_JSONL:
        if (strcmp(file, CORPUS_STDIN) == 0) {
            corpus_read_jsonl_stream(stdin, "<stdin>", fn, ctx, stats);
        } else {
            corpus_read_jsonl(file, threads, fn, ctx, stats);
        }
        break;
    case CORPUS_PARQUET:
    case CORPUS_ARROW: corpus_read_arrow(file, corpus_detect(file, format), fn, ctx, stats); break;
    case CORPUS_BOOKS:
    case CORPUS_AUTO: corpus_read_book(file, threads, fn, ctx, stats); break;
    }
}

void corpus_read_file(const char *file, CorpusFormat format, CorpusDocFn fn, void *ctx,
                      CorpusStats *stats) {
    corpus_read_file_threads(file, format, 1, fn, ctx, stats);
}

// One UTF-8 validator for the corpus readers, the tokenizer files and `tokenizer encode`.
long long utf8_invalid_offset(const char *str, size_t n) { return utf8_first_invalid(str, n); }

void corpus_check_utf8(const char *file, const char *s, size_t n, long long base) {
    long long bad = utf8_first_invalid(s, n);
    if (bad >= 0) mhe_fail_byte(file, base + bad, "invalid UTF-8 (byte 0x%02x)", (unsigned char)s[bad]);
}
