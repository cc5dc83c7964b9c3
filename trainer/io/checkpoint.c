// renameat2(RENAME_EXCHANGE) swaps a re-saved step directory in atomically (Linux).
#define _GNU_SOURCE
#include "trainer/io/checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/num.h"
#include "common/sha256.h"
#include "trainer/io/safetensors.h"

#define CKPT_FORMAT "mhetrain-checkpoint"
// 2: state.json carries "state_sha256", the checksum of its own text (version 1 had none).
#define CKPT_VERSION 2
#define STATE_SUM_KEY "\"state_sha256\":"
#define CKPT_PATH_MAX 4096
#define MODEL_FILE "model.safetensors"
#define OPTIM_FILE "optimizer.safetensors"
#define CONFIG_FILE "config.yaml"
#define STATE_FILE "state.json"

// Formats a path into a CKPT_PATH_MAX buffer; a longer path is a user error, not a truncation.
static void pathf(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void pathf(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, CKPT_PATH_MAX, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= CKPT_PATH_MAX) mhe_fail("checkpoint path longer than %d bytes: %.200s...", CKPT_PATH_MAX, out);
}

static void join(char *out, const char *a, const char *b) { pathf(out, "%s/%s", a, b); }

static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

static int write_synced(const char *path, const void *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return -1;
    const char *p = data;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0) {
            if (errno == EINTR) continue;
            close(fd);
            return -1;
        }
        p += k;
        len -= (size_t)k;
    }
    if (fsync(fd) != 0) {
        close(fd);
        return -1;
    }
    return close(fd);
}

// Reads a small file without exiting on failure (a missing state.json is a skip, not an error).
static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = mhe_malloc(cap);
    size_t k;
    while ((k = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += k;
        if (cap - len - 1 == 0) buf = mhe_realloc(buf, cap *= 2);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    buf[len] = '\0';
    return buf;
}

// "step_00000042" -> 42; -1 for any other name (temporaries start with '.').
static int64_t parse_step_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

// Steps of the step_* directories under ck, newest first.  Returns the count (0 if none).
static int list_steps(const char *ck, int64_t **steps) {
    *steps = NULL;
    DIR *d = opendir(ck);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s = parse_step_name(e->d_name);
        if (s < 0) continue;
        if (n == cap) *steps = mhe_realloc(*steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **steps);
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_desc);
    return n;
}

static void step_dir(char *out, const char *ck, int64_t step) {
    pathf(out, "%s/step_%08" PRId64, ck, step);
}

// Leftovers of an interrupted save or prune: ".tmp.*" and ".del.*" entries.
static void remove_leftovers(const char *ck) {
    DIR *d = opendir(ck);
    if (!d) return;
    struct dirent *e;
    char sub[CKPT_PATH_MAX];
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".tmp.", 5) && strncmp(e->d_name, ".del.", 5)) continue;
        join(sub, ck, e->d_name);
        mhe_remove_tree(sub);
    }
    closedir(d);
}

static int ensure_dir(const char *path) {
    if (mkdir(path, 0777) == 0) return 1;
    return errno == EEXIST ? 0 : -1;
}

// mkdir -p; new directories' parents are fsynced so the entries survive a crash.
static int make_dirs(const char *path) {
    char buf[CKPT_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (ensure_dir(buf) < 0) return -1;
        *p = '/';
    }
    int made = ensure_dir(buf);
    if (made < 0) return -1;
    if (made) {
        char parent[CKPT_PATH_MAX];
        snprintf(parent, sizeof parent, "%s", buf);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = '\0';
        else snprintf(parent, sizeof parent, "%s", slash ? "/" : ".");
        fsync_path(parent, 1);
    }
    return 0;
}

static int add_file_entry(cJSON *files, const char *dir, const char *name) {
    char path[CKPT_PATH_MAX], hex[SHA256_HEX_LEN];
    join(path, dir, name);
    struct stat st;
    if (stat(path, &st) != 0 || sha256_file_hex(path, hex) != 0) return -1;
    cJSON *e = cJSON_AddObjectToObject(files, name);
    cJSON_AddStringToObject(e, "sha256", hex);
    cJSON_AddNumberToObject(e, "bytes", (double)st.st_size);
    return 0;
}

static int write_safetensors_synced(const StFile *f, const char *path) {
    if (st_write(f, path) != 0) return -1;
    return fsync_path(path, 0);
}

