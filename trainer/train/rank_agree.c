#include "trainer/train/rank_agree.h"

#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fnv1a.h"
#include "trainer/train/run_identity.h"

static const char *const RANK_LOCAL[] = {"  threads:", NULL};

// The text without the rank-local lines (only under runtime:, where they live).
static char *comparable(const char *text) {
    size_t n = strlen(text);
    char *out = mhe_malloc(n + 1), *o = out;
    int in_runtime = 0;
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line + 1) : strlen(line);
        if (line[0] != ' ' && line[0] != '#') in_runtime = strncmp(line, "runtime:", 8) == 0;
        int skip = line[0] == '#';  // the header names the file each rank was given
        for (int i = 0; in_runtime && RANK_LOCAL[i]; i++) skip |= strncmp(line, RANK_LOCAL[i], strlen(RANK_LOCAL[i])) == 0;
        if (!skip) {
            memcpy(o, line, len);
            o += len;
        }
        line += len;
    }
    *o = 0;
    return out;
}

static void append(char **msg, size_t *len, const char *text) {
    size_t add = strlen(text);
    *msg = mhe_realloc(*msg, *len + add + 1);
    memcpy(*msg + *len, text, add + 1);
    *len += add;
}

void rank_agree(Comm *comm, const char *what, const char *text) {
    const int world = comm_world(comm), rank = comm_rank(comm);
    if (world == 1) return;
    char *mine = comparable(text);
    uint64_t me[2] = {fnv1a(FNV1A_BASIS, mine, strlen(mine)), strlen(mine) + 1};
    uint64_t *all = mhe_malloc((size_t)world * sizeof me);
    comm_allgather(comm, me, all, sizeof me);
    uint64_t longest = 0;
    int agree = 1;
    for (int r = 0; r < world; r++) {
        agree &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
        if (all[2 * r + 1] > longest) longest = all[2 * r + 1];
    }
    if (agree) {
        free(all);
        free(mine);
        return;
    }
    // Every rank knows the sizes now, so the second all-gather is the same size everywhere.
    char *pad = mhe_calloc(longest, 1), *texts = mhe_malloc((size_t)world * longest);
    memcpy(pad, mine, strlen(mine) + 1);
    comm_allgather(comm, pad, texts, longest);
    char *msg = NULL;
    size_t len = 0;
    if (rank == 0) {
        char head[256];
        snprintf(head, sizeof head, "the ranks disagree on their %s (rank 0's value -> the other rank's); nothing was run:", what);
        append(&msg, &len, head);
        int shown = 0;
        for (int r = 1; r < world; r++) {
            if (all[2 * r] == all[0] && all[2 * r + 1] == all[1]) continue;
            if (shown == 8) {
                append(&msg, &len, " ... (more ranks differ)");
                break;
            }
            RunDiff d = run_identity_diff(texts, texts + (size_t)r * longest);
            char part[64];
            snprintf(part, sizeof part, "%s rank %d: ", shown++ ? ";" : "", r);
            append(&msg, &len, part);
            // Every kind differs between ranks alike: the run's length too (one rank would wait in a
            // collective the others never reach).
            const char *kinds[3] = {d.identity, d.length, d.harmless};
            int parts = 0;
            for (int k = 0; k < 3; k++)
                if (kinds[k]) {
                    if (parts++) append(&msg, &len, ", ");
                    append(&msg, &len, kinds[k]);
                }
            if (!parts) append(&msg, &len, "keys that only one of them has (another mhetrain version?)");
            run_diff_free(&d);
        }
        append(&msg, &len, " -- every rank must run the same config, model and data (a stale copy on one node?)");
    }
    free(pad);
    free(texts);
    free(all);
    free(mine);
    comm_exit_all(comm, MHE_EXIT_INPUT, msg ? msg : "");
}

