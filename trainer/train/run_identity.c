#include "trainer/train/run_identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/num.h"

// "section.key" -> value, for the two-level layout config_write_yaml writes.
typedef struct {
    char key[96];
    const char *value;  // points into the copied text
} Entry;

typedef struct {
    char *text;
    Entry *e;
    int n;
} Flat;

static Flat flatten(const char *yaml) {
    Flat f = {mhe_strdup(yaml), NULL, 0};
    int cap = 0;
    char section[48] = "";
    for (char *line = f.text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (line[0] == '#' || !line[0]) continue;
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = 0;
        if (line[0] != ' ') {  // "section:"
            snprintf(section, sizeof section, "%s", line);
            continue;
        }
        const char *key = line + strspn(line, " ");
        const char *value = colon + 1 + strspn(colon + 1, " ");
        if (f.n == cap) f.e = mhe_realloc(f.e, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *f.e);
        snprintf(f.e[f.n].key, sizeof f.e[f.n].key, "%s.%s", section, key);
        f.e[f.n++].value = value;
    }
    return f;
}

// Keys a resumed run may change: they move no value of the run (train.recompute trades memory
// for compute with bit-identical gradients).
static int harmless(const char *key) {
    static const char *const keys[] = {"train.recompute", "train.log_every", "train.eval_every",
                                       "train.eval_batches", "train.final_eval_batches", "train.checkpoint_every", "train.keep_last",
                                       "train.out_dir", "train.on_nonfinite", "train.init_from",
                                       "train.max_nonfinite", "train.micro_batch", "train.time_limit_s", "data.valid",
                                       "task.epochs", NULL};
    if (strncmp(key, "runtime.", 8) == 0 || strncmp(key, "dist.", 5) == 0) return 1;
    for (int i = 0; keys[i]; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

// The run's length: the learning-rate schedule (warmup, decay to min_lr at the last step) is
// computed over it, so a change moves the learning rate of every step still to come.
static int length(const char *key) { return strcmp(key, "train.steps") == 0 || strcmp(key, "train.tokens") == 0; }

static void append(char **out, const char *key, const char *from, const char *to) {
    size_t old = *out ? strlen(*out) : 0, add = strlen(key) + strlen(from) + strlen(to) + 8;
    *out = mhe_realloc(*out, old + add + 1);
    snprintf(*out + old, add + 1, "%s%s %s -> %s", old ? ", " : "", key, from, to);
}

RunDiff run_identity_diff(const char *saved_yaml, const char *current_yaml) {
    Flat a = flatten(saved_yaml), b = flatten(current_yaml);
    RunDiff d = {NULL, NULL, NULL};
    for (int i = 0; i < b.n; i++)
        for (int j = 0; j < a.n; j++) {
            if (strcmp(a.e[j].key, b.e[i].key) != 0) continue;
            if (strcmp(a.e[j].value, b.e[i].value) != 0)
                append(length(b.e[i].key)     ? &d.length
                       : harmless(b.e[i].key) ? &d.harmless
                                              : &d.identity,
                       b.e[i].key, a.e[j].value, b.e[i].value);
            break;
        }
    free(a.text);
    free(a.e);
    free(b.text);
    free(b.e);
    return d;
}

static int architecture(const char *key) {
    static const char *const not_arch[] = {"model.dropout", "model.attn_dropout", "model.init_std",
                                           "attention.embed_std", "attention.fast_path", NULL};
    if (strncmp(key, "model.", 6) != 0 && strncmp(key, "attention.", 10) != 0) return 0;
    for (int i = 0; not_arch[i]; i++)
        if (strcmp(key, not_arch[i]) == 0) return 0;
    return 1;
}

char *run_arch_diff(const char *saved_yaml, const char *current_yaml) {
    Flat a = flatten(saved_yaml), b = flatten(current_yaml);
    char *out = NULL;
    for (int i = 0; i < b.n; i++) {
        if (!architecture(b.e[i].key)) continue;
        for (int j = 0; j < a.n; j++) {
            if (strcmp(a.e[j].key, b.e[i].key) != 0) continue;
            if (strcmp(a.e[j].value, b.e[i].value) != 0) append(&out, b.e[i].key, a.e[j].value, b.e[i].value);
            break;
        }
    }
    free(a.text);
    free(a.e);
    free(b.text);
    free(b.e);
    return out;
}

void run_diff_free(RunDiff *d) {
    free(d->identity);
    free(d->harmless);
    free(d->length);
    d->identity = d->harmless = d->length = NULL;
}

int64_t run_saved_total_steps(const char *saved_yaml, int64_t tokens_per_step) {
    Flat a = flatten(saved_yaml);
    long long steps = 0, tokens = 0;
    for (int j = 0; j < a.n; j++) {
        if (strcmp(a.e[j].key, "train.steps") == 0 && mhe_parse_int(a.e[j].value, 0, INT64_MAX, &steps) != MHE_NUM_OK)
            steps = -1;
        if (strcmp(a.e[j].key, "train.tokens") == 0 && mhe_parse_int(a.e[j].value, 0, INT64_MAX, &tokens) != MHE_NUM_OK)
            tokens = -1;
    }
    free(a.text);
    free(a.e);
    if (steps < 0 || tokens < 0) return 0;
    if (steps > 0) return steps;
    return tokens_per_step > 0 ? (tokens + tokens_per_step - 1) / tokens_per_step : 0;
}
