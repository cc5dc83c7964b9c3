// The model the crash test's writer saves: a few MB so that kills land inside writes, with
// every value a function of the step so a surviving checkpoint can be checked exactly.
#ifndef MHE_TESTS_INFRA_CRASH_MODEL_H
#define MHE_TESTS_INFRA_CRASH_MODEL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/infra/infra_util.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train/optim.h"  // optim_state_init: the state the checkpoint holds

#define CRASH_MODEL_SCALE 4000  // ~750k parameters: 3 MB of weights, 6 MB of optimizer state

typedef struct {
    ParamTable t;
    float *params;
    OptimState opt;
    CheckpointState state;
} CrashModel;

static inline void crash_model_init(CrashModel *cm) {
    infra_table(&cm->t, CRASH_MODEL_SCALE);
    cm->params = mhe_malloc(cm->t.total * sizeof(float));
    optim_state_init(&cm->opt, &cm->t, 0, cm->t.total);
    memset(&cm->state, 0, sizeof cm->state);
    cm->state.config_yaml = (char *)"train:\n  steps: 1000\n";
    cm->state.world_size = 1;
    cm->state.loss_scale = 1.0;
}

static inline float crash_model_value(int64_t step, size_t i, int which) {
    return (float)step + (float)(i % 1000) * 1e-3f + (float)which * 0.25f;
}

static inline void crash_model_fill(CrashModel *cm, int64_t step) {
    for (size_t i = 0; i < cm->t.total; i++) {
        cm->params[i] = crash_model_value(step, i, 0);
        cm->opt.m[i] = crash_model_value(step, i, 1);
        cm->opt.v[i] = crash_model_value(step, i, 2);
    }
    cm->opt.step = step;
    cm->state.step = step;
    cm->state.consumed_samples = step * 8;
}

static inline void crash_model_free(CrashModel *cm) {
    free(cm->params);
    optim_state_free(&cm->opt);
    param_table_free(&cm->t);
}

#endif