char *rank_agree_text(const char *config_yaml, const ParamTable *t, const Loader *train, const Loader *valid) {
    uint64_t layout = FNV1A_BASIS;
    for (int i = 0; i < t->count; i++) {
        const ParamTensor *p = &t->tensors[i];
        layout = fnv1a(layout, p->name, strlen(p->name) + 1);
        layout = fnv1a(layout, p->shape, sizeof p->shape);
        layout = fnv1a(layout, &p->offset, sizeof p->offset);
    }
    char extra[1024];
    int n = snprintf(extra, sizeof extra, "ranks:\n  model_tensors: %d tensors, %zu floats, layout %016llx\n", t->count,
                     t->total, (unsigned long long)layout);
    const Loader *l[2] = {train, valid};
    const char *names[2] = {"train_data", "valid_data"};
    for (int k = 0; k < 2; k++)
        if (l[k])
            n += snprintf(extra + n, sizeof extra - (size_t)n, "  %s: %lld tokens, %lld samples, digest %016llx\n",
                          names[k], (long long)loader_stream_tokens(l[k]), (long long)loader_samples_per_epoch(l[k]),
                          (unsigned long long)loader_digest(l[k]));
    char *text = mhe_malloc(strlen(config_yaml) + (size_t)n + 2);
    sprintf(text, "%s%s%s", config_yaml, config_yaml[0] && config_yaml[strlen(config_yaml) - 1] != '\n' ? "\n" : "", extra);
    return text;
}

void rank_agree_model(Comm *comm, const char *config_yaml, const Config *cfg) {
    ParamTable shapes;
    param_table_build(&shapes, cfg);
    char *text = rank_agree_text(config_yaml, &shapes, NULL, NULL);
    rank_agree(comm, "config and model", text);
    free(text);
    param_table_free(&shapes);
}

char *rank_agree_files_text(const char *config_yaml, int n, const char *const *keys, const char *const *paths) {
    size_t cap = strlen(config_yaml) + 16 + (size_t)n * 160, len = 0;
    char *text = mhe_malloc(cap);
    len += (size_t)snprintf(text, cap, "%s%sranks:\n", config_yaml,
                            config_yaml[0] && config_yaml[strlen(config_yaml) - 1] != '\n' ? "\n" : "");
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (!paths[i] || !paths[i][0] || stat(paths[i], &st) != 0 || !S_ISREG(st.st_mode)) {
            len += (size_t)snprintf(text + len, cap - len, "  %s: not a file here\n", keys[i]);
            continue;
        }
        size_t bytes = 0;
        char *data = mhe_read_file(paths[i], &bytes);
        len += (size_t)snprintf(text + len, cap - len, "  %s: %zu bytes, digest %016llx\n", keys[i], bytes,
                                (unsigned long long)fnv1a(FNV1A_BASIS, data, bytes));
        free(data);
    }
    return text;
}

void rank_refuse_any(Comm *comm, const char *why) {
    const int world = comm_world(comm);
    uint64_t mine = why ? strlen(why) + 1 : 0, longest = 0;
    uint64_t *all = mhe_malloc((size_t)world * sizeof mine);
    comm_allgather(comm, &mine, all, sizeof mine);
    int first = -1, refusing = 0;
    for (int r = 0; r < world; r++) {
        if (!all[r]) continue;
        if (first < 0) first = r;
        refusing++;
        if (all[r] > longest) longest = all[r];
    }
    free(all);
    if (!refusing) return;
    // Every rank knows the longest reason now, so the second all-gather is the same size everywhere.
    char *pad = mhe_calloc(longest, 1), *texts = mhe_malloc((size_t)world * longest);
    if (why) memcpy(pad, why, mine);
    comm_allgather(comm, pad, texts, longest);
    char *msg = NULL;
    if (comm_rank(comm) == 0) {
        size_t cap = longest + 96;
        msg = mhe_malloc(cap);
        int n = first ? snprintf(msg, cap, "rank %d: ", first) : 0;
        n += snprintf(msg + n, cap - (size_t)n, "%s", texts + (size_t)first * longest);
        if (refusing > 1)
            snprintf(msg + n, cap - (size_t)n, " (and %d other rank%s)", refusing - 1, refusing > 2 ? "s" : "");
    }
    free(pad);
    free(texts);
    comm_exit_all(comm, MHE_EXIT_INPUT, msg ? msg : "");
}
