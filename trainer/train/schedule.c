#include "trainer/train/schedule.h"

#include <math.h>
#include <stdio.h>

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

void schedule_resume_notice(const OptimConfig *o, const char *change, int64_t step, int64_t old_total,
                            int64_t new_total) {
    const double was = schedule_lr(o, step, old_total), now = schedule_lr(o, step, new_total);
    if (old_total <= 0 || was == now) {
        fprintf(stderr,
                "mhetrain: resuming with another run length (%s): the learning rate of update %lld stays %.3e "
                "(the schedule gives the same value over either length)\n",
                change, (long long)step + 1, now);
        return;
    }
    fprintf(stderr,
            "mhetrain: resuming with another run length (%s): the learning-rate schedule is recomputed over %lld "
            "steps instead of %lld, so it jumps at the resume: update %lld gets lr %.3e instead of %.3e, and the "
            "decay reaches optim.min_lr at step %lld\n",
            change, (long long)new_total, (long long)old_total, (long long)step + 1, now, was, (long long)new_total);
}

int schedule_warmup_warning(const OptimConfig *o, int64_t total_steps, const char *source) {
    if (o->warmup_steps <= total_steps) return 0;
    fprintf(stderr,
            "mhetrain: warning: %s: optim.warmup_steps %d is more than the run's %lld steps: the learning rate "
            "never reaches optim.lr %g (the last step gets %.3e); lower optim.warmup_steps or train more steps\n",
            source, o->warmup_steps, (long long)total_steps, o->lr, schedule_lr(o, total_steps - 1, total_steps));
    return 1;
}
