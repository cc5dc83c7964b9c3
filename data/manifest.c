// manifest.json: the writer, and the reader of the fields training checks.
#include "data/manifest.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/error.h"
#include "common/sha256.h"
#include "data/tokenizer_internal.h"

void manifest_add_input(Manifest *m, const char *path, const char *format) {
    if (m->n_inputs == m->cap_inputs) {
        m->cap_inputs = m->cap_inputs ? 2 * m->cap_inputs : 8;
        m->input_paths = mhe_realloc(m->input_paths, (size_t)m->cap_inputs * sizeof(char *));
        m->input_formats = mhe_realloc(m->input_formats, (size_t)m->cap_inputs * sizeof(char *));
        m->input_stats = mhe_realloc(m->input_stats, (size_t)m->cap_inputs * sizeof *m->input_stats);
    }
    memset(&m->input_stats[m->n_inputs], 0, sizeof *m->input_stats);
    m->input_paths[m->n_inputs] = mhe_strdup(path);
    m->input_formats[m->n_inputs++] = format;
}

void manifest_set_input_stats(Manifest *m, const CorpusStats *s) {
    if (m->n_inputs > 0) m->input_stats[m->n_inputs - 1] = *s;
}

bool manifest_read_tokenizer(const char *path, ManifestTokenizer *out) {
    struct stat st;
    if (stat(path, &st) != 0) return false;
    size_t len;
    char *buf = mhe_read_file(path, &len);
    cJSON *root = tok_parse_json(path, buf, len);  // positioned "invalid JSON" errors
    free(buf);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "megatron-indexed-dataset") != 0)
        mhe_fail_at(path, 0, 0, "format: expected \"megatron-indexed-dataset\" (a manifest written by prepare)");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(root, "tokenizer");
    const cJSON *tpath = cJSON_GetObjectItemCaseSensitive(tok, "path");
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(tok, "vocab_size");
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(tok, "sha256");
    if (!cJSON_IsObject(tok) || !cJSON_IsString(tpath))
        mhe_fail_at(path, 0, 0, "tokenizer.path: expected a string");
    if (!cJSON_IsNumber(vs) || vs->valuedouble < 1 || vs->valuedouble > 2147483647.0 ||
        vs->valuedouble != (double)(int)vs->valuedouble)
        mhe_fail_at(path, 0, 0, "tokenizer.vocab_size: expected a positive integer");
    bool hex = cJSON_IsString(sha) && strlen(sha->valuestring) == SHA256_HEX_LEN - 1 &&
               strspn(sha->valuestring, "0123456789abcdef") == SHA256_HEX_LEN - 1;
    if (sha && !hex) mhe_fail_at(path, 0, 0, "tokenizer.sha256: expected 64 lowercase hex digits");
    snprintf(out->tokenizer_path, sizeof out->tokenizer_path, "%s", tpath->valuestring);
    snprintf(out->tokenizer_sha256, sizeof out->tokenizer_sha256, "%s", hex ? sha->valuestring : "");
    out->vocab_size = (int)vs->valuedouble;
    cJSON_Delete(root);
    return true;
}

void manifest_free(Manifest *m) {
    for (int i = 0; i < m->n_inputs; i++) free(m->input_paths[i]);
    free(m->input_paths);
    free(m->input_stats);
    free(m->input_formats);
}

static void add_file(cJSON *obj, const char *key_hash, const char *path, bool with_size) {
    char hex[SHA256_HEX_LEN];
    if (sha256_file_hex(path, hex) != 0) mhe_fatal("%s: cannot read: %s", path, strerror(errno));
    if (with_size) {
        struct stat st;
        if (stat(path, &st) != 0) mhe_fatal("%s: %s", path, strerror(errno));
        cJSON_AddNumberToObject(obj, "bytes", (double)st.st_size);
    }
    cJSON_AddStringToObject(obj, key_hash, hex);
}

