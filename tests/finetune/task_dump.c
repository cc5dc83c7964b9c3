// Test driver of trainer/task: prints what the library reads, featurises and scores as JSON,
// for the Python oracles of tests/finetune/ to compare (Hugging Face's GLUE and SQuAD
// processors, scikit-learn, SciPy, the official SQuAD metrics).
//   task_dump examples CONFIG train|dev [key=value...]   the reader's examples
//   task_dump features CONFIG train|dev [key=value...]   the featurised rows (data.tokenizer)
//   task_dump score CONFIG OUTPUTS.f32 [key=value...]    task_score of raw float32 outputs on
//                                                        dev, the trivial score, span predictions
//   task_dump metrics-cls K < "pred gold" lines          accuracy, f1, f1_macro, mcc
//   task_dump metrics-reg < "x y" lines                  pearson, spearman, mse
//   task_dump squad < JSON lines {"gold", "pred"}         normalised texts, exact, f1 per line
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "data/tokenizer.h"
#include "trainer/config/config.h"
#include "trainer/task/metrics.h"
#include "trainer/task/task.h"
#include "trainer/task/task_internal.h"

static void print_json(cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    puts(s);
    free(s);
    cJSON_Delete(j);
}

static cJSON *int_array(const int32_t *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static cJSON *examples_json(const TaskExamples *ex, TaskType type) {
    cJSON *arr = cJSON_CreateArray();
    for (long i = 0; i < ex->n; i++) {
        cJSON *o = cJSON_CreateObject();
        if (type != TASK_SPAN) {
            const TextExample *e = &ex->text[i];
            cJSON_AddStringToObject(o, "a", e->a);
            if (e->b) cJSON_AddStringToObject(o, "b", e->b);
            else cJSON_AddNullToObject(o, "b");
            if (type == TASK_CLASSIFICATION) cJSON_AddNumberToObject(o, "label", e->label);
            else cJSON_AddNumberToObject(o, "target", e->target);
            cJSON_AddNumberToObject(o, "line", e->line);
        } else {
            const SquadExample *e = &ex->squad[i];
            const SquadContext *c = &ex->contexts[e->context];
            cJSON_AddStringToObject(o, "id", e->id);
            cJSON_AddStringToObject(o, "question", e->question);
            cJSON_AddNumberToObject(o, "context", e->context);
            cJSON_AddBoolToObject(o, "impossible", e->impossible);
            cJSON_AddNumberToObject(o, "start_word", e->start_word);
            cJSON_AddNumberToObject(o, "end_word", e->end_word);
            cJSON *words = cJSON_AddArrayToObject(o, "words");
            for (int w = 0; w < c->n_words; w++) {
                char *t = strndup(c->text + c->word_start[w], (size_t)(c->word_end[w] - c->word_start[w]));
                cJSON_AddItemToArray(words, cJSON_CreateString(t));
                free(t);
            }
            cJSON *ans = cJSON_AddArrayToObject(o, "answers");
            for (int k = 0; k < e->n_answers; k++) {
                cJSON *a = cJSON_CreateObject();
                cJSON_AddStringToObject(a, "text", e->answers[k].text);
                cJSON_AddNumberToObject(a, "answer_start", e->answers[k].start);
                cJSON_AddItemToArray(ans, a);
            }
        }
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

static cJSON *features_json(const TaskData *d) {
    cJSON *arr = cJSON_CreateArray();
    long idx[1];
    TaskBatchBuf *buf = task_batch_buf_new(1, d->T);
    for (long f = 0; f < d->n_features; f++) {
        const TaskFeature *F = &d->features[f];
        idx[0] = f;
        const TaskBatch *b = task_data_fill(d, idx, 1, buf);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "example", F->example);
        cJSON_AddItemToObject(o, "ids", int_array(b->ids, F->len));
        if (b->type_ids) cJSON_AddItemToObject(o, "type_ids", int_array(b->type_ids, F->len));
        cJSON_AddItemToObject(o, "mask", int_array(b->attn_mask, d->T));
        cJSON_AddItemToObject(o, "padded_ids", int_array(b->ids, d->T));
        cJSON_AddNumberToObject(o, "last", b->last[0]);
        if (b->label) cJSON_AddNumberToObject(o, "label", b->label[0]);
        if (b->target) cJSON_AddNumberToObject(o, "target", b->target[0]);
        if (b->start) {
            cJSON_AddNumberToObject(o, "start", b->start[0]);
            cJSON_AddNumberToObject(o, "end", b->end[0]);
            cJSON_AddNumberToObject(o, "doc_start", F->doc_start);
            cJSON_AddNumberToObject(o, "ctx_off", F->ctx_off);
            cJSON_AddNumberToObject(o, "ctx_len", F->ctx_len);
            cJSON *mc = cJSON_AddArrayToObject(o, "max_context");
            for (int k = 0; k < F->ctx_len; k++)
                cJSON_AddItemToArray(mc, cJSON_CreateNumber(d->max_context[F->ids_off + F->ctx_off + k]));
            const DocTokens *dt = &d->docs[d->ex.squad[F->example].context];
            cJSON *w = cJSON_AddArrayToObject(o, "tok_to_word");
            for (int k = 0; k < F->ctx_len; k++) cJSON_AddItemToArray(w, cJSON_CreateNumber(dt->word[F->doc_start + k]));
        }
        cJSON_AddItemToArray(arr, o);
    }
    task_batch_buf_free(buf);
    return arr;
}

static cJSON *scores_json(const TaskScores *s) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < s->n; i++) cJSON_AddNumberToObject(o, s->name[i], s->value[i]);
    cJSON_AddStringToObject(o, "primary", s->name[s->primary]);
    return o;
}

