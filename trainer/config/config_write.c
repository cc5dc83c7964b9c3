// config_write_yaml: the resolved config as YAML that config_load reads back unchanged;
// config_yaml_text: the same text in memory (checkpoints, rank agreement, import, convert).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

// The shortest decimal that reads back to the same float, so the round trip is exact.
static void put_float(FILE *out, const char *key, float v) {
    char buf[64];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    // A bare integer would still load as a float; the dot only helps human readers.
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    fprintf(out, "  %s: %s\n", key, buf);
}

static void put_string_value(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", out);
        else if (*p == '\t') fputs("\\t", out);
        else if (*p < 0x20) fprintf(out, "\\x%02x", *p);
        else fputc(*p, out);
    }
    fputc('"', out);
}

static void put_string(FILE *out, const char *key, const char *s) {
    fprintf(out, "  %s: ", key);
    put_string_value(out, s ? s : "");
    fputc('\n', out);
}

static void put_list(FILE *out, const char *key, int n, char *const *items) {
    fprintf(out, "  %s: [", key);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        put_string_value(out, items[i]);
    }
    fputs("]\n", out);
}

// Every field of the table, section by section, in table order.
void config_write_yaml(const Config *c, FILE *out) {
    fprintf(out, "# mhetrain resolved config%s%s\n", c->source ? " of " : "",
            c->source ? c->source : "");
    const char *section = "";
    for (int i = 0, n = config_field_count(); i < n; i++) {
        const ConfigField *f = config_field(i);
        if (strcmp(f->section, section) != 0) fprintf(out, "%s:\n", section = f->section);
        const char *p = (const char *)c + f->offset;
        switch (f->type) {
        case F_INT: fprintf(out, "  %s: %d\n", f->key, *(const int *)p); break;
        case F_I64: fprintf(out, "  %s: %lld\n", f->key, (long long)*(const int64_t *)p); break;
        case F_U64:
            fprintf(out, "  %s: %llu\n", f->key, (unsigned long long)*(const uint64_t *)p);
            break;
        case F_FLOAT: put_float(out, f->key, *(const float *)p); break;
        case F_BOOL: fprintf(out, "  %s: %s\n", f->key, *(const bool *)p ? "true" : "false"); break;
        case F_ENUM: fprintf(out, "  %s: %s\n", f->key, f->names[*(const int *)p]); break;
        case F_STRING: put_string(out, f->key, *(char *const *)p); break;
        case F_PATHS:
            put_list(out, f->key, *(const int *)((const char *)c + f->count_offset), (char *const *)p);
            break;
        }
    }
}

char *config_yaml_text(const Config *cfg) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) mhe_fatal("cannot build the config text: %s", strerror(errno));
    config_write_yaml(cfg, f);
    fclose(f);
    return text;
}