static int write_model(const char *dir, const ParamTable *t, const float *params) {
    char path[CKPT_PATH_MAX];
    join(path, dir, MODEL_FILE);
    StFile f;
    st_init(&f);
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        int64_t shape[2] = {p->shape[0], p->shape[1]};
        st_add(&f, p->name, ST_F32, p->ndim, shape, params + p->offset);
    }
    int rc = write_safetensors_synced(&f, path);
    st_free(&f);
    return rc;
}

static int write_optim(const char *dir, const ParamTable *t, const OptimState *opt) {
    char path[CKPT_PATH_MAX];
    join(path, dir, OPTIM_FILE);
    const int64_t n = (int64_t)(opt->end - opt->begin), one = 1, three = 3;
    const int64_t range[3] = {(int64_t)opt->begin, (int64_t)opt->end, (int64_t)t->total};
    // m and v are flat, in the parameter table's order: they belong to this layout only.
    const uint64_t layout = param_layout_fingerprint(t);
    StFile f;
    st_init(&f);
    st_add(&f, "m", ST_F32, 1, &n, opt->m);
    st_add(&f, "v", ST_F32, 1, &n, opt->v);
    st_add(&f, "step", ST_I64, 1, &one, &opt->step);
    st_add(&f, "range", ST_I64, 1, &three, range);
    st_add(&f, "param_layout", ST_I64, 1, &one, &layout);
    int rc = write_safetensors_synced(&f, path);
    st_free(&f);
    return rc;
}

static char *u64_text(uint64_t v, char buf[24]) {
    snprintf(buf, 24, "%" PRIu64, v);
    return buf;
}

// The 64 hex digits of "state_sha256" in a state.json text, or NULL.
static char *state_sum_at(char *text) {
    char *k = strstr(text, STATE_SUM_KEY);
    if (!k) return NULL;
    char *q = strchr(k + strlen(STATE_SUM_KEY), '"');
    if (!q || strlen(q + 1) < SHA256_HEX_LEN || q[SHA256_HEX_LEN] != '"') return NULL;
    return q + 1;
}

static int write_state(const char *dir, const CheckpointState *s, int has_optim) {
    cJSON *root = cJSON_CreateObject(), *files;
    char num[24], path[CKPT_PATH_MAX];
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "version", CKPT_VERSION);
    cJSON_AddNumberToObject(root, "step", (double)s->step);
    cJSON_AddNumberToObject(root, "consumed_samples", (double)s->consumed_samples);
    // 64-bit RNG words exceed a double's 53 bits: stored as decimal strings.
    cJSON *rng = cJSON_AddObjectToObject(root, "rng");
    cJSON_AddStringToObject(rng, "seed", u64_text(s->rng_seed, num));
    cJSON_AddStringToObject(rng, "offset", u64_text(s->rng_offset, num));
    cJSON_AddNumberToObject(root, "loss_scale", s->loss_scale);
    cJSON_AddNumberToObject(root, "world_size", s->world_size);
    cJSON_AddStringToObject(root, "config", s->config_yaml ? s->config_yaml : "");
    files = cJSON_AddObjectToObject(root, "files");
    int rc = add_file_entry(files, dir, MODEL_FILE);
    if (rc == 0 && has_optim) rc = add_file_entry(files, dir, OPTIM_FILE);
    if (rc == 0) rc = add_file_entry(files, dir, CONFIG_FILE);
    if (rc == 0) {
        // The state's own checksum: sha256 of the text with the value's 64 characters zeroed
        // (state.json holds the other files' checksums; this covers its own bytes).
        char zeros[SHA256_HEX_LEN];
        memset(zeros, '0', SHA256_HEX_LEN - 1);
        zeros[SHA256_HEX_LEN - 1] = 0;
        cJSON_AddStringToObject(root, "state_sha256", zeros);
        char *text = cJSON_Print(root);
        char *at = state_sum_at(text);
        if (!at) mhe_fatal("checkpoint: state_sha256 missing from the serialized state");
        char hex[SHA256_HEX_LEN];
        sha256_hex(text, strlen(text), hex);
        memcpy(at, hex, SHA256_HEX_LEN - 1);
        join(path, dir, STATE_FILE);
        rc = write_synced(path, text, strlen(text));
        free(text);
    }
    cJSON_Delete(root);
    return rc;
}

// Moves the finished temporary directory to `final`, swapping out an existing one.
static int publish(const char *tmp, const char *final) {
    if (rename(tmp, final) == 0) return 0;
    if (errno != EEXIST && errno != ENOTEMPTY) return -1;
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) != 0) return -1;
    mhe_remove_tree(tmp);  // now holds the replaced checkpoint
    return 0;
}

