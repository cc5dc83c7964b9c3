#include "trainer/train/finetune_scores.h"

#include <math.h>
#include <string.h>

int finetune_scores_from_json(const cJSON *root, TaskScores *out) {
    memset(out, 0, sizeof *out);
    const cJSON *metric = cJSON_GetObjectItemCaseSensitive(root, "metric");
    const cJSON *scores = cJSON_GetObjectItemCaseSensitive(root, "scores");
    if (!cJSON_IsString(metric) || !cJSON_IsObject(scores)) return -1;
    out->primary = -1;
    const int cap = (int)(sizeof out->value / sizeof out->value[0]);
    for (const cJSON *x = scores->child; x; x = x->next) {
        if (out->n == cap || !x->string || strlen(x->string) >= sizeof out->name[0]) return -1;
        if (cJSON_IsNumber(x)) out->value[out->n] = x->valuedouble;
        else if (cJSON_IsNull(x)) out->value[out->n] = NAN;
        else return -1;
        strcpy(out->name[out->n], x->string);
        if (strcmp(x->string, metric->valuestring) == 0) out->primary = out->n;
        out->n++;
    }
    return out->primary >= 0 ? 0 : -1;
}
