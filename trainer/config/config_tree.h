// A YAML document as a small owned tree whose every node remembers file:line:col, so that the
// loader can merge `base:` chains and overrides and still report positions (config_yaml.c).
#ifndef MHE_TRAINER_CONFIG_TREE_H
#define MHE_TRAINER_CONFIG_TREE_H

typedef enum { CNODE_SCALAR, CNODE_SEQ, CNODE_MAP } CNodeKind;

typedef struct CNode CNode;
struct CNode {
    CNodeKind kind;
    const char *file;  // owned by the ConfigFiles of the load
    int line, col;     // 1-based; 0 for command-line values
    char *text;        // scalar text
    int quoted;        // scalar was quoted or a block scalar (a string, never a number)
    int n;             // items of a sequence or pairs of a mapping
    CNode **keys;      // mapping keys (scalars)
    CNode **items;     // sequence items or mapping values
};

// File names referenced by nodes; they must outlive every error report of the load.
typedef struct {
    int count;
    char **names;
} ConfigFiles;

const char *config_files_add(ConfigFiles *f, const char *name);
void config_files_free(ConfigFiles *f);

void cnode_free(CNode *node);
// The value stored under `key` in a mapping, or NULL.
CNode *cnode_get(const CNode *map, const char *key);
// Removes `key` (and its value) from a mapping, if present.
void cnode_remove(CNode *map, const char *key);
// A plain null scalar: empty, ~ or null.
int cnode_is_null(const CNode *node);

// User text made safe for a one-line message: control characters escaped, long text cut.
#define CNODE_SHOW_MAX 96
const char *cnode_show(const char *s, char buf[CNODE_SHOW_MAX]);

// Parses one YAML file (a mapping at the top, or empty) and follows its `base:` chain: the
// result is the base's tree with this file's keys merged over it.  Exits with file:line:col on
// any problem, base cycles and missing base files included.
CNode *config_tree_load(ConfigFiles *files, const char *path);

// Applies a "section.key=value" argument (value parsed as YAML) to the tree; errors are
// attributed to "<command line>:argN".
void config_tree_override(ConfigFiles *files, CNode *root, const char *arg, int index);

#endif