static int write_latest(const char *ck, int64_t step) {
    char tmp[CKPT_PATH_MAX], dst[CKPT_PATH_MAX], text[64];
    pathf(tmp, "%s/.tmp.latest.%ld", ck, (long)getpid());
    join(dst, ck, "latest");
    int n = snprintf(text, sizeof text, "step_%08" PRId64 "\n", step);
    if (write_synced(tmp, text, (size_t)n) != 0 || rename(tmp, dst) != 0) return -1;
    return fsync_path(ck, 1);
}

// Deletes the oldest checkpoints beyond keep_last (never `keep`).  Each is first renamed to a
// ".del." name so a crash mid-delete leaves no half-deleted step_* directory behind.
static void prune(const char *ck, int keep_last, int64_t keep) {
    int64_t *steps;
    int n = list_steps(ck, &steps), kept = 0;
    char dir[CKPT_PATH_MAX], trash[CKPT_PATH_MAX];
    for (int i = 0; i < n; i++) {
        // Only checkpoints older than the one just saved are superseded: a newer step_* (a
        // previous run's, perhaps failing its checksum) is never deleted by this run.
        if (steps[i] >= keep || kept < keep_last - 1) {
            kept += steps[i] < keep;
            continue;
        }
        step_dir(dir, ck, steps[i]);
        pathf(trash, "%s/.del.step_%08" PRId64 ".%ld", ck, steps[i], (long)getpid());
        if (rename(dir, trash) == 0) mhe_remove_tree(trash);
    }
    fsync_path(ck, 1);
    free(steps);
}

double checkpoint_save_allowance_s(size_t n_params) {
    const double bytes = 3.0 * sizeof(float) * (double)n_params;
    return 60.0 + bytes / 20e6;
}

int checkpoint_save(const char *out_dir, const CheckpointState *state, const ParamTable *t, const float *params,
                    const OptimState *opt, int keep_last) {
    char ck[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], final[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    join(ck, out_dir, "checkpoints");
    step_dir(final, ck, state->step);
    const char *what = "creating the checkpoints directory";
    if (make_dirs(ck) != 0) goto fail;
    remove_leftovers(ck);
    pathf(tmp, "%s/.tmp.step_%08" PRId64 ".%ld", ck, state->step, (long)getpid());
    what = "creating a temporary directory";
    if (mkdir(tmp, 0777) != 0) goto fail;
    what = "writing " MODEL_FILE;
    if (write_model(tmp, t, params) != 0) goto fail_tmp;
    what = "writing " OPTIM_FILE;
    if (opt && write_optim(tmp, t, opt) != 0) goto fail_tmp;
    what = "writing " CONFIG_FILE;
    join(path, tmp, CONFIG_FILE);
    const char *yaml = state->config_yaml ? state->config_yaml : "";
    if (write_synced(path, yaml, strlen(yaml)) != 0) goto fail_tmp;
    what = "writing " STATE_FILE;
    if (write_state(tmp, state, opt != NULL) != 0) goto fail_tmp;
    what = "syncing the directory";
    if (fsync_path(tmp, 1) != 0) goto fail_tmp;
    what = "renaming it into place";
    if (publish(tmp, final) != 0 || fsync_path(ck, 1) != 0) goto fail_tmp;
    what = "updating the latest pointer";
    if (write_latest(ck, state->step) != 0) goto fail;
    if (keep_last > 0) prune(ck, keep_last, state->step);
    return 0;
fail_tmp: {
    int saved = errno;
    mhe_remove_tree(tmp);
    errno = saved;
}
fail:
    fprintf(stderr, "mhetrain: checkpoint %s: %s failed: %s\n", final, what, strerror(errno));
    return -1;
}

void checkpoint_save_new_run(const char *dir, const Config *cfg, const ParamTable *t, const float *params,
                             const char *who) {
    char *yaml = config_yaml_text(cfg), path[CKPT_PATH_MAX];
    join(path, dir, CONFIG_FILE);
    mhe_write_file(path, yaml, strlen(yaml), who);
    CheckpointState state = {.step = 0, .rng_seed = cfg->train.seed, .loss_scale = 1.0, .world_size = 1,
                             .config_yaml = yaml};
    if (checkpoint_save(dir, &state, t, params, NULL, 0) != 0) exit(1);
    free(yaml);
}

static int why_set(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int why_set(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *base_name(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    const char *b = path + n;
    while (b > path && b[-1] != '/') b--;
    return b;
}

// state.json parsed; NULL with `why` set when absent or malformed.
static cJSON *read_state(const char *dir, char *why, size_t why_len) {
    char path[CKPT_PATH_MAX];
    join(path, dir, STATE_FILE);
    char *text = read_text(path);
    if (!text) {
        why_set(why, why_len, "%s: missing or unreadable (an interrupted save?)", path);
        return NULL;
    }
    cJSON *root = cJSON_Parse(text);
    // Its own checksum (version 2 on): any changed byte, the config text and the RNG words
    // included, makes the checkpoint invalid rather than silently different.
    char *sum = state_sum_at(text), recorded[SHA256_HEX_LEN], hex[SHA256_HEX_LEN];
    if (sum) {
        memcpy(recorded, sum, SHA256_HEX_LEN - 1);
        recorded[SHA256_HEX_LEN - 1] = 0;
        memset(sum, '0', SHA256_HEX_LEN - 1);
        sha256_hex(text, strlen(text), hex);
    }
    free(text);
    cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (root && (sum ? strcmp(recorded, hex) != 0
                     : !cJSON_IsNumber(version) || version->valuedouble != 1)) {
        cJSON_Delete(root);
        if (sum)
            why_set(why, why_len, "%s: sha256 checksum of its own text mismatch (file %.12s…, recorded %.12s…): corrupt",
                    path, hex, recorded);
        else
            why_set(why, why_len, "%s: no state_sha256 checksum (a version 2 state): corrupt", path);
        return NULL;
    }
    cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT) != 0 ||
        !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "step")) ||
        !cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(root, "files"))) {
        cJSON_Delete(root);
        why_set(why, why_len, "%s: not a valid mhetrain checkpoint state (malformed JSON or missing fields)", path);
        return NULL;
    }
    return root;
}