void manifest_write(const Manifest *m, const PrepareOptions *opt, const PrepareResult *res,
                    ManifestShard *const shards[2], const int n_shards[2]) {
    static const char *const SPLITS[2] = {"train", "valid"};
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "megatron-indexed-dataset");
    cJSON_AddNumberToObject(root, "manifest_version", 1);

    cJSON *inputs = cJSON_AddArrayToObject(root, "inputs");
    for (int i = 0; i < m->n_inputs; i++) {
        cJSON *in = cJSON_CreateObject();
        cJSON_AddStringToObject(in, "path", m->input_paths[i]);
        cJSON_AddStringToObject(in, "format", m->input_formats[i]);
        // Standard input is gone once read: no size or checksum to record.
        if (strcmp(m->input_paths[i], CORPUS_STDIN) == 0) cJSON_AddStringToObject(in, "source", "standard input");
        else add_file(in, "sha256", m->input_paths[i], true);
        // The input account: what the reader read and what it kept, and why the rest went.
        const CorpusStats *s = &m->input_stats[i];
        cJSON *acc = cJSON_AddObjectToObject(in, "account");
        cJSON_AddNumberToObject(acc, "bytes_read", (double)s->bytes_in);
        cJSON_AddNumberToObject(acc, "bytes_kept", (double)s->bytes_kept);
        cJSON_AddNumberToObject(acc, "documents_kept", (double)s->documents);
        cJSON_AddNumberToObject(acc, "empty_documents_skipped", (double)s->empty);
        cJSON_AddNumberToObject(acc, "wiki_redirects_skipped", (double)s->redirects);
        cJSON_AddNumberToObject(acc, "wiki_other_namespaces_skipped", (double)s->other_namespace);
        cJSON_AddNumberToObject(acc, "nul_characters_replaced", (double)s->nul_replaced);
        cJSON_AddItemToArray(inputs, in);
    }

    cJSON *tok = cJSON_AddObjectToObject(root, "tokenizer");
    cJSON_AddStringToObject(tok, "path", m->tokenizer_path);
    cJSON_AddStringToObject(tok, "type", m->tokenizer_kind);
    cJSON_AddNumberToObject(tok, "vocab_size", m->vocab_size);
    struct stat st;
    if (stat(m->tokenizer_path, &st) == 0 && S_ISREG(st.st_mode))
        add_file(tok, "sha256", m->tokenizer_path, false);

    cJSON *set = cJSON_AddObjectToObject(root, "settings");
    cJSON_AddNumberToObject(set, "shard_size_mb", opt->shard_size_mb);
    if (opt->valid_by_fraction) {
        cJSON_AddStringToObject(set, "valid_rule", "fraction");
        cJSON_AddNumberToObject(set, "valid_fraction", opt->valid_fraction);
    } else {
        cJSON_AddStringToObject(set, "valid_rule", "per_source");
        cJSON_AddNumberToObject(set, "valid_docs_per_source", opt->valid_docs_per_source);
        cJSON_AddNumberToObject(set, "valid_min_tokens", (double)opt->valid_min_tokens);
    }
    cJSON_AddStringToObject(set, "book_documents", opt->whole_books ? "one per book" : "one per chapter");
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)opt->seed);
    cJSON_AddStringToObject(set, "seed", seed);  // a string: u64 does not fit a double
    cJSON_AddStringToObject(set, "format", corpus_format_name(opt->format));
    cJSON_AddStringToObject(set, "text_column", corpus_text_column());
    cJSON_AddStringToObject(set, "title_column", corpus_title_column());
    cJSON_AddStringToObject(set, "dtype", m->dtype == 8 ? "uint16" : "int32");
    cJSON_AddNumberToObject(set, "dtype_code", m->dtype);
    cJSON_AddStringToObject(set, "sequences", "one per document");

    cJSON *src = cJSON_AddObjectToObject(root, "reading");
    cJSON_AddNumberToObject(src, "documents", (double)m->stats.documents);
    cJSON_AddNumberToObject(src, "wiki_pages", (double)m->stats.pages);
    cJSON_AddNumberToObject(src, "wiki_redirects_skipped", (double)m->stats.redirects);
    cJSON_AddNumberToObject(src, "wiki_other_namespaces_skipped", (double)m->stats.other_namespace);
    cJSON_AddNumberToObject(src, "empty_documents_skipped", (double)res->skipped_empty);
    cJSON_AddNumberToObject(src, "nul_characters_replaced", (double)m->stats.nul_replaced);
    cJSON_AddNumberToObject(src, "bytes_read", (double)m->stats.bytes_in);
    cJSON_AddNumberToObject(src, "bytes_kept", (double)m->stats.bytes_kept);

    cJSON *splits = cJSON_AddObjectToObject(root, "splits");
    for (int s = 0; s < 2; s++) {
        cJSON *sp = cJSON_AddObjectToObject(splits, SPLITS[s]);
        cJSON_AddNumberToObject(sp, "documents", (double)res->documents[s]);
        cJSON_AddNumberToObject(sp, "tokens", (double)res->tokens[s]);
        cJSON *arr = cJSON_AddArrayToObject(sp, "shards");
        for (int k = 0; k < n_shards[s]; k++) {
            const ManifestShard *sh = &shards[s][k];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prefix", sh->name);
            cJSON_AddNumberToObject(o, "sequences", (double)sh->sequences);
            cJSON_AddNumberToObject(o, "tokens", (double)sh->tokens);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.bin", opt->out_dir, sh->name);
            add_file(o, "bin_sha256", path, false);
            snprintf(path, sizeof path, "%s/%s.idx", opt->out_dir, sh->name);
            add_file(o, "idx_sha256", path, false);
            cJSON_AddItemToArray(arr, o);
        }
    }
    // Per input ("source"): what it gave and how it was split.
    cJSON *srcs = cJSON_AddArrayToObject(root, "sources");
    for (int i = 0; i < res->n_sources; i++) {
        const SourceSplit *ss = &res->sources[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "input", opt->inputs[i]);
        cJSON_AddNumberToObject(o, "documents", (double)ss->documents);
        cJSON_AddNumberToObject(o, "tokens", (double)ss->tokens);
        cJSON_AddNumberToObject(o, "train_documents", (double)(ss->documents - ss->valid_documents));
        cJSON_AddNumberToObject(o, "train_tokens", (double)(ss->tokens - ss->valid_tokens));
        cJSON_AddNumberToObject(o, "valid_documents", (double)ss->valid_documents);
        cJSON_AddNumberToObject(o, "valid_tokens", (double)ss->valid_tokens);
        if (!opt->valid_by_fraction) {
            cJSON_AddNumberToObject(o, "valid_tokens_wanted", (double)ss->tokens_wanted);
            cJSON_AddBoolToObject(o, "valid_minimums_met", ss->met);
        }
        cJSON_AddItemToArray(srcs, o);
    }
    char *text = cJSON_Print(root);
    // Written under a temporary name and renamed: a manifest.json present means the corpus
    // is complete.
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/manifest.json", opt->out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0 || fclose(f) != 0 || rename(tmp, path) != 0)
        mhe_fatal("%s: write failed: %s", path, strerror(errno));
    cJSON_free(text);
    cJSON_Delete(root);
}