static int cmd_data(int argc, char **argv) {
    Config cfg;
    const int dump_features = !strcmp(argv[1], "features"), score = !strcmp(argv[1], "score");
    config_load(&cfg, argv[2], argc - 4, argv + 4);
    const TaskSplit split = score || !strcmp(argv[3], "dev") ? TASK_SPLIT_DEV : TASK_SPLIT_TRAIN;
    if (!dump_features && !score) {
        TaskExamples ex;
        task_read_examples(&ex, &cfg.task, split == TASK_SPLIT_TRAIN ? cfg.task.train_file : cfg.task.dev_file);
        print_json(examples_json(&ex, cfg.task.type));
        task_examples_free(&ex);
        config_free(&cfg);
        return 0;
    }
    Tokenizer *tok = tokenizer_load(cfg.data.tokenizer);
    TaskData *d = task_data_load(&cfg, tok, split);
    if (dump_features) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "examples", (double)task_data_examples(d));
        cJSON_AddNumberToObject(o, "num_labels", task_data_num_labels(d));
        cJSON_AddNumberToObject(o, "T", d->T);
        cJSON_AddItemToObject(o, "features", features_json(d));
        print_json(o);
    } else {
        const long F = task_data_features(d);
        const size_t per = cfg.task.type == TASK_CLASSIFICATION ? (size_t)d->num_labels
                           : cfg.task.type == TASK_REGRESSION ? 1 : (size_t)d->T * 2;
        size_t len = 0;
        float *out = (float *)mhe_read_file(argv[3], &len);
        if (len != (size_t)F * per * sizeof(float))
            mhe_fail("%s: expected %ld x %zu float32 outputs, found %zu bytes", argv[3], F, per, len);
        TaskScores s, triv;
        task_score(d, out, &s);
        TaskData *train = task_data_load(&cfg, tok, TASK_SPLIT_TRAIN);
        task_score_trivial(d, train, &triv);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "scores", scores_json(&s));
        cJSON_AddItemToObject(o, "trivial", scores_json(&triv));
        if (cfg.task.type == TASK_SPAN) {
            const long n = d->ex.n;
            long *first = mhe_calloc((size_t)n, sizeof *first), *count = mhe_calloc((size_t)n, sizeof *count);
            for (long f = F - 1; f >= 0; f--) first[d->features[f].example] = f, count[d->features[f].example]++;
            cJSON *p = cJSON_AddObjectToObject(o, "predictions");
            cJSON *nn = cJSON_AddObjectToObject(o, "nonnull");      // the best non-null span
            cJSON *na = cJSON_AddObjectToObject(o, "null_diff");    // null score - its score
            for (long i = 0; i < n; i++) {
                SquadPrediction sp;
                char *t = task_squad_predict(d, i, out, first, count, &sp);
                cJSON_AddStringToObject(p, d->ex.squad[i].id, t);
                cJSON_AddStringToObject(nn, d->ex.squad[i].id, sp.nonnull);
                cJSON_AddNumberToObject(na, d->ex.squad[i].id, sp.null_diff);
                free(t);
                free(sp.nonnull);
            }
            free(first);
            free(count);
        }
        print_json(o);
        task_data_free(train);
        free(out);
    }
    task_data_free(d);
    tokenizer_free(tok);
    config_free(&cfg);
    return 0;
}