int checkpoint_validate(const char *dir, char *why, size_t why_len) {
    cJSON *root = read_state(dir, why, why_len);
    if (!root) return -1;
    int rc = 0;
    const int64_t step = (int64_t)cJSON_GetObjectItemCaseSensitive(root, "step")->valuedouble;
    const int64_t named = parse_step_name(base_name(dir));
    cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "files");
    if (named >= 0 && named != step) {
        rc = why_set(why, why_len, "%s/%s: records step %" PRId64 " but the directory is named for step %" PRId64, dir,
                     STATE_FILE, step, named);
    } else if (!cJSON_GetObjectItemCaseSensitive(files, MODEL_FILE)) {
        rc = why_set(why, why_len, "%s/%s: lists no %s", dir, STATE_FILE, MODEL_FILE);
    }
    for (cJSON *e = files->child; rc == 0 && e; e = e->next) {
        char path[CKPT_PATH_MAX], hex[SHA256_HEX_LEN];
        cJSON *sha = cJSON_GetObjectItemCaseSensitive(e, "sha256"), *bytes = cJSON_GetObjectItemCaseSensitive(e, "bytes");
        if (strchr(e->string, '/') || !cJSON_IsString(sha) || !cJSON_IsNumber(bytes)) {
            rc = why_set(why, why_len, "%s/%s: malformed entry for '%s'", dir, STATE_FILE, e->string);
            break;
        }
        join(path, dir, e->string);
        struct stat st;
        if (stat(path, &st) != 0) {
            rc = why_set(why, why_len, "%s: missing (%s)", path, strerror(errno));
        } else if ((double)st.st_size != bytes->valuedouble) {
            rc = why_set(why, why_len, "%s: %lld bytes, %s records %.0f (truncated or partial)", path,
                         (long long)st.st_size, STATE_FILE, bytes->valuedouble);
        } else if (sha256_file_hex(path, hex) != 0) {
            rc = why_set(why, why_len, "%s: unreadable (%s)", path, strerror(errno));
        } else if (strcmp(hex, sha->valuestring) != 0) {
            rc = why_set(why, why_len, "%s: sha256 checksum mismatch (file %.12s…, %s records %.12s…): corrupt", path, hex,
                         STATE_FILE, sha->valuestring);
        }
    }
    cJSON_Delete(root);
    return rc;
}

char *checkpoint_find_latest(const char *out_dir) {
    char ck[CKPT_PATH_MAX], dir[CKPT_PATH_MAX], why[CKPT_PATH_MAX + 256];
    join(ck, out_dir, "checkpoints");
    int64_t *steps;
    int n = list_steps(ck, &steps);
    char *found = NULL;
    for (int i = 0; i < n && !found; i++) {
        step_dir(dir, ck, steps[i]);
        if (checkpoint_validate(dir, why, sizeof why) == 0) found = mhe_strdup(dir);
        else fprintf(stderr, "mhetrain: skipping checkpoint step_%08" PRId64 ": %s\n", steps[i], why);
    }
    free(steps);
    return found;
}

