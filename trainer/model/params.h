// The parameter table: every model tensor as (name, shape, offset) into one fp32 buffer.
// It drives initialisation, the optimizer, all-reduce buckets, checkpoints, export and counts.
#ifndef MHE_TRAINER_PARAMS_H
#define MHE_TRAINER_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/config/config.h"

typedef enum {
    PARAM_WEIGHT,      // a projection matrix [out, in]: weight-decayed
    PARAM_BIAS,
    PARAM_NORM,        // LayerNorm gain or shift
    PARAM_EMBEDDING,   // token, position, type embeddings
    PARAM_HEAD_EMBED,  // MHE head embeddings, collab mixing vectors
} ParamKind;

#define PARAM_NAME_MAX 64
typedef struct {
    char name[PARAM_NAME_MAX];  // canonical name, e.g. "layers.3.attn.q.weight"
    int ndim;
    int shape[2];
    size_t offset;              // in floats, into the parameter buffer
    size_t numel;
    ParamKind kind;
    int layer;                  // transformer layer, -1 for embeddings and head
    int in_attention;           // belongs to an attention sublayer
    float init_center;          // PARAM_HEAD_EMBED: mean of its initial values
} ParamTensor;

typedef struct {
    int count;
    int cap;
    ParamTensor *tensors;
    size_t total;               // floats in the buffer
} ParamTable;

// With cfg->task.type != TASK_NONE the MLM/LM head tensors (head.*) are replaced by the task
// head's (task.pooler, task.classifier, task.qa; GPT keeps final_ln).
void param_table_build(ParamTable *t, const Config *cfg);
// Outputs per head row of the task head: num_labels, 1 (regression), 2 (span start/end); 0 none.
int param_task_outputs(const Config *cfg);
void param_table_free(ParamTable *t);
// NULL when absent.
const ParamTensor *param_table_find(const ParamTable *t, const char *name);
// Offset of a tensor that must exist (internal invariant: aborts otherwise).
size_t param_offset(const ParamTable *t, const char *name);

// Attention weight matrices and head embeddings, biases excluded: the MHE paper's count.
size_t param_attention_weights(const ParamTable *t);
// Weights of one attention sublayer (layer 0), biases excluded.
size_t param_attention_weights_per_layer(const ParamTable *t);

// A hash of the table's layout (every tensor's name, shape and offset, in order): flat data
// keyed by offset (the optimizer moments of a checkpoint) belongs to this layout only.
uint64_t param_layout_fingerprint(const ParamTable *t);

// Fills the buffer as DESIGN.md §3 says: N(0, init_std) weights and embeddings, zero biases,
// LayerNorm 1/0, GPT-2 residual projections scaled by 1/sqrt(2L), head embeddings N(0, σ).
void param_init(const ParamTable *t, const Config *cfg, float *params, uint64_t seed);

#endif
