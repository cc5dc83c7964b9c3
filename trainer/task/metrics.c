// Classification and regression metrics (metrics.h): the definitions of GLUE's reference
// implementation (scikit-learn / SciPy through transformers' glue_compute_metrics).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/metrics.h"

double metric_accuracy(const int *pred, const int *gold, long n) {
    long hit = 0;
    for (long i = 0; i < n; i++) hit += pred[i] == gold[i];
    return n ? (double)hit / (double)n : 0.0;
}

double metric_f1_binary(const int *pred, const int *gold, long n) {
    long tp = 0, fp = 0, fn = 0;
    for (long i = 0; i < n; i++) {
        tp += pred[i] == 1 && gold[i] == 1;
        fp += pred[i] == 1 && gold[i] != 1;
        fn += pred[i] != 1 && gold[i] == 1;
    }
    return tp ? 2.0 * (double)tp / (double)(2 * tp + fp + fn) : 0.0;
}

// Confusion counts: conf[g * k + p].
static long *confusion(const int *pred, const int *gold, long n, int k) {
    long *c = mhe_calloc((size_t)k * (size_t)k, sizeof *c);
    for (long i = 0; i < n; i++)
        if (pred[i] >= 0 && pred[i] < k && gold[i] >= 0 && gold[i] < k) c[gold[i] * k + pred[i]]++;
    return c;
}

double metric_f1_macro(const int *pred, const int *gold, long n, int k) {
    long *c = confusion(pred, gold, n, k);
    double sum = 0;
    int present = 0;
    for (int j = 0; j < k; j++) {
        long tp = c[j * k + j], fp = 0, fn = 0;
        for (int i = 0; i < k; i++)
            if (i != j) fp += c[i * k + j], fn += c[j * k + i];
        if (tp + fp + fn == 0) continue;  // neither gold nor predicted: not in sklearn's labels
        present++;
        sum += 2.0 * (double)tp / (double)(2 * tp + fp + fn);
    }
    free(c);
    return present ? sum / present : 0.0;
}

double metric_mcc(const int *pred, const int *gold, long n, int k) {
    long *c = confusion(pred, gold, n, k);
    double s = 0, correct = 0, tp_sum = 0, pp = 0, tt = 0;
    for (int j = 0; j < k; j++) {
        double t = 0, p = 0;  // gold count, predicted count of class j
        for (int i = 0; i < k; i++) t += (double)c[j * k + i], p += (double)c[i * k + j];
        correct += (double)c[j * k + j];
        tp_sum += t * p;
        pp += p * p;
        tt += t * t;
        s += t;
    }
    free(c);
    const double cov_ytyp = correct * s - tp_sum;
    const double cov_ypyp = s * s - pp, cov_ytyt = s * s - tt;
    if (cov_ypyp * cov_ytyt == 0) return 0.0;
    return cov_ytyp / sqrt(cov_ytyt * cov_ypyp);
}

double metric_pearson(const double *x, const double *y, long n) {
    if (n < 2) return 0.0;
    double mx = 0, my = 0;
    for (long i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= (double)n;
    my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (long i = 0; i < n; i++) {
        const double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if (sxx == 0 || syy == 0) return 0.0;
    const double r = sxy / sqrt(sxx * syy);
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

static const double *sort_keys;
static int by_key(const void *a, const void *b) {
    const double x = sort_keys[*(const long *)a], y = sort_keys[*(const long *)b];
    if (x != y) return x < y ? -1 : 1;
    return *(const long *)a < *(const long *)b ? -1 : 1;
}

// Ranks 1..n, tied values sharing the mean of their positions (scipy.stats.rankdata "average").
static double *ranks(const double *v, long n) {
    long *order = mhe_malloc((size_t)n * sizeof *order);
    for (long i = 0; i < n; i++) order[i] = i;
    sort_keys = v;
    qsort(order, (size_t)n, sizeof *order, by_key);
    double *r = mhe_malloc((size_t)n * sizeof *r);
    for (long i = 0; i < n;) {
        long j = i;
        while (j + 1 < n && v[order[j + 1]] == v[order[i]]) j++;
        const double avg = 0.5 * (double)(i + j) + 1.0;
        for (long t = i; t <= j; t++) r[order[t]] = avg;
        i = j + 1;
    }
    free(order);
    return r;
}

double metric_spearman(const double *x, const double *y, long n) {
    if (n < 2) return 0.0;
    double *rx = ranks(x, n), *ry = ranks(y, n);
    const double r = metric_pearson(rx, ry, n);
    free(rx);
    free(ry);
    return r;
}

double metric_mse(const double *x, const double *y, long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s += (x[i] - y[i]) * (x[i] - y[i]);
    return n ? s / (double)n : 0.0;
}
