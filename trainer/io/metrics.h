// Run metrics: a JSON-lines file (one object per logging step, flushed per line) and the
// progress line printed on stderr.
#ifndef MHE_TRAINER_METRICS_H
#define MHE_TRAINER_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Pieces of JSON text that stay JSON whatever the values: a string with JSON's escapes (paths
// may hold quotes, backslashes or control characters; NULL writes ""), and a number printed
// with `fmt`, or null when it is not finite (JSON has no NaN or Infinity).
void json_put_string(FILE *f, const char *s);
void json_put_number(FILE *f, const char *fmt, double v);

typedef struct {
    const char *key;
    double value;        // written with 17 significant digits (exact round trip); NaN/inf as null
    const char *text;    // when non-NULL, written as a JSON string instead of `value`
} MetricValue;

typedef struct {
    FILE *f;
} MetricsLog;

// Opens (appending: a resumed run continues the same file) `path`.  0, or -1 with errno set.
int metrics_open(MetricsLog *m, const char *path);
// Writes {"step": step, key: value, ...} and a newline, then flushes.  0, or -1 on I/O error.
int metrics_write(MetricsLog *m, int64_t step, int n, const MetricValue *values);
void metrics_close(MetricsLog *m);

typedef struct {
    int64_t step;          // optimizer steps completed
    int64_t total_steps;
    int64_t start_step;    // step at which this process started (resume): the rate's origin
    double elapsed_s;      // wall time since start_step
    double loss, lr, grad_norm;
    double tokens_per_s;
    double mfu;            // fraction of the nominal peak rate; negative when unknown
    double ceiling_gflops; // the measured matmul ceiling, shown beside MFU; <= 0: not shown
} Progress;

// "step 120/1000 | loss 7.1234 | lr 1.00e-04 | gnorm 1.234 | 12345 tok/s | MFU 12.3% |
//  ceiling 150 GFLOP/s | elapsed 0:01:02 | ETA 0:08:11" (one line, no newline).  ETA extrapolates the rate since
// start_step; "--:--:--" before the first step.  Returns what snprintf returns.
int progress_format(char *buf, size_t n, const Progress *p);

// h:mm:ss (hours unbounded); "--:--:--" for negative or non-finite input.
void format_hms(char *buf, size_t n, double seconds);

#endif
