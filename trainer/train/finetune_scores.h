// best.json's scores read back (finetune.c writes them): a resumed fine-tuning run reports the
// best evaluation's metric and scores, not an empty record.
#ifndef MHE_TRAINER_FINETUNE_SCORES_H
#define MHE_TRAINER_FINETUNE_SCORES_H

#include <cjson/cJSON.h>

#include "trainer/task/task.h"

// Fills `out` from root's "metric" (a string) and "scores" (an object of numbers or null, in
// file order; null reads as NaN).  Returns 0, or -1 when either is missing or malformed.
int finetune_scores_from_json(const cJSON *root, TaskScores *out);

#endif
