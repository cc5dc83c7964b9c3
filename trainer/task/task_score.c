// task_score / task_score_trivial: the format's metrics from model outputs (or from the trivial
// predictor), primary metric = task.metric.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/task/metrics.h"
#include "trainer/task/task_internal.h"

static void put(TaskScores *s, const char *name, double v) {
    if (s->n >= 8) mhe_fatal("internal: more than 8 task metrics");
    snprintf(s->name[s->n], sizeof s->name[s->n], "%s", name);
    s->value[s->n++] = v;
}

static void set_primary(const TaskData *d, TaskScores *s) {
    s->primary = 0;
    for (int i = 0; i < s->n; i++)
        if (d->task.metric && !strcmp(s->name[i], d->task.metric)) s->primary = i;
}

static void classification_scores(const TaskData *d, const int *pred, TaskScores *s) {
    const long n = d->ex.n;
    const int k = d->num_labels;
    int *gold = mhe_malloc((size_t)(n ? n : 1) * sizeof *gold);
    for (long i = 0; i < n; i++) gold[i] = d->ex.text[i].label;
    const double acc = metric_accuracy(pred, gold, n), f1m = metric_f1_macro(pred, gold, n, k);
    const double mcc = metric_mcc(pred, gold, n, k);
    // The order of task_metric_names.
    put(s, "accuracy", acc);
    if (k == 2) {
        const double f1 = metric_f1_binary(pred, gold, n);
        put(s, "f1", f1);
        put(s, "mcc", mcc);
        put(s, "acc_and_f1", 0.5 * (acc + f1));
        put(s, "f1_macro", f1m);
    } else {
        put(s, "f1_macro", f1m);
        put(s, "mcc", mcc);
    }
    put(s, "acc_and_f1_macro", 0.5 * (acc + f1m));
    free(gold);
}

static void regression_scores(const TaskData *d, const double *pred, TaskScores *s) {
    const long n = d->ex.n;
    double *gold = mhe_malloc((size_t)(n ? n : 1) * sizeof *gold);
    for (long i = 0; i < n; i++) gold[i] = d->ex.text[i].target;
    const double p = metric_pearson(pred, gold, n), r = metric_spearman(pred, gold, n);
    put(s, "pearson", p);
    put(s, "spearman", r);
    put(s, "corr", 0.5 * (p + r));
    put(s, "mse", metric_mse(pred, gold, n));
    free(gold);
}

// Exact match and F1 of one prediction against example e's gold answers; gold answers whose
// normalised text is empty are dropped and no gold answer means [""] (official).  Returns
// whether the question has an answer.
static int raw_scores(const SquadExample *e, const char *pred, double *em, double *f1) {
    char norm[64];
    double best_em = 0, best_f1 = 0;
    int golds = 0;
    for (int k = 0; k < e->n_answers && !e->impossible; k++) {
        squad_normalize(e->answers[k].text, norm, sizeof norm);
        if (!norm[0]) continue;
        golds++;
        const double x = squad_exact(e->answers[k].text, pred), y = squad_f1(e->answers[k].text, pred);
        if (x > best_em) best_em = x;
        if (y > best_f1) best_f1 = y;
    }
    if (!golds) best_em = best_f1 = squad_exact("", pred);
    *em = best_em;
    *f1 = best_f1;
    return golds > 0;
}

// A question in the official v2.0 script's best-threshold sweep: null - best span (its
// na_prob) and what answering it with its best non-null span changes in each score: its EM / F1
// when it has an answer, -1 when it has none and the span is not empty.
typedef struct {
    double diff;
    long i;
    double gain[2];  // EM, F1
} ByDiff;
static int by_diff(const void *a, const void *b) {
    const ByDiff *x = a, *y = b;
    if (x->diff != y->diff) return x->diff < y->diff ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;  // ties in question order, as Python's stable sort
}

// find_best_thresh: start from "no answer" everywhere (n_no right), answer the questions in
// increasing null - best order and keep the best running score; the threshold is the last
// answered question's difference (BERT's protocol: tau chosen on dev).
static double best_thresh(const ByDiff *order, long n, long n_no, int which, double *thresh) {
    double cur = (double)n_no, best = cur;
    *thresh = 0;
    for (long k = 0; k < n; k++) {
        cur += order[k].gain[which];
        if (cur > best) {
            best = cur;
            *thresh = order[k].diff;
        }
    }
    return n ? 100.0 * best / (double)n : 0;
}

