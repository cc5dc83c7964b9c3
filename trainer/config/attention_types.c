// Config-facing specs of the attention variants (see attention_types.h): the keys each one
// reads and the checks that tie them to the model section.  The math of each variant is in
// trainer/model/attention/<name>.c.
#include "trainer/config/attention_types.h"

#include <stdio.h>

#include "trainer/config/config.h"

static const AttnTypeSpec SPEC_MHA = {"mha", "multi-head attention, per-head Q, K, V", {{0}}, NULL, NULL};
static const AttnTypeSpec SPEC_SHA = {"sha", "one shared head (MHE without head embeddings)", {{0}}, NULL, NULL};

#define EMBED_KEYS                                                                             \
    {"attention.embed_std", "head embeddings ~ N(0, embed_std)", -1},                          \
    {"attention.fast_path", "use the shared-score / shared-K,V identities (DESIGN.md §1)", -1}
static const AttnTypeSpec SPEC_MHE_ADD = {"mhe_add", "shared Q, K, V plus additive head embeddings",
                                          {EMBED_KEYS}, NULL, NULL};
static const AttnTypeSpec SPEC_MHE_MUL = {"mhe_mul", "shared Q, K, V scaled by (1 + head embeddings)",
                                          {EMBED_KEYS}, NULL, NULL};
static const AttnTypeSpec SPEC_MQA = {"mqa", "per-head Q, one K/V head shared by all", {{0}}, NULL, NULL};

static int check_gqa(const Config *c, const char **keys, char *msg, size_t cap) {
    const int g = c->attention.groups, n = c->model.heads;
    if (g == 0) {
        *keys = "attention.type";
        snprintf(msg, cap, "attention.type gqa needs attention.groups (the number of K/V heads, "
                 "dividing model.heads = %d)", n);
        return 1;
    }
    if (g > n || n % g != 0) {
        *keys = "attention.groups|model.heads";
        snprintf(msg, cap, "attention.groups (%d) must divide model.heads (%d) for gqa", g, n);
        return 1;
    }
    return 0;
}
static const AttnTypeSpec SPEC_GQA = {"gqa", "per-head Q, g K/V heads each shared by n/g query heads",
                                      {{"attention.groups", "number of K/V heads (divides model.heads)", 2}},
                                      check_gqa, NULL};

static int check_el_att(const Config *c, const char **keys, char *msg, size_t cap) {
    const int D = c->model.hidden, n = c->model.heads, d = c->model.head_dim;
    if ((long long)n * d == D) return 0;
    *keys = "model.head_dim|model.heads|attention.type";
    snprintf(msg, cap, "el_att needs model.heads * model.head_dim = model.hidden (keys and values "
             "are slices of the input), got %d * %d = %lld != %d", n, d, (long long)n * d, D);
    return 1;
}
static const AttnTypeSpec SPEC_EL_ATT = {"el_att", "per-head Q, keys = values = slices of the input",
                                         {{0}}, check_el_att, NULL};
static const AttnTypeSpec SPEC_SKV = {"skv", "per-head Q, one projection serves as key and value",
                                      {{0}}, NULL, NULL};

static void resolve_collab(Config *c) {
    if (c->attention.collab_dim == 0) c->attention.collab_dim = c->model.heads * c->model.head_dim;
}
static const AttnTypeSpec SPEC_COLLAB = {
    "collab", "collaborative heads: shared W_Q, W_K, per-head mixing vectors, content bias",
    {{"attention.collab_dim", "shared query/key width D~ (0: n*d)", -1},
     {"attention.embed_std", "mixing vectors ~ 1 + N(0, embed_std)", -1}},
    NULL, resolve_collab};

// d_c = 4·d by default: DeepSeek-V2's choice (d_c = 4 d_h), 256 for BERT-base's d = 64.
static void resolve_mla(Config *c) {
    if (c->attention.latent_dim == 0) c->attention.latent_dim = 4 * c->model.head_dim;
}
static const AttnTypeSpec SPEC_MLA = {
    "mla", "multi-head latent attention: K, V of every head from one shared latent c = X W_DKV",
    {{"attention.latent_dim", "d_c, width of the shared key/value latent (0: 4*d)", 5},
     {"attention.q_latent_dim", "width of the query latent (0: queries straight from X)", 3}},
    NULL, resolve_mla};

#define MHE_SPEC_(E, name) [ATTN_##E] = &SPEC_##E,
static const AttnTypeSpec *const SPECS[ATTN_TYPE_COUNT] = {MHE_ATTENTION_TYPES(MHE_SPEC_)};
#undef MHE_SPEC_

const AttnTypeSpec *attention_type_spec(AttentionType t) {
    return (unsigned)t < ATTN_TYPE_COUNT ? SPECS[t] : NULL;
}
