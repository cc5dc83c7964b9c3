// YAML text -> CNode trees (libyaml document API, for line/column marks), `base:` chains and
// command-line overrides.  The typed conversion into Config lives in config_load.c.
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/error.h"
#include "trainer/config/config_tree.h"

// Aliases can nest (and libyaml lets an alias refer to its own ancestor); a config never needs
// more than a few levels, so deeper trees are rejected rather than followed.
#define CNODE_MAX_DEPTH 16
#define CNODE_MAX_NODES 100000
#define BASE_MAX_CHAIN 32

const char *config_files_add(ConfigFiles *f, const char *name) {
    f->names = mhe_realloc(f->names, (size_t)(f->count + 1) * sizeof *f->names);
    f->names[f->count] = mhe_strdup(name);
    return f->names[f->count++];
}

void config_files_free(ConfigFiles *f) {
    for (int i = 0; i < f->count; i++) free(f->names[i]);
    free(f->names);
    f->names = NULL;
    f->count = 0;
}

void cnode_free(CNode *node) {
    if (!node) return;
    for (int i = 0; i < node->n; i++) {
        if (node->keys) cnode_free(node->keys[i]);
        cnode_free(node->items[i]);
    }
    free(node->keys);
    free(node->items);
    free(node->text);
    free(node);
}

CNode *cnode_get(const CNode *map, const char *key) {
    if (!map || map->kind != CNODE_MAP) return NULL;
    for (int i = 0; i < map->n; i++)
        if (strcmp(map->keys[i]->text, key) == 0) return map->items[i];
    return NULL;
}

void cnode_remove(CNode *map, const char *key) {
    if (!map || map->kind != CNODE_MAP) return;
    for (int i = 0; i < map->n; i++) {
        if (strcmp(map->keys[i]->text, key) != 0) continue;
        cnode_free(map->keys[i]);
        cnode_free(map->items[i]);
        memmove(map->keys + i, map->keys + i + 1, (size_t)(map->n - i - 1) * sizeof *map->keys);
        memmove(map->items + i, map->items + i + 1, (size_t)(map->n - i - 1) * sizeof *map->items);
        map->n--;
        return;
    }
}

int cnode_is_null(const CNode *node) {
    if (!node || node->kind != CNODE_SCALAR || node->quoted) return 0;
    const char *t = node->text;
    return t[0] == '\0' || strcmp(t, "~") == 0 || strcmp(t, "null") == 0 ||
           strcmp(t, "Null") == 0 || strcmp(t, "NULL") == 0;
}

const char *cnode_show(const char *s, char buf[CNODE_SHOW_MAX]) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (o + 8 >= CNODE_SHOW_MAX) {
            strcpy(buf + o, "...");
            return buf;
        }
        if (*p == '\n') o += (size_t)sprintf(buf + o, "\\n");
        else if (*p == '\t') o += (size_t)sprintf(buf + o, "\\t");
        else if (*p < 0x20 || *p == 0x7f) o += (size_t)sprintf(buf + o, "\\x%02x", *p);
        else buf[o++] = (char)*p;
    }
    buf[o] = '\0';
    return buf;
}

static CNode *cnode_new(CNodeKind kind, const char *file, int line, int col) {
    CNode *n = mhe_calloc(1, sizeof *n);
    n->kind = kind;
    n->file = file;
    n->line = line;
    n->col = col;
    return n;
}

static void cnode_push(CNode *parent, CNode *key, CNode *value) {
    parent->items = mhe_realloc(parent->items, (size_t)(parent->n + 1) * sizeof *parent->items);
    if (parent->kind == CNODE_MAP)
        parent->keys = mhe_realloc(parent->keys, (size_t)(parent->n + 1) * sizeof *parent->keys);
    if (key) parent->keys[parent->n] = key;
    parent->items[parent->n++] = value;
}

typedef struct {
    yaml_document_t *doc;
    const char *file;
    int cmdline;  // command-line values have no line or column
    int nodes;
} Builder;

