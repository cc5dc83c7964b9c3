// The configs/README.md key reference, printed from the field table (`mhetrain info
// --config-reference`); tests/config/test_shipped_configs.sh fails when the README differs.
#include <stdio.h>
#include <string.h>

#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

static const char *type_name(ConfigFieldType t) {
    switch (t) {
    case F_INT: return "int";
    case F_I64: return "int64";
    case F_U64: return "uint64";
    case F_FLOAT: return "float";
    case F_BOOL: return "bool";
    case F_ENUM: return "enum";
    case F_STRING: return "string";
    case F_PATHS: return "paths";
    }
    return "?";
}

static void put_default(FILE *out, const ConfigField *f) {
    if (f->def_doc) fputs(f->def_doc, out);
    else if (f->type == F_STRING) fprintf(out, "`\"%s\"`", f->def);
    else if (f->type == F_ENUM || f->type == F_BOOL || f->type == F_PATHS) fprintf(out, "`%s`", f->def);
    else fputs(f->def, out);
}

static void put_range(FILE *out, const ConfigField *f) {
    const ConfigRange *r = &f->range;
    if (f->range_doc) {
        fputs(f->range_doc, out);
    } else if (f->type == F_ENUM) {
        for (int i = 0; f->names[i]; i++) fprintf(out, "%s`%s`", i ? ", " : "", f->names[i]);
    } else if (!f->ranged) {
        fputs("—", out);
    } else if (f->type == F_FLOAT) {
        if (r->hi > 1e30) fprintf(out, "%s %g", r->lo_open ? ">" : "≥", r->lo);
        else fprintf(out, "%c%g, %g%c", r->lo_open ? '(' : '[', r->lo, r->hi, r->hi_open ? ')' : ']');
    } else if (r->hi >= 0x7fffffff) {
        fprintf(out, "≥ %lld", (long long)r->lo);
    } else {
        fprintf(out, "[%lld, %lld]", (long long)r->lo, (long long)r->hi);
    }
}

void config_write_reference(FILE *out) {
    for (int s = 0; CONFIG_SECTIONS[s].name; s++) {
        const char *section = CONFIG_SECTIONS[s].name;
        fprintf(out, "%s### %s\n\n| key | type | default | range | meaning |\n|---|---|---|---|---|\n",
                s ? "\n" : "", section);
        for (int i = 0, n = config_field_count(); i < n; i++) {
            const ConfigField *f = config_field(i);
            if (strcmp(f->section, section) != 0) continue;
            fprintf(out, "| `%s` | %s | ", f->key, type_name(f->type));
            put_default(out, f);
            fputs(" | ", out);
            put_range(out, f);
            fprintf(out, " | %s |\n", f->doc);
        }
        if (CONFIG_SECTIONS[s].note) fprintf(out, "\n%s\n", CONFIG_SECTIONS[s].note);
    }
}
