// One batch of a fine-tuning task (issue 14), as the task readers (trainer/task/) fill it and the
// task heads (task_head.c, model_forward_task) consume it.  Host arrays, row-major [B, T] or [B].
#ifndef MHE_TRAINER_TASK_BATCH_H
#define MHE_TRAINER_TASK_BATCH_H

#include <stdint.h>

typedef struct {
    int B, T;
    const int32_t *ids, *type_ids, *attn_mask;  // [B*T], host; type_ids NULL for gpt
    const int32_t *label;    // [B] class index (classification), else NULL
    const float *target;     // [B] regression target, else NULL
    const int32_t *start, *end;  // [B] span answer token positions in the row; both 0 = no answer
    const int32_t *last;     // [B] position of the last real token (gpt classification/regression)
} TaskBatch;

#endif
