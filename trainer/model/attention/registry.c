// The model-side registry: one AttnVariant per line of MHE_ATTENTION_TYPES
// (trainer/config/attention_types.h), generated, so no list of variants is written here.
#include <string.h>

#include "common/error.h"
#include "trainer/model/attention/variant.h"

#define MHE_DECLARE_(E, name) extern const AttnVariant attn_##name;
MHE_ATTENTION_TYPES(MHE_DECLARE_)
#undef MHE_DECLARE_

#define MHE_ENTRY_(E, name) [ATTN_##E] = &attn_##name,
static const AttnVariant *const VARIANTS[ATTN_TYPE_COUNT] = {MHE_ATTENTION_TYPES(MHE_ENTRY_)};
#undef MHE_ENTRY_

const AttnVariant *attn_variant(AttentionType t) {
    if ((unsigned)t >= ATTN_TYPE_COUNT) mhe_fatal("internal error: attention type %d out of range", (int)t);
    const AttnVariant *v = VARIANTS[t];
    // The config's spec and the model's variant are two halves of one registry line.
    if (strcmp(v->name, attention_type_name(t)) != 0)
        mhe_fatal("internal error: attention variant %s registered as %s", v->name, attention_type_name(t));
    return v;
}
