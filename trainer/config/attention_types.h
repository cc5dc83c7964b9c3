// The registry of attention types, at the config layer: the one list of variants (names and
// enum), and each variant's config-facing spec (its own keys, their checks and resolution).
// Dependency-free (config.h only) so the config can validate a variant without seeing the
// model; the model's registry (trainer/model/attention/registry.c) is generated from the same
// list, so a variant is named exactly once, here.
#ifndef MHE_TRAINER_CONFIG_ATTENTION_TYPES_H
#define MHE_TRAINER_CONFIG_ATTENTION_TYPES_H

#include <stddef.h>

// X(ENUM_SUFFIX, yaml_name): one line per variant, in enum order (append new ones at the end:
// the enum values appear in nothing persistent, but the order is the order of every listing).
#define MHE_ATTENTION_TYPES(X) \
    X(MHA, mha)                \
    X(SHA, sha)                \
    X(MHE_ADD, mhe_add)        \
    X(MHE_MUL, mhe_mul)        \
    X(MQA, mqa)                \
    X(GQA, gqa)                \
    X(EL_ATT, el_att)          \
    X(SKV, skv)                \
    X(COLLAB, collab)          \
    X(MLA, mla)

struct Config;

// A config key a variant reads (beyond model.*): "attention.<key>", a one-line doc, and the
// value the tests and `compare.sh` use when they exercise the variant on a tiny model (-1: keep
// the default).  The key's type, default and range live in the config's field table.
typedef struct {
    const char *key;
    const char *doc;
    int test_value;
} AttnTypeKey;

#define ATTN_TYPE_MAX_KEYS 4

typedef struct {
    const char *name;                       // YAML spelling, e.g. "mla"
    const char *doc;                        // one line for `mhetrain info --attention-types`
    AttnTypeKey keys[ATTN_TYPE_MAX_KEYS];   // its own keys ({0}-terminated)
    // Shape checks across keys, once the model section is resolved.  Returns 0 when fine, or
    // writes a message (no position; the caller adds it) and the offending keys ("a|b", the
    // first one the user wrote is pointed at) and returns 1.
    int (*check)(const struct Config *c, const char **keys, char *msg, size_t cap);
    // Fills the variant's derived defaults (e.g. collab_dim 0 -> n*d).  Runs for every variant
    // whatever attention.type is, so a resolved config is the same whichever type is chosen.
    void (*resolve)(struct Config *c);
} AttnTypeSpec;

#endif
