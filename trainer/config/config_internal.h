// Shared by the config_*.c files only: enum spellings, key positions, validation.
#ifndef MHE_TRAINER_CONFIG_INTERNAL_H
#define MHE_TRAINER_CONFIG_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "trainer/config/config.h"

// Lowercase YAML spellings of every enum, indexed by enum value, NULL-terminated.
extern const char *const CONFIG_ARCH_NAMES[];
extern const char *const CONFIG_NORM_NAMES[];
extern const char *const CONFIG_ACTIVATION_NAMES[];
extern const char *const CONFIG_ATTENTION_NAMES[];
extern const char *const CONFIG_OBJECTIVE_NAMES[];
extern const char *const CONFIG_OPTIMIZER_NAMES[];
extern const char *const CONFIG_SCHEDULE_NAMES[];
extern const char *const CONFIG_NONFINITE_NAMES[];
extern const char *const CONFIG_RECOMPUTE_NAMES[];
extern const char *const CONFIG_BACKEND_NAMES[];
extern const char *const CONFIG_DEVICE_NAMES[];
extern const char *const CONFIG_PRECISION_NAMES[];
extern const char *const CONFIG_TOKENIZER_NAMES[];
extern const char *const CONFIG_TASK_TYPE_NAMES[];

// Where each key came from ("model.hidden" -> file:line:col), so that validation can point
// at the value a user wrote.  Keys absent from the map were left at their defaults.
typedef struct {
    char key[48];
    const char *file;
    int line, col;
} ConfigMark;

typedef struct {
    int count, cap;
    ConfigMark *marks;
    const char *fallback_file;  // used when none of an error's keys was written by the user
    int fallback_line, fallback_col;
} ConfigMarks;

void config_marks_set(ConfigMarks *m, const char *key, const char *file, int line, int col);
const ConfigMark *config_marks_find(const ConfigMarks *m, const char *key);
void config_marks_free(ConfigMarks *m);

// Resolves arch-dependent and derived defaults, then checks ranges and shape consistency.
// Errors point at the first of the offending keys that `marks` knows.
void config_check(Config *cfg, const ConfigMarks *marks);

// One row per config key: everything parsing (config_load.c), defaults and range checks
// (config_fields.c), --dry-run writing (config_write.c) and the configs/README.md reference
// (config_doc.c) need to know about it.  The table is in config_fields.c.
typedef enum { F_INT, F_I64, F_U64, F_FLOAT, F_BOOL, F_ENUM, F_STRING, F_PATHS } ConfigFieldType;

// lo/hi with open or closed ends; an integer range with hi >= 2^31 is unbounded above, a
// float range with hi > 1e30 reads "> lo" / ">= lo" in messages and docs.
typedef struct {
    double lo, hi;
    bool lo_open, hi_open;
} ConfigRange;

typedef struct {
    const char *section;
    const char *key;
    ConfigFieldType type;
    size_t offset;              // in Config
    const char *const *names;   // F_ENUM spellings
    unsigned set_bit;           // CONFIG_SET_* recorded when the key is given
    size_t count_offset;        // F_PATHS: where the number of paths goes
    const char *def;            // the default, as YAML text (parsed by config_defaults)
    const char *def_doc;        // the README's default when it is not `def` (per arch, derived)
    bool ranged;                // `range` is checked by config_check_ranges
    ConfigRange range;
    const char *range_doc;      // the README's range when the check is written by hand
    const char *doc;            // one line for the README
} ConfigField;

typedef struct {
    const char *name;
    const char *note;           // README text after the section's table, or NULL
} ConfigSection;

// Sections in the order of --dry-run output and of the README, NULL-terminated.
extern const ConfigSection CONFIG_SECTIONS[];

// All fields, grouped by section in CONFIG_SECTIONS order.
int config_field_count(void);
const ConfigField *config_field(int i);
const ConfigField *config_field_find(const char *section, const char *key);

// Range checks of the section's fields that have one, in table order; errors point at the
// value the user wrote ("must be in [lo, hi], got v" / "must be >= lo, got v").
void config_check_ranges(const Config *cfg, const ConfigMarks *marks, const char *section);

// Fails at the first key of the '|'-separated list that the user wrote, else at the fallback.
_Noreturn void config_fail_key(const ConfigMarks *m, const char *keys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