static CNode *build(Builder *b, yaml_node_t *y, int depth) {
    int line = b->cmdline ? 0 : (int)y->start_mark.line + 1;
    int col = b->cmdline ? 0 : (int)y->start_mark.column + 1;
    if (depth > CNODE_MAX_DEPTH || ++b->nodes > CNODE_MAX_NODES)
        mhe_fail_at(b->file, line, col, "YAML nested too deeply (recursive alias?)");
    switch (y->type) {
    case YAML_SCALAR_NODE: {
        CNode *n = cnode_new(CNODE_SCALAR, b->file, line, col);
        n->text = mhe_malloc(y->data.scalar.length + 1);
        memcpy(n->text, y->data.scalar.value, y->data.scalar.length);
        n->text[y->data.scalar.length] = '\0';
        if (strlen(n->text) != y->data.scalar.length)
            mhe_fail_at(b->file, line, col, "expected text, found a NUL character");
        n->quoted = y->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
        return n;
    }
    case YAML_SEQUENCE_NODE: {
        CNode *n = cnode_new(CNODE_SEQ, b->file, line, col);
        for (yaml_node_item_t *it = y->data.sequence.items.start; it < y->data.sequence.items.top; it++)
            cnode_push(n, NULL, build(b, yaml_document_get_node(b->doc, *it), depth + 1));
        return n;
    }
    case YAML_MAPPING_NODE: {
        CNode *n = cnode_new(CNODE_MAP, b->file, line, col);
        for (yaml_node_pair_t *p = y->data.mapping.pairs.start; p < y->data.mapping.pairs.top; p++) {
            CNode *key = build(b, yaml_document_get_node(b->doc, p->key), depth + 1);
            if (key->kind != CNODE_SCALAR)
                mhe_fail_at(key->file, key->line, key->col, "expected a key name, found a %s",
                            key->kind == CNODE_SEQ ? "list" : "mapping");
            if (cnode_get(n, key->text))
                {
                char shown[CNODE_SHOW_MAX];
                mhe_fail_at(key->file, key->line, key->col, "duplicate key '%s'",
                            cnode_show(key->text, shown));
            }
            cnode_push(n, key, build(b, yaml_document_get_node(b->doc, p->value), depth + 1));
        }
        return n;
    }
    default:
        return cnode_new(CNODE_SCALAR, b->file, line, col);
    }
}

static _Noreturn void fail_parser(const char *file, const yaml_parser_t *p, int cmdline) {
    const char *problem = p->problem ? p->problem : "malformed YAML";
    if (cmdline) mhe_fail_at(file, 0, 0, "malformed YAML value: %s", problem);
    int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
    if (p->context)
        mhe_fail_at(file, line, col, "malformed YAML: %s %s (line %d)", problem, p->context,
                    (int)p->context_mark.line + 1);
    mhe_fail_at(file, line, col, "malformed YAML: %s", problem);
}

// The depth limit enforced event by event before the document is loaded: libyaml's loader (and
// its scanner's simple-key bookkeeping) is quadratic in the nesting, so a deeply nested file
// would take minutes to load only to be rejected by build().  This pass stops at the first
// node deeper than build() accepts, having parsed only that far.
static void check_depth(const char *file, const char *text, size_t len, int cmdline) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) mhe_fatal("libyaml: cannot initialise a parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, done = 0;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) fail_parser(file, &parser, cmdline);
        int node = ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT ||
                   ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT;
        if (node && depth > CNODE_MAX_DEPTH)
            mhe_fail_at(file, cmdline ? 0 : (int)ev.start_mark.line + 1, cmdline ? 0 : (int)ev.start_mark.column + 1,
                        "YAML nested too deeply (more than %d levels)", CNODE_MAX_DEPTH);
        if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT) depth++;
        if (ev.type == YAML_SEQUENCE_END_EVENT || ev.type == YAML_MAPPING_END_EVENT) depth--;
        done = ev.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
}

