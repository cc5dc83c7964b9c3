// config_load: YAML files (with base: chains) and key=value overrides into a Config, strictly
// typed: every key must be known and every value must have the field's type.
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/num.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"
#include "trainer/config/config_tree.h"

static _Noreturn void fail_node(const CNode *n, const char *key, const char *what) {
    const char *found = n->kind == CNODE_SEQ   ? "a list"
                        : n->kind == CNODE_MAP ? "a mapping"
                        : cnode_is_null(n)     ? "nothing"
                                               : NULL;
    if (found) mhe_fail_at(n->file, n->line, n->col, "%s: expected %s, found %s", key, what, found);
    char shown[CNODE_SHOW_MAX];
    mhe_fail_at(n->file, n->line, n->col, "%s: expected %s, found %s'%s'", key, what,
                n->quoted ? "the string " : "", cnode_show(n->text, shown));
}

static const char *plain_scalar(const CNode *n, const char *key, const char *what) {
    if (n->kind != CNODE_SCALAR || n->quoted || cnode_is_null(n)) fail_node(n, key, what);
    return n->text;
}

// Numbers go through common/num.h, the parser of every number we read (README: "Numbers"):
// decimal integers, or a whole-number literal (1e9, 2.0) for token budgets.
static long long parse_integer(const CNode *n, const char *key, long long lo, long long hi) {
    const char *what = "an integer";
    const char *s = plain_scalar(n, key, what);
    long long v;
    MheNum r = mhe_parse_int(s, lo, hi, &v);
    if (r == MHE_NUM_SYNTAX) fail_node(n, key, what);
    if (r == MHE_NUM_RANGE)
        mhe_fail_at(n->file, n->line, n->col, "%s: expected an integer in [%lld, %lld], found %s",
                    key, lo, hi, s);
    return v;
}

static unsigned long long parse_unsigned(const CNode *n, const char *key) {
    const char *s = plain_scalar(n, key, "a non-negative integer");
    uint64_t v;
    MheNum r = mhe_parse_u64(s, &v);
    if (r == MHE_NUM_SYNTAX) fail_node(n, key, "a non-negative integer");
    if (r == MHE_NUM_RANGE)
        mhe_fail_at(n->file, n->line, n->col, "%s: expected an integer in [0, %llu], found %s", key,
                    (unsigned long long)UINT64_MAX, s);
    return v;
}

static float parse_float(const CNode *n, const char *key) {
    const char *s = plain_scalar(n, key, "a number");
    double d;
    MheNum r = mhe_parse_real(s, -3.4e38, 3.4e38, &d);
    if (r != MHE_NUM_OK) fail_node(n, key, "a finite number");
    return (float)d;
}