// EM and F1 (in %, as the official script prints them) of one prediction per question.  With
// detail (squad2, model outputs): also best_exact / best_f1 and the F1's threshold.
static void span_scores(const TaskData *d, char **pred, const SquadPrediction *detail, TaskScores *s) {
    const long n = d->ex.n;
    double em = 0, f1 = 0, has_em = 0, has_f1 = 0, no_em = 0;
    long n_has = 0, n_no = 0;
    for (long i = 0; i < n; i++) {
        double x, y;
        const int has = raw_scores(&d->ex.squad[i], pred[i], &x, &y);
        em += x;
        f1 += y;
        if (has) n_has++, has_em += x, has_f1 += y;
        else n_no++, no_em += x;
    }
    put(s, "squad_em", n ? 100.0 * em / (double)n : 0);
    put(s, "squad_f1", n ? 100.0 * f1 / (double)n : 0);
    if (strcmp(d->fmt->name, "squad2")) return;
    put(s, "has_ans_em", n_has ? 100.0 * has_em / (double)n_has : 0);
    put(s, "has_ans_f1", n_has ? 100.0 * has_f1 / (double)n_has : 0);
    put(s, "no_ans_acc", n_no ? 100.0 * no_em / (double)n_no : 0);
    double t_em = 0, t_f1 = 0;
    if (!detail) {  // the trivial predictor: every answer "", nothing to sweep
        put(s, "best_exact", n ? 100.0 * no_em / (double)n : 0);
        put(s, "best_f1", n ? 100.0 * no_em / (double)n : 0);
        put(s, "best_f1_thresh", 0);
        return;
    }
    ByDiff *order = mhe_malloc((size_t)(n ? n : 1) * sizeof *order);
    for (long i = 0; i < n; i++) {
        double x, y;
        order[i] = (ByDiff){detail[i].null_diff, i, {0, 0}};
        if (raw_scores(&d->ex.squad[i], detail[i].nonnull, &x, &y))
            order[i].gain[0] = x, order[i].gain[1] = y;
        else
            order[i].gain[0] = order[i].gain[1] = detail[i].nonnull[0] ? -1 : 0;
    }
    qsort(order, (size_t)n, sizeof *order, by_diff);
    put(s, "best_exact", best_thresh(order, n, n_no, 0, &t_em));
    put(s, "best_f1", best_thresh(order, n, n_no, 1, &t_f1));
    put(s, "best_f1_thresh", t_f1);
    free(order);
}

void task_score(const TaskData *d, const float *outputs, TaskScores *out) {
    memset(out, 0, sizeof *out);
    const long n = d->ex.n;
    const TaskType type = d->task.type;
    if (type == TASK_CLASSIFICATION) {
        int *pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        const int k = d->num_labels;
        for (long i = 0; i < n; i++) {  // one feature per example; argmax, the first on ties
            const float *o = outputs + (size_t)i * k;
            int best = 0;
            for (int j = 1; j < k; j++)
                if (o[j] > o[best]) best = j;
            pred[i] = best;
        }
        classification_scores(d, pred, out);
        free(pred);
    } else if (type == TASK_REGRESSION) {
        double *pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        for (long i = 0; i < n; i++) pred[i] = outputs[i];
        regression_scores(d, pred, out);
        free(pred);
    } else {
        long *first = mhe_calloc((size_t)(n ? n : 1), sizeof *first), *count = mhe_calloc((size_t)(n ? n : 1), sizeof *count);
        for (long f = d->n_features - 1; f >= 0; f--) {
            first[d->features[f].example] = f;
            count[d->features[f].example]++;
        }
        char **pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        SquadPrediction *detail = mhe_malloc((size_t)(n ? n : 1) * sizeof *detail);
        for (long i = 0; i < n; i++) pred[i] = task_squad_predict(d, i, outputs, first, count, &detail[i]);
        span_scores(d, pred, detail, out);
        for (long i = 0; i < n; i++) free(pred[i]), free(detail[i].nonnull);
        free(pred);
        free(detail);
        free(first);
        free(count);
    }
    set_primary(d, out);
}

void task_score_trivial(const TaskData *dev, const TaskData *train, TaskScores *out) {
    memset(out, 0, sizeof *out);
    const long n = dev->ex.n;
    const TaskType type = dev->task.type;
    if (type == TASK_CLASSIFICATION) {
        int major = 0;  // the most frequent training label, the smallest index on ties
        for (int j = 1; j < train->num_labels; j++)
            if (train->label_counts[j] > train->label_counts[major]) major = j;
        int *pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        for (long i = 0; i < n; i++) pred[i] = major;
        classification_scores(dev, pred, out);
        free(pred);
    } else if (type == TASK_REGRESSION) {
        const double mean = train->ex.n ? train->target_sum / (double)train->ex.n : 0;
        double *pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        for (long i = 0; i < n; i++) pred[i] = mean;
        regression_scores(dev, pred, out);
        free(pred);
    } else {
        char **pred = mhe_malloc((size_t)(n ? n : 1) * sizeof *pred);
        for (long i = 0; i < n; i++) pred[i] = "";
        span_scores(dev, pred, NULL, out);
        free(pred);
    }
    set_primary(dev, out);
}
