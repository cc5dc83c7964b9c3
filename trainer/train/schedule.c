#include "trainer/train/schedule.h"

#include <math.h>

double schedule_lr(const OptimConfig *o, int64_t step, int64_t total_steps) {
    const double lr = o->lr, floor_lr = o->min_lr;
    const int64_t warm = o->warmup_steps > 0 ? o->warmup_steps : 0;
    if (step < 0) step = 0;
    if (step < warm) return lr * (double)(step + 1) / (double)warm;
    if (o->schedule == SCHED_CONSTANT) return lr;
    if (step >= total_steps) return floor_lr;
    const double p = (double)(step - warm) / (double)(total_steps - warm);
    if (o->schedule == SCHED_COSINE) return floor_lr + (lr - floor_lr) * 0.5 * (1.0 + cos(M_PI * p));
    return floor_lr + (lr - floor_lr) * (1.0 - p);
}