static bool parse_bool(const CNode *n, const char *key) {
    const char *s = plain_scalar(n, key, "true or false");
    if (!strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE")) return true;
    if (!strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE")) return false;
    fail_node(n, key, "true or false");
}

static int parse_enum(const CNode *n, const char *key, const char *const *names) {
    char expected[256] = "one of";
    for (int i = 0; names[i]; i++) {
        strcat(expected, i ? ", " : " ");
        strcat(expected, names[i]);
    }
    if (n->kind != CNODE_SCALAR || cnode_is_null(n)) fail_node(n, key, expected);
    for (int i = 0; names[i]; i++)
        if (strcmp(n->text, names[i]) == 0) return i;
    fail_node(n, key, expected);
}

static char *parse_string(const CNode *n, const char *key) {
    if (n->kind != CNODE_SCALAR) fail_node(n, key, "a string");
    return mhe_strdup(cnode_is_null(n) ? "" : n->text);
}

static void parse_paths(const CNode *n, const char *key, char **paths, int *count) {
    for (int i = 0; i < *count; i++) free(paths[i]);
    *count = 0;
    if (n->kind == CNODE_MAP) fail_node(n, key, "a path or a list of paths");
    if (n->kind == CNODE_SCALAR) {
        if (cnode_is_null(n)) return;
        paths[(*count)++] = mhe_strdup(n->text);
        return;
    }
    if (n->n > MHE_MAX_PATHS)
        mhe_fail_at(n->file, n->line, n->col, "%s: expected at most %d paths, found %d", key,
                    MHE_MAX_PATHS, n->n);
    for (int i = 0; i < n->n; i++) {
        const CNode *item = n->items[i];
        if (item->kind != CNODE_SCALAR || cnode_is_null(item) || item->text[0] == '\0')
            fail_node(item, key, "a path (a non-empty string)");
        paths[(*count)++] = mhe_strdup(item->text);
    }
}

static void set_field(Config *cfg, const ConfigField *f, const CNode *n, const char *key) {
    char *p = (char *)cfg + f->offset;
    switch (f->type) {
    case F_INT: *(int *)p = (int)parse_integer(n, key, -2147483647LL - 1, 2147483647LL); break;
    case F_I64: *(int64_t *)p = (int64_t)parse_integer(n, key, INT64_MIN, INT64_MAX); break;
    case F_U64: *(uint64_t *)p = (uint64_t)parse_unsigned(n, key); break;
    case F_FLOAT: *(float *)p = parse_float(n, key); break;
    case F_BOOL: *(bool *)p = parse_bool(n, key); break;
    case F_ENUM: *(int *)p = parse_enum(n, key, f->names); break;
    case F_STRING:
        free(*(char **)p);
        *(char **)p = parse_string(n, key);
        break;
    case F_PATHS: parse_paths(n, key, (char **)p, (int *)((char *)cfg + f->count_offset)); break;
    }
}

static void list_keys(char *out, size_t cap, const char *section) {
    out[0] = '\0';
    for (int i = 0, n = config_field_count(); i < n; i++) {
        const ConfigField *f = config_field(i);
        if (strcmp(f->section, section) != 0) continue;
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%s", used ? ", " : "", f->key);
    }
}

static void convert_section(Config *cfg, ConfigMarks *marks, const char *section, const CNode *map) {
    if (cnode_is_null(map)) return;
    if (map->kind != CNODE_MAP) fail_node(map, section, "a mapping of keys");
    for (int i = 0; i < map->n; i++) {
        const CNode *k = map->keys[i];
        const ConfigField *f = config_field_find(section, k->text);
        if (!f) {
            char keys[1024];
            list_keys(keys, sizeof keys, section);
            char shown[CNODE_SHOW_MAX];
            mhe_fail_at(k->file, k->line, k->col, "unknown key '%s' in section %s (expected one of: %s)",
                        cnode_show(k->text, shown), section, keys);
        }
        char full[64];
        snprintf(full, sizeof full, "%s.%s", section, f->key);
        const CNode *v = map->items[i];
        set_field(cfg, f, v, full);
        cfg->explicit_fields |= f->set_bit;
        config_marks_set(marks, full, v->file, v->line, v->col);
    }
}

// "base, model, attention, ... or runtime" from the table.
static void list_sections(char *out, size_t cap) {
    snprintf(out, cap, "base");
    for (int s = 0; CONFIG_SECTIONS[s].name; s++) {
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%s", CONFIG_SECTIONS[s + 1].name ? ", " : " or ",
                 CONFIG_SECTIONS[s].name);
    }
}

static void convert(Config *cfg, ConfigMarks *marks, const CNode *root) {
    for (int i = 0; i < root->n; i++) {
        const CNode *k = root->keys[i];
        int s = 0;
        while (CONFIG_SECTIONS[s].name && strcmp(CONFIG_SECTIONS[s].name, k->text) != 0) s++;
        if (!CONFIG_SECTIONS[s].name) {
            char shown[CNODE_SHOW_MAX], expected[256];
            list_sections(expected, sizeof expected);
            mhe_fail_at(k->file, k->line, k->col, "unknown section '%s' (expected %s)",
                        cnode_show(k->text, shown), expected);
        }
    }
    // The order of sections does not matter for parsing; validation runs afterwards.
    for (int s = 0; CONFIG_SECTIONS[s].name; s++) {
        const CNode *section = cnode_get(root, CONFIG_SECTIONS[s].name);
        if (section) convert_section(cfg, marks, CONFIG_SECTIONS[s].name, section);
    }
}

// How derived the source of a node is: later overrides > earlier overrides > the loaded file >
// its base > the base's base.  Files are registered in that loading order.
static int source_rank(const ConfigFiles *files, int n_config_files, const CNode *node) {
    for (int i = 0; i < files->count; i++)
        if (files->names[i] == node->file) return i >= n_config_files ? i : -i;
    return 0;
}

// train.steps and train.tokens both set a budget; when they come from different sources, the
// more derived one wins (a base's `steps: 300` must not block `train.tokens=1e9`).  From the
// same source they must agree (config_check).  This runs on the merged tree, before typing.
static void drop_outranked_budget(CNode *root, const ConfigFiles *files, int n_config_files) {
    CNode *train = cnode_get(root, "train");
    CNode *steps = cnode_get(train, "steps"), *tokens = cnode_get(train, "tokens");
    // `steps: 0` explicitly defers to the token budget: nothing to drop.
    if (!steps || !tokens || (steps->kind == CNODE_SCALAR && strcmp(steps->text, "0") == 0)) return;
    int rs = source_rank(files, n_config_files, steps);
    int rt = source_rank(files, n_config_files, tokens);
    if (rs != rt) cnode_remove(train, rs < rt ? "steps" : "tokens");
}

void config_load(Config *cfg, const char *path, int n_overrides, char **overrides) {
    ConfigFiles files = {0};
    CNode *root = config_tree_load(&files, path);
    const int n_config_files = files.count;
    for (int i = 0; i < n_overrides; i++) config_tree_override(&files, root, overrides[i], i + 1);
    drop_outranked_budget(root, &files, n_config_files);
    config_defaults(cfg);
    ConfigMarks marks = {0};
    marks.fallback_file = path;
    convert(cfg, &marks, root);
    config_check(cfg, &marks);
    free(cfg->source);
    cfg->source = mhe_strdup(path);
    config_marks_free(&marks);
    cnode_free(root);
    config_files_free(&files);
}
