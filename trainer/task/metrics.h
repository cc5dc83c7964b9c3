// The benchmarks' metrics (trainer/task/README.md), as pure functions of predictions and gold
// values, so tests compare them with scikit-learn, SciPy and the official SQuAD script.
#ifndef MHE_TRAINER_TASK_METRICS_H
#define MHE_TRAINER_TASK_METRICS_H

#include <stddef.h>

// Classification over labels 0..k-1.
double metric_accuracy(const int *pred, const int *gold, long n);
// Binary F1 of class 1 (sklearn f1_score, average="binary"); 0 when class 1 is never predicted
// nor gold (sklearn's zero_division default).
double metric_f1_binary(const int *pred, const int *gold, long n);
// Unweighted mean of the per-class F1 over the classes present in gold or predictions (sklearn
// f1_score, average="macro"): SuperGLUE's CB F1.
double metric_f1_macro(const int *pred, const int *gold, long n, int k);
// Matthews correlation (sklearn matthews_corrcoef, its multiclass form for k > 2); 0 when a
// marginal is constant.
double metric_mcc(const int *pred, const int *gold, long n, int k);

// Regression.  Pearson and Spearman are 0 (not NaN) when either side is constant: the
// coefficient is undefined there and a NaN would poison the best-epoch choice.
double metric_pearson(const double *x, const double *y, long n);
// Pearson of the ranks, ties given their average rank (scipy.stats.spearmanr).
double metric_spearman(const double *x, const double *y, long n);
double metric_mse(const double *x, const double *y, long n);

// SQuAD (the official evaluate-v2.0.py): normalised text = lowercase, ASCII punctuation
// removed, the words a/an/the removed, whitespace collapsed.  `out` gets the normalised string
// (4·strlen(s)+8 bytes always suffice).
void squad_normalize(const char *s, char *out, size_t cap);
int squad_exact(const char *gold, const char *pred);   // 1 when the normalised texts are equal
double squad_f1(const char *gold, const char *pred);   // bag-of-words F1 of normalised tokens

#endif
