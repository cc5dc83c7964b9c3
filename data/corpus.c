// Corpus inputs: listing, format detection, dispatch to the readers.
#include "data/corpus.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "data/byte_source.h"
#include "data/unicode_text.h"

static const char *const FORMAT_NAMES[] = {"auto", "wiki", "wikiextractor", "books", "jsonl"};

bool corpus_format_parse(const char *name, CorpusFormat *out) {
    for (int i = 0; i < 5; i++)
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (CorpusFormat)i;
            return true;
        }
    return false;
}

const char *corpus_format_name(CorpusFormat f) { return FORMAT_NAMES[f]; }

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

char **corpus_list_files(const char *path, int *n_files) {
    struct stat st;
    if (stat(path, &st) != 0) mhe_fail("%s: cannot read input: %s", path, strerror(errno));
    PathList l = {0};
    if (S_ISDIR(st.st_mode)) {
        list_dir(path, &l);
        if (l.n == 0) mhe_fail("%s: directory holds no input files", path);
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

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

CorpusFormat corpus_detect(const char *file, CorpusFormat requested) {
    if (requested != CORPUS_AUTO) return requested;
    char name[4096];
    snprintf(name, sizeof name, "%s", file);
    if (ends_with(name, ".bz2")) name[strlen(name) - 4] = 0;
    if (ends_with(name, ".xml")) return CORPUS_WIKI;
    if (ends_with(name, ".jsonl") || ends_with(name, ".json")) return CORPUS_JSONL;
    if (ends_with(name, ".txt")) return CORPUS_BOOKS;
    // No telling extension (WikiExtractor writes AA/wiki_00): look at the content.
    ByteSource *s = byte_source_open(file);
    char head[512];
    size_t n = byte_source_read(s, head, sizeof head - 1);
    byte_source_close(s);
    head[n] = 0;
    const char *p = head;
    if (n >= 3 && (unsigned char)p[0] == 0xEF && (unsigned char)p[1] == 0xBB) p += 3;
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
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
    case CORPUS_JSONL: corpus_read_jsonl(file, threads, fn, ctx, stats); break;
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
