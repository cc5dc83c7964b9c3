// The run's JSON-lines metrics file, the progress line, and the JSON text pieces they share (metrics.h).
#include "trainer/io/metrics.h"

#include <math.h>
#include <string.h>

int metrics_open(MetricsLog *m, const char *path) {
    m->f = fopen(path, "a");
    return m->f ? 0 : -1;
}

void json_put_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

void json_put_number(FILE *f, const char *fmt, double v) {
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

int metrics_write(MetricsLog *m, int64_t step, int n, const MetricValue *values) {
    fprintf(m->f, "{\"step\": %lld", (long long)step);
    for (int i = 0; i < n; i++) {
        fputs(", ", m->f);
        json_put_string(m->f, values[i].key);
        fputs(": ", m->f);
        if (values[i].text) json_put_string(m->f, values[i].text);
        else json_put_number(m->f, "%.17g", values[i].value);
    }
    fputs("}\n", m->f);
    return fflush(m->f) == 0 && !ferror(m->f) ? 0 : -1;
}

void metrics_close(MetricsLog *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}

void format_hms(char *buf, size_t n, double seconds) {
    if (!isfinite(seconds) || seconds < 0) {
        snprintf(buf, n, "--:--:--");
        return;
    }
    long long s = llround(seconds);
    snprintf(buf, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
}

int progress_format(char *buf, size_t n, const Progress *p) {
    char elapsed[32], eta[32], mfu[64];
    format_hms(elapsed, sizeof elapsed, p->elapsed_s);
    const int64_t done = p->step - p->start_step;
    double left = -1;
    if (done > 0 && p->elapsed_s > 0) left = p->elapsed_s / (double)done * (double)(p->total_steps - p->step);
    if (p->step >= p->total_steps) left = 0;
    format_hms(eta, sizeof eta, left);
    if (p->mfu >= 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * p->mfu);
    else snprintf(mfu, sizeof mfu, "n/a");
    if (p->ceiling_gflops > 0) {
        const size_t at = strlen(mfu);
        snprintf(mfu + at, sizeof mfu - at, " | ceiling %.0f GFLOP/s", p->ceiling_gflops);
    }
    // fabs: a NaN with its sign bit set prints as "-nan", which reads like a negative number.
    return snprintf(buf, n, "step %lld/%lld | loss %.4f | lr %.2e | gnorm %.3f | %.0f tok/s | MFU %s | elapsed %s | ETA %s",
                    (long long)p->step, (long long)p->total_steps, isnan(p->loss) ? fabs(p->loss) : p->loss, p->lr,
                    isnan(p->grad_norm) ? fabs(p->grad_norm) : p->grad_norm, p->tokens_per_s, mfu,
                    elapsed, eta);
}