// Parses text (one document) into a tree; an empty document gives NULL.
static CNode *parse_text(const char *file, const char *text, size_t len, int cmdline) {
    check_depth(file, text, len, cmdline);
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) mhe_fatal("libyaml: cannot initialise a parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) fail_parser(file, &parser, cmdline);
    CNode *root = NULL;
    yaml_node_t *y = yaml_document_get_root_node(&doc);
    if (y) {
        Builder b = {&doc, file, cmdline, 0};
        root = build(&b, y, 0);
        if (cmdline) root->line = root->col = 0;
        yaml_document_t next;
        if (!yaml_parser_load(&parser, &next)) fail_parser(file, &parser, cmdline);
        int more = yaml_document_get_root_node(&next) != NULL;
        int line = (int)next.start_mark.line + 1;
        yaml_document_delete(&next);
        if (more) mhe_fail_at(file, cmdline ? 0 : line, cmdline ? 0 : 1,
                              "expected a single YAML document, found another one");
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return root;
}

static void clear_positions(CNode *n) {
    n->line = n->col = 0;
    for (int i = 0; i < n->n; i++) {
        if (n->keys) clear_positions(n->keys[i]);
        clear_positions(n->items[i]);
    }
}

// Merges `over` into `into` (both mappings): nested mappings merge, anything else replaces.
// Consumes `over`.
static void merge(CNode *into, CNode *over) {
    for (int i = 0; i < over->n; i++) {
        CNode *key = over->keys[i], *value = over->items[i];
        int j = 0;
        while (j < into->n && strcmp(into->keys[j]->text, key->text) != 0) j++;
        if (j < into->n && into->items[j]->kind == CNODE_MAP && value->kind == CNODE_MAP) {
            merge(into->items[j], value);
            cnode_free(key);
        } else if (j < into->n && into->items[j]->kind == CNODE_MAP && cnode_is_null(value)) {
            // An empty section (`model:` alone) keeps what the base says.
            cnode_free(key);
            cnode_free(value);
        } else if (j < into->n) {
            cnode_free(into->keys[j]);
            cnode_free(into->items[j]);
            into->keys[j] = key;
            into->items[j] = value;
        } else {
            cnode_push(into, key, value);
        }
    }
    free(over->keys);
    free(over->items);
    over->keys = NULL;
    over->items = NULL;
    over->n = 0;
    cnode_free(over);
}

// "a/b/c.yaml" + "d.yaml" -> "a/b/d.yaml"; absolute bases stay as they are.
static char *relative_to(const char *including, const char *base) {
    if (base[0] == '/') return mhe_strdup(base);
    const char *slash = strrchr(including, '/');
    size_t dir = slash ? (size_t)(slash - including) + 1 : 0;
    char *out = mhe_malloc(dir + strlen(base) + 1);
    memcpy(out, including, dir);
    strcpy(out + dir, base);
    return out;
}

typedef struct {
    int depth;
    char *real[BASE_MAX_CHAIN];  // canonical paths of the files being loaded, outermost first
    const char *shown[BASE_MAX_CHAIN];
} BaseChain;

static CNode *load_file(ConfigFiles *files, const char *path, BaseChain *chain,
                        const CNode *from) {
    char shown[CNODE_SHOW_MAX];
    const char *file = config_files_add(files, cnode_show(path, shown));
    char *real = realpath(path, NULL);
    FILE *probe = real ? fopen(path, "rb") : NULL;
    if (!probe) {
        const char *why = strerror(errno);
        if (from)
            mhe_fail_at(from->file, from->line, from->col, "cannot read base file '%s': %s",
                        file, why);
        mhe_fail_at(file, 0, 0, "cannot read config file: %s", why);
    }
    fclose(probe);
    for (int i = 0; i < chain->depth; i++) {
        if (strcmp(chain->real[i], real) != 0) continue;
        char cycle[2048] = "";
        for (int j = i; j < chain->depth; j++) {
            size_t used = strlen(cycle);
            snprintf(cycle + used, sizeof cycle - used, "%s -> ", chain->shown[j]);
        }
        mhe_fail_at(from->file, from->line, from->col, "base cycle: %s%s", cycle, file);
    }
    if (chain->depth == BASE_MAX_CHAIN)
        mhe_fail_at(from->file, from->line, from->col, "base chain longer than %d files",
                    BASE_MAX_CHAIN);
    chain->real[chain->depth] = real;
    chain->shown[chain->depth] = file;
    chain->depth++;

    size_t len;
    char *text = mhe_read_file(path, &len);
    CNode *root = parse_text(file, text, len, 0);
    free(text);
    if (!root) root = cnode_new(CNODE_MAP, file, 1, 1);
    if (root->kind != CNODE_MAP)
        mhe_fail_at(file, root->line, root->col,
                    "expected a mapping of sections (model:, attention:, ...) at the top level, "
                    "found a %s", root->kind == CNODE_SEQ ? "list" : "scalar");
    int b = 0;
    while (b < root->n && strcmp(root->keys[b]->text, "base") != 0) b++;
    if (b < root->n) {
        const CNode *value = root->items[b];
        if (value->kind != CNODE_SCALAR || cnode_is_null(value))
            mhe_fail_at(value->file, value->line, value->col,
                        "base: expected the path of a YAML file to inherit from");
        char *base_path = relative_to(path, value->text);
        CNode *base = load_file(files, base_path, chain, value);
        free(base_path);
        // Drop the base key before merging: the result has no base of its own any more.
        cnode_remove(root, "base");
        merge(base, root);
        root = base;
    }
    chain->depth--;
    free(real);
    return root;
}

CNode *config_tree_load(ConfigFiles *files, const char *path) {
    BaseChain chain = {0};
    return load_file(files, path, &chain, NULL);
}

void config_tree_override(ConfigFiles *files, CNode *root, const char *arg, int index) {
    char where[64];
    snprintf(where, sizeof where, "<command line>:arg%d", index);
    const char *file = config_files_add(files, where);
    char shown[CNODE_SHOW_MAX];
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        mhe_fail_at(file, 0, 0, "expected section.key=value, got '%s'", cnode_show(arg, shown));
    size_t klen = (size_t)(eq - arg);
    char *path = mhe_malloc(klen + 1);
    memcpy(path, arg, klen);
    path[klen] = '\0';
    if (!strchr(path, '.') || path[0] == '.' || path[klen - 1] == '.' || strstr(path, ".."))
        mhe_fail_at(file, 0, 0, "expected section.key=value (e.g. model.hidden=256), got '%s'",
                    cnode_show(arg, shown));
    CNode *value = parse_text(file, eq + 1, strlen(eq + 1), 1);
    if (!value) {
        value = cnode_new(CNODE_SCALAR, file, 0, 0);
        value->text = mhe_strdup("");
    }
    clear_positions(value);

    // Walk (and create) the mappings of the path, then set the last component.
    CNode *map = root;
    char *save = NULL;
    char *part = strtok_r(path, ".", &save);
    for (;;) {
        char *next = strtok_r(NULL, ".", &save);
        CNode *key = cnode_new(CNODE_SCALAR, file, 0, 0);
        key->text = mhe_strdup(part);
        CNode *wrapper = cnode_new(CNODE_MAP, file, 0, 0);
        if (next) {
            CNode *child = cnode_get(map, part);
            if (child && child->kind == CNODE_MAP) {
                cnode_free(key);
                cnode_free(wrapper);
                map = child;
                part = next;
                continue;
            }
            if (child && !cnode_is_null(child))
                mhe_fail_at(file, 0, 0, "%s: '%s' holds a value, not a section of keys",
                            cnode_show(arg, shown), part);
            // Absent or empty: merging a fresh mapping creates or replaces it.
            CNode *fresh = cnode_new(CNODE_MAP, file, 0, 0);
            cnode_push(wrapper, key, fresh);
            merge(map, wrapper);
            map = cnode_get(map, part);
            part = next;
            continue;
        }
        cnode_push(wrapper, key, value);
        merge(map, wrapper);
        break;
    }
    free(path);
}