int checkpoint_list(const char *out_dir, char *names, size_t len) {
    char ck[CKPT_PATH_MAX];
    join(ck, out_dir, "checkpoints");
    int64_t *steps;
    int n = list_steps(ck, &steps);
    size_t used = 0;
    if (len) names[0] = 0;
    for (int i = 0; i < n && len; i++) {
        int w = snprintf(names + used, len - used, "%s%s/step_%08" PRId64, i ? ", " : "", ck, steps[i]);
        if (w < 0 || (size_t)w >= len - used) break;
        used += (size_t)w;
    }
    free(steps);
    return n;
}

char *checkpoint_resolve(const char *path) {
    char probe[CKPT_PATH_MAX];
    struct stat st;
    join(probe, path, STATE_FILE);
    if (stat(probe, &st) == 0) return mhe_strdup(path);
    join(probe, path, "checkpoints");
    if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode)) {
        char *dir = checkpoint_find_latest(path);
        if (!dir) {
            char names[2048];
            if (checkpoint_list(path, names, sizeof names) == 0) mhe_fail_at(path, 0, 0, "no checkpoint under %s", probe);
            mhe_fail_at(path, 0, 0, "no valid checkpoint: %s failed validation (reasons above)", names);
        }
        return dir;
    }
    mhe_fail_at(path, 0, 0, "not a checkpoint (no %s) nor a run directory (no checkpoints/)", STATE_FILE);
}

static void check_valid(const char *dir) {
    char why[CKPT_PATH_MAX + 256];
    if (checkpoint_validate(dir, why, sizeof why) != 0) mhe_fail("%s", why);
}

static void format_shape(char *out, size_t n, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(out + k, n - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < n) snprintf(out + k, n - k, "]");
}

static void load_model(const char *dir, const ParamTable *t, float *params) {
    char path[CKPT_PATH_MAX];
    join(path, dir, MODEL_FILE);
    StFile f;
    st_read(&f, path);
    for (int j = 0; j < t->count; j++) {
        const ParamTensor *p = &t->tensors[j];
        const StTensor *s = st_find(&f, p->name);
        if (!s) mhe_fail_at(path, 0, 0, "tensor '%s' is missing (is the checkpoint from another model config?)", p->name);
        const int64_t want[2] = {p->shape[0], p->shape[1]};
        int same = s->dtype == ST_F32 && s->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = s->shape[d] == want[d];
        if (!same) {
            char got[96], exp[96];
            format_shape(got, sizeof got, s->ndim, s->shape);
            format_shape(exp, sizeof exp, p->ndim, want);
            mhe_fail_at(path, 0, 0, "tensor '%s' has %s %s, the model expects F32 %s", p->name,
                        s->dtype == ST_F32 ? "F32" : "a non-F32 dtype", got, exp);
        }
        memcpy(params + p->offset, s->data, p->numel * sizeof(float));
    }
    for (int i = 0; i < f.count; i++)
        if (!param_table_find(t, f.tensors[i].name))
            mhe_fail_at(path, 0, 0, "unexpected tensor '%s' (not part of this model)", f.tensors[i].name);
    st_free(&f);
}

static const StTensor *need(const StFile *f, const char *path, const char *name, StDtype dtype, int64_t numel) {
    const StTensor *s = st_find(f, name);
    if (!s) mhe_fail_at(path, 0, 0, "tensor '%s' is missing", name);
    if (s->dtype != dtype || s->ndim != 1 || s->shape[0] != numel)
        mhe_fail_at(path, 0, 0, "tensor '%s' has the wrong dtype or shape (expected %lld elements)", name, (long long)numel);
    return s;
}

