// The monotonic clock in seconds, for the durations commands print (prepare, tokenizer training,
// conversion, MPI waits): one definition instead of a copy in each.
#ifndef MHE_COMMON_CLOCK_H
#define MHE_COMMON_CLOCK_H

#include <time.h>

static inline double mhe_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// The calling thread's CPU time in seconds: what a one-thread benchmark measures on a busy machine
// (time spent descheduled is not counted).
static inline double mhe_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
