// Learning-rate schedules at chosen steps against the formulas written out independently here.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <math.h>

#include "trainer/train/schedule.h"

static OptimConfig make(ScheduleKind k, int warmup) {
    OptimConfig o = {0};
    o.lr = 1e-3f;
    o.min_lr = 1e-5f;
    o.warmup_steps = warmup;
    o.schedule = k;
    return o;
}

// |got - want| <= 1e-12 * lr: the two sides evaluate the same expression in double.
static void near(double got, double want) {
    if (fabs(got - want) > 1e-15) fail_msg("lr %.17g, expected %.17g", got, want);
}

static void test_warmup_is_linear_from_lr_over_w(void **state) {
    (void)state;
    const double lr = (double)1e-3f;
    for (int k = 0; k < 3; k++) {
        OptimConfig o = make((ScheduleKind)k, 10);
        near(schedule_lr(&o, 0, 100), lr / 10);
        near(schedule_lr(&o, 4, 100), lr * 5 / 10);
        near(schedule_lr(&o, 9, 100), lr);
    }
}

static void test_linear_decays_to_floor(void **state) {
    (void)state;
    const double lr = (double)1e-3f, lo = (double)1e-5f;
    OptimConfig o = make(SCHED_LINEAR, 10);
    near(schedule_lr(&o, 10, 110), lr);                       // first decay step: full lr
    near(schedule_lr(&o, 35, 110), lo + (lr - lo) * 0.75);    // a quarter of the way
    near(schedule_lr(&o, 60, 110), (lr + lo) / 2);            // half way
    near(schedule_lr(&o, 109, 110), lo + (lr - lo) * 0.01);   // last step
    near(schedule_lr(&o, 110, 110), lo);
    near(schedule_lr(&o, 5000, 110), lo);
}

static void test_cosine_decays_to_floor(void **state) {
    (void)state;
    const double lr = (double)1e-3f, lo = (double)1e-5f, pi = 3.14159265358979323846;
    OptimConfig o = make(SCHED_COSINE, 4);
    near(schedule_lr(&o, 4, 104), lr);
    near(schedule_lr(&o, 54, 104), (lr + lo) / 2);            // cos(pi/2) = 0
    near(schedule_lr(&o, 29, 104), lo + (lr - lo) * (0.5 + 0.5 * sqrt(0.5)));  // p = 1/4
    near(schedule_lr(&o, 79, 104), lo + (lr - lo) * (0.5 - 0.5 * sqrt(0.5)));  // p = 3/4
    near(schedule_lr(&o, 103, 104), lo + (lr - lo) * 0.5 * (1 + cos(pi * 99 / 100)));
    near(schedule_lr(&o, 104, 104), lo);
}

static void test_constant_holds_lr_after_warmup(void **state) {
    (void)state;
    OptimConfig o = make(SCHED_CONSTANT, 3);
    near(schedule_lr(&o, 3, 50), (double)1e-3f);
    near(schedule_lr(&o, 49, 50), (double)1e-3f);
    near(schedule_lr(&o, 80, 50), (double)1e-3f);
}

static void test_no_warmup_starts_at_lr(void **state) {
    (void)state;
    OptimConfig o = make(SCHED_LINEAR, 0);
    near(schedule_lr(&o, 0, 10), (double)1e-3f);
    near(schedule_lr(&o, 5, 10), ((double)1e-3f + (double)1e-5f) / 2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_warmup_is_linear_from_lr_over_w),
        cmocka_unit_test(test_linear_decays_to_floor),
        cmocka_unit_test(test_cosine_decays_to_floor),
        cmocka_unit_test(test_constant_holds_lr_after_warmup),
        cmocka_unit_test(test_no_warmup_starts_at_lr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