static void load_optim(const char *dir, const ParamTable *t, OptimState *opt) {
    char path[CKPT_PATH_MAX];
    join(path, dir, OPTIM_FILE);
    if (access(path, F_OK) != 0) mhe_fail_at(path, 0, 0, "missing: this checkpoint holds weights only and cannot resume a run");
    StFile f;
    st_read(&f, path);
    // The moments are flat ranges of the parameter table: written for another order of the same
    // tensors (an older mhetrain laid each projection's bias after its weight) they would be
    // applied to the wrong parameters without any shape error, so the layout must match.
    if (!st_find(&f, "param_layout"))
        mhe_fail_at(path, 0, 0,
                    "optimizer state has no param_layout fingerprint (written by an older mhetrain, whose "
                    "parameter order differs): its flat moments cannot be matched to this model's parameters");
    const uint64_t layout = param_layout_fingerprint(t);
    const uint64_t had = *(const uint64_t *)need(&f, path, "param_layout", ST_I64, 1)->data;
    if (had != layout)
        mhe_fail_at(path, 0, 0,
                    "optimizer state was written for parameter layout %016llx, this model's is %016llx: its "
                    "flat moments cannot be matched to the parameters",
                    (unsigned long long)had, (unsigned long long)layout);
    const int64_t *range = need(&f, path, "range", ST_I64, 3)->data;
    // The file may cover more than this state (a gathered full state read by one ZeRO-1 shard).
    if (range[2] != (int64_t)t->total || range[0] > (int64_t)opt->begin || range[1] < (int64_t)opt->end)
        mhe_fail_at(path, 0, 0,
                    "optimizer state covers [%lld, %lld) of %lld parameters; this run needs [%zu, %zu) of %zu "
                    "(another model config or world size?)",
                    (long long)range[0], (long long)range[1], (long long)range[2], opt->begin, opt->end, t->total);
    const int64_t held = range[1] - range[0], skip = (int64_t)opt->begin - range[0];
    const size_t n = opt->end - opt->begin;
    memcpy(opt->m, (const float *)need(&f, path, "m", ST_F32, held)->data + skip, n * sizeof(float));
    memcpy(opt->v, (const float *)need(&f, path, "v", ST_F32, held)->data + skip, n * sizeof(float));
    opt->step = *(const int64_t *)need(&f, path, "step", ST_I64, 1)->data;
    st_free(&f);
}

// state.json's fields, strictly: a state that validates (its checksums match) but lacks a
// field or holds the wrong kind of value was written by something else, and resuming from
// made-up defaults would silently change the run.  u64s are decimal strings (JSON numbers are
// doubles), read by the one number parser (common/num.h).
static uint64_t u64_field(const char *path, cJSON *obj, const char *key) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(obj, key);
    uint64_t v;
    if (!cJSON_IsString(e) || mhe_parse_u64(e->valuestring, &v) != MHE_NUM_OK)
        mhe_fail_at(path, 0, 0, "rng.%s: expected a decimal integer string", key);
    return v;
}

static double num_field(const char *path, cJSON *obj, const char *key, double dflt, double lo, double hi,
                        int required) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!e && !required) return dflt;
    if (!cJSON_IsNumber(e) || !(e->valuedouble >= lo && e->valuedouble <= hi))
        mhe_fail_at(path, 0, 0, "%s: expected a number in [%g, %g]", key, lo, hi);
    return e->valuedouble;
}

void checkpoint_load(const char *dir, const ParamTable *t, float *params, OptimState *opt, CheckpointState *state) {
    check_valid(dir);
    char why[CKPT_PATH_MAX + 256];
    cJSON *root = read_state(dir, why, sizeof why);
    if (!root) mhe_fail("%s", why);
    load_model(dir, t, params);
    if (opt) load_optim(dir, t, opt);
    if (state) {
        char sp[CKPT_PATH_MAX];
        join(sp, dir, STATE_FILE);
        memset(state, 0, sizeof *state);
        state->step = (int64_t)num_field(sp, root, "step", 0, 0, 9007199254740992.0, 1);
        state->consumed_samples = (int64_t)num_field(sp, root, "consumed_samples", 0, 0, 9007199254740992.0, 1);
        cJSON *rng = cJSON_GetObjectItemCaseSensitive(root, "rng");
        state->rng_seed = u64_field(sp, rng, "seed");
        state->rng_offset = u64_field(sp, rng, "offset");
        state->loss_scale = num_field(sp, root, "loss_scale", 1.0, 0, 3.4e38, 0);
        state->world_size = (int)num_field(sp, root, "world_size", 1, 1, 1 << 20, 0);
        cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
        state->config_yaml = mhe_strdup(cJSON_IsString(cfg) ? cfg->valuestring : "");
    }
    cJSON_Delete(root);
}

void checkpoint_load_weights(const char *dir, const ParamTable *t, float *params) {
    check_valid(dir);
    load_model(dir, t, params);
}

void checkpoint_state_free(CheckpointState *state) {
    free(state->config_yaml);
    state->config_yaml = NULL;
}
