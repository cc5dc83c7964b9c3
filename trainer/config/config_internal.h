// Shared by the config_*.c files only: enum spellings, key positions, validation.
#ifndef MHE_TRAINER_CONFIG_INTERNAL_H
#define MHE_TRAINER_CONFIG_INTERNAL_H

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
extern const char *const CONFIG_BACKEND_NAMES[];
extern const char *const CONFIG_DEVICE_NAMES[];
extern const char *const CONFIG_PRECISION_NAMES[];
extern const char *const CONFIG_TOKENIZER_NAMES[];

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

#endif