static int cmd_metrics(int argc, char **argv) {
    long n = 0, cap = 1024;
    char line[1 << 16];
    if (!strcmp(argv[1], "squad")) {
        cJSON *arr = cJSON_CreateArray();
        while (fgets(line, sizeof line, stdin)) {
            cJSON *in = cJSON_Parse(line);
            const char *g = cJSON_GetObjectItem(in, "gold")->valuestring, *p = cJSON_GetObjectItem(in, "pred")->valuestring;
            char *ng = mhe_malloc(4 * strlen(g) + 8);
            squad_normalize(g, ng, 4 * strlen(g) + 8);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "norm_gold", ng);
            cJSON_AddNumberToObject(o, "exact", squad_exact(g, p));
            cJSON_AddNumberToObject(o, "f1", squad_f1(g, p));
            cJSON_AddItemToArray(arr, o);
            free(ng);
            cJSON_Delete(in);
        }
        print_json(arr);
        return 0;
    }
    const int cls = !strcmp(argv[1], "metrics-cls");
    const int k = cls && argc > 2 ? atoi(argv[2]) : 0;
    int *pi = mhe_malloc((size_t)cap * sizeof *pi), *gi = mhe_malloc((size_t)cap * sizeof *gi);
    double *px = mhe_malloc((size_t)cap * sizeof *px), *gx = mhe_malloc((size_t)cap * sizeof *gx);
    while (fgets(line, sizeof line, stdin)) {
        if (n == cap) {
            cap *= 2;
            pi = mhe_realloc(pi, (size_t)cap * sizeof *pi);
            gi = mhe_realloc(gi, (size_t)cap * sizeof *gi);
            px = mhe_realloc(px, (size_t)cap * sizeof *px);
            gx = mhe_realloc(gx, (size_t)cap * sizeof *gx);
        }
        if (sscanf(line, "%lf %lf", &px[n], &gx[n]) != 2) mhe_fail("metrics: bad line '%s'", line);
        pi[n] = (int)px[n];
        gi[n] = (int)gx[n];
        n++;
    }
    cJSON *o = cJSON_CreateObject();
    if (cls) {
        cJSON_AddNumberToObject(o, "accuracy", metric_accuracy(pi, gi, n));
        cJSON_AddNumberToObject(o, "f1", metric_f1_binary(pi, gi, n));
        cJSON_AddNumberToObject(o, "f1_macro", metric_f1_macro(pi, gi, n, k));
        cJSON_AddNumberToObject(o, "mcc", metric_mcc(pi, gi, n, k));
    } else {
        cJSON_AddNumberToObject(o, "pearson", metric_pearson(px, gx, n));
        cJSON_AddNumberToObject(o, "spearman", metric_spearman(px, gx, n));
        cJSON_AddNumberToObject(o, "mse", metric_mse(px, gx, n));
    }
    print_json(o);
    free(pi);
    free(gi);
    free(px);
    free(gx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && (!strcmp(argv[1], "examples") || !strcmp(argv[1], "features") || !strcmp(argv[1], "score")))
        return cmd_data(argc, argv);
    if (argc >= 2 && (!strcmp(argv[1], "metrics-cls") || !strcmp(argv[1], "metrics-reg") || !strcmp(argv[1], "squad")))
        return cmd_metrics(argc, argv);
    fprintf(stderr, "usage: task_dump examples|features CONFIG train|dev [k=v...] | score CONFIG OUT.f32 "
                    "| metrics-cls K | metrics-reg | squad\n");
    return 2;
}
