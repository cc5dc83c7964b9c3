// Fine-tuning on the run engine (run_engine.h): the batch source is the task's train features
// (trainer/task), the loss the task head's, the evaluation the task's scores on the whole dev
// split, with the best evaluation's weights kept in out_dir/best.
//
// Batches: epoch e visits the train features in a permutation seeded by (train.seed, e); step s
// of the epoch takes positions [s G, min((s+1) G, n)) (the last step of an epoch may be short).
// The global batch is cut into chunks of micro_batch rows; rank r of W takes chunks
// [r K / W, (r+1) K / W) of the K chunks, and each chunk's dropout is keyed by (step, chunk), so
// every chunk computes the same thing whatever the number of workers: W ranks and 1 rank differ
// only by the order of the gradient sums.
#include "trainer/train/finetune.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/rng.h"
#include "trainer/task/task.h"
#include "trainer/train/finetune_init.h"
#include "trainer/train/finetune_scores.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/run_engine.h"

typedef struct {
    RunEngine *e;
    Tokenizer *tok;
    TaskData *train, *dev;
    int T, G, mb, n_chunks_max;
    int c0;                       // the first chunk of this rank in the current step
    TaskBatchBuf **bufs;          // one per chunk this rank may hold in a step
    const TaskBatch **chunks;
    long *perm, *idx;             // epoch permutation; scratch indices
    int64_t steps_per_epoch, shuffled;  // shuffled: the epoch perm holds (-1: none yet)
    float *outputs;               // dev outputs of every feature [n_dev, width]
    int width;                    // floats per feature of the outputs
    double best;                  // primary dev score of the best evaluation (-inf: none yet)
    TaskScores best_scores;
    int64_t best_step;
    int best_epoch;
} Finetune;

static int row_labelled(const TaskBatch *b, int r) {
    if (b->label) return b->label[r] >= 0;
    if (b->target) return !isnan(b->target[r]);
    if (b->start) return b->start[r] >= 0 && b->end[r] >= 0;
    return 0;
}

static void write_scores_json(FILE *fp, const TaskScores *s) {
    fputc('{', fp);
    for (int i = 0; i < s->n; i++) {
        fprintf(fp, "%s\"%s\": ", i ? ", " : "", s->name[i]);
        json_put_number(fp, "%.17g", s->value[i]);
    }
    fputc('}', fp);
}

// out_dir/best.json: which evaluation the weights in out_dir/best come from (read back on resume).
static void write_best_json(Finetune *f) {
    if (f->e->rank != 0) return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/best.json", f->e->cfg->train.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    if (!fp) run_check_write(f->e, -1, "best.json");
    fprintf(fp, "{\"epoch\": %d, \"step\": %lld, \"metric\": \"%s\", \"value\": ", f->best_epoch,
            (long long)f->best_step, f->best_scores.name[f->best_scores.primary]);
    json_put_number(fp, "%.17g", f->best);
    fputs(", \"scores\": ", fp);
    write_scores_json(fp, &f->best_scores);
    fputs("}\n", fp);
    run_check_write(f->e, fclose(fp) != 0 || rename(tmp, path) != 0 ? -1 : 0, "best.json");
}

// A missing best.json means no evaluation finished before the stop: the best starts afresh.
// A present but unreadable one is an error on every rank: starting afresh would let the next,
// possibly worse, evaluation replace the weights in out_dir/best.
static void read_best_json(Finetune *f) {
    char path[4200];
    snprintf(path, sizeof path, "%s/best.json", f->e->cfg->train.out_dir);
    double v[4] = {-INFINITY, 0, 0, 1};  // value, epoch, step, readable
    if (f->e->rank == 0 && access(path, F_OK) == 0) {
        char *text = mhe_read_file(path, NULL);
        cJSON *root = cJSON_Parse(text);
        const char *keys[3] = {"value", "epoch", "step"};
        for (int i = 0; i < 3 && v[3] != 0; i++) {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, keys[i]);
            if (cJSON_IsNumber(x)) v[i] = x->valuedouble;
            else v[3] = 0;
        }
        // The scores too: a resumed run's finetune_result.json names the metric and every score.
        if (v[3] != 0 && finetune_scores_from_json(root, &f->best_scores) != 0) v[3] = 0;
        cJSON_Delete(root);
        free(text);
    }
    comm_broadcast(f->e->comm, v, sizeof v, 0);
    comm_broadcast(f->e->comm, &f->best_scores, sizeof f->best_scores, 0);
    if (v[3] == 0) {
        if (f->e->rank == 0)
            mhe_fail("%s: expected a JSON object with numbers \"value\", \"epoch\" and \"step\", \"metric\" and "
                     "\"scores\" (the best "
                     "evaluation so far, written by finetune); restore it or remove it with %s/best to start the best afresh",
                     path, f->e->cfg->train.out_dir);
        exit(MHE_EXIT_INPUT);
    }
    f->best = v[0];
    f->best_epoch = (int)v[1];
    f->best_step = (int64_t)v[2];
}

// finetune_result.json and the final line: the best evaluation and the trivial predictor's.
static void report(Finetune *f) {
    if (f->e->rank != 0) return;
    TaskScores triv;
    task_score_trivial(f->dev, f->train, &triv);
    const char *name = f->best_scores.name[f->best_scores.primary];
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/finetune_result.json", f->e->cfg->train.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    if (!fp) run_check_write(f->e, -1, "finetune_result.json");
    fprintf(fp, "{\"format\": \"%s\", \"attention\": \"%s\", \"init_from\": ",
            f->e->cfg->task.format ? f->e->cfg->task.format : "", attention_type_name(f->e->cfg->attention.type));
    json_put_string(fp, f->e->cfg->train.init_from);
    fprintf(fp, ", \"best_epoch\": %d, \"best_step\": %lld, \"steps\": %lld, \"metric\": \"%s\", \"value\": ",
            f->best_epoch, (long long)f->best_step, (long long)f->e->step, name);
    json_put_number(fp, "%.17g", f->best);
    fputs(", \"scores\": ", fp);
    write_scores_json(fp, &f->best_scores);
    fprintf(fp, ", \"trivial\": ");
    write_scores_json(fp, &triv);
    fputs("}\n", fp);
    run_check_write(f->e, fclose(fp) != 0 || rename(tmp, path) != 0 ? -1 : 0, "finetune_result.json");
    printf("finetune: best epoch %d (step %lld) dev %s %.4f | trivial %s %.4f | weights %s/best\n", f->best_epoch,
           (long long)f->best_step, name, f->best, triv.name[triv.primary], triv.value[triv.primary],
           f->e->cfg->train.out_dir);
    fflush(stdout);
}


// Forward over the whole dev split, this rank's contiguous share; outputs summed over ranks
// (each feature's row is written by exactly one rank) and scored on every rank alike.
static double evaluate(Finetune *f, TaskScores *scores) {
    RunEngine *e = f->e;
    const long n = task_data_features(f->dev);
    const long begin = n * e->rank / e->world, end = n * (e->rank + 1) / e->world;
    memset(f->outputs, 0, (size_t)n * f->width * sizeof(float));
    double sums[2] = {0, 0};  // loss sum, labelled rows
    for (long i = begin; i < end; i += f->mb) {
        const int B = (int)(end - i < f->mb ? end - i : f->mb);
        for (int r = 0; r < B; r++) f->idx[r] = i + r;
        const TaskBatch *b = task_data_fill(f->dev, f->idx, B, f->bufs[0]);
        model_forward_task(e->model, b, 0);
        if (model_label_count(e->model) > 0) {
            sums[0] += model_loss_sum(e->model);
            sums[1] += (double)model_label_count(e->model);
        }
        model_download_task_outputs(e->model, f->outputs + (size_t)i * f->width);
    }
    comm_allreduce_sum_f32(e->comm, f->outputs, (size_t)n * f->width);
    comm_allreduce_sum_f64(e->comm, sums, 2);
    task_score(f->dev, f->outputs, scores);
    return sums[1] > 0 ? sums[0] / sums[1] : NAN;
}

static void eval_and_keep_best(Finetune *f, int epoch) {
    RunEngine *e = f->e;
    TaskScores s;
    const double loss = f->e->final_loss = evaluate(f, &s);
    const double primary = s.value[s.primary];
    const int better = primary > f->best || !isfinite(f->best);
    if (e->rank == 0) {
        fprintf(stderr, "eval epoch %d step %lld: dev loss %.4f |", epoch, (long long)e->step, loss);
        for (int i = 0; i < s.n; i++) fprintf(stderr, " %s %.4f", s.name[i], s.value[i]);
        fprintf(stderr, "%s\n", better ? " | best so far" : "");
        MetricValue v[12];
        const char *tags[10];
        float vals[10];
        char tagbuf[10][40];
        int k = 0, nt = 0;
        v[k++] = (MetricValue){"split", 0, "dev"};
        v[k++] = (MetricValue){"epoch", epoch, NULL};
        v[k++] = (MetricValue){"dev_loss", loss, NULL};
        tags[nt] = "dev/loss";
        vals[nt++] = (float)loss;
        for (int i = 0; i < s.n && k < 12 && nt < 10; i++) {
            v[k++] = (MetricValue){s.name[i], s.value[i], NULL};
            snprintf(tagbuf[nt], sizeof tagbuf[nt], "dev/%s", s.name[i]);
            tags[nt] = tagbuf[nt];
            vals[nt++] = (float)s.value[i];
        }
        run_record(e, k, v, nt, tags, vals);
    }
    if (!better) return;
    f->best = primary;
    f->best_scores = s;
    f->best_step = e->step;
    f->best_epoch = epoch;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/best", e->cfg->train.out_dir);
    run_save(e, dir, 1);
    write_best_json(f);
}

// Epoch e's permutation of the train features (Fisher-Yates, seeded by (seed, e)).
static void shuffle(Finetune *f, int64_t epoch) {
    const long n = task_data_features(f->train);
    for (long i = 0; i < n; i++) f->perm[i] = i;
    Rng r = rng_stream(f->e->cfg->train.seed, 0xf17e, (uint64_t)epoch);
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng_next(&r) % (uint64_t)(i + 1));
        long t = f->perm[i];
        f->perm[i] = f->perm[j];
        f->perm[j] = t;
    }
}

// Step e->step's chunks of this rank (within its epoch).
static int batch(void *self, RunEngine *e, double *labelled) {
    Finetune *f = self;
    const int64_t epoch = e->step / f->steps_per_epoch;
    if (epoch != f->shuffled) shuffle(f, f->shuffled = epoch);
    const long n = task_data_features(f->train);
    const int64_t s = e->step % f->steps_per_epoch;
    const long g0 = (long)s * f->G, g = (long)(n - g0 < f->G ? n - g0 : f->G);
    const int K = (int)((g + f->mb - 1) / f->mb);
    const int c0 = K * e->rank / e->world, c1 = K * (e->rank + 1) / e->world;
    for (int c = c0; c < c1; c++) {
        const long b0 = (long)c * f->mb, B = g - b0 < f->mb ? g - b0 : f->mb;
        for (long r = 0; r < B; r++) f->idx[r] = f->perm[g0 + b0 + r];
        f->chunks[c - c0] = task_data_fill(f->train, f->idx, (int)B, f->bufs[c - c0]);
        for (int r = 0; r < (int)B; r++) *labelled += row_labelled(f->chunks[c - c0], r);
    }
    f->c0 = c0;
    return c1 - c0;
}

static void empty_batch(void *self, RunEngine *e, char *msg, size_t len) {
    (void)self;
    snprintf(msg, len, "finetune: step %lld: the global batch holds no labelled row", (long long)e->step + 1);
}

static void forward(void *self, RunEngine *e, int i) {
    Finetune *f = self;
    const int c = f->c0 + i;  // dropout keyed by the chunk of the global batch
    model_set_dropout_seed(e->model, rng_at(e->cfg->train.seed, 0xf1d0, (uint64_t)e->step, (uint64_t)c));
    model_forward_task(e->model, f->chunks[i], 1);
}

// 1-based epoch of the step just done.
static int epoch_done(const Finetune *f) { return (int)((f->e->step - 1) / f->steps_per_epoch) + 1; }

static void log_step(void *self, RunEngine *e, const StepResult *r) {
    Finetune *f = self;
    const int epoch = epoch_done(f);
    const double elapsed = omp_get_wtime() - e->t_start;
    fprintf(stderr, "step %lld/%lld | epoch %d | loss %.4f | lr %.3e | grad norm %.3f | %.2f s/step%s\n",
            (long long)e->step, (long long)e->total_steps, epoch, r->loss, r->lr, r->grad_norm, r->step_s,
            r->skipped ? " | SKIPPED (non-finite)" : "");
    MetricValue v[] = {{"epoch", epoch, NULL},  {"loss", r->loss, NULL},          {"lr", r->lr, NULL},
                       {"grad_norm", r->grad_norm, NULL}, {"elapsed_s", elapsed, NULL}, {"skipped", r->skipped, NULL}};
    const char *tags[] = {"train/loss", "train/lr", "train/grad_norm"};
    float vals[] = {(float)r->loss, (float)r->lr, (float)r->grad_norm};
    run_record(e, 6, v, 3, tags, vals);
}

// After every epoch (and every train.eval_every steps) the dev split; a checkpoint every epoch.
static int after_step(void *self, RunEngine *e) {
    Finetune *f = self;
    const int epoch_end = e->step % f->steps_per_epoch == 0 || e->step == e->total_steps;
    if (epoch_end || (e->cfg->train.eval_every > 0 && e->step % e->cfg->train.eval_every == 0))
        eval_and_keep_best(f, epoch_done(f));
    return epoch_end;
}

static void resumed(void *self, RunEngine *e) {
    (void)e;
    read_best_json(self);
}

static void init_from(void *self, RunEngine *e, const char *dir) {
    (void)self;
    int ignored = finetune_load_encoder(dir, e->table, e->host_params, NULL, 0);
    fprintf(stderr, "initialised the encoder from %s (%d pretraining tensor%s ignored; task head seeded)\n", dir,
            ignored, ignored == 1 ? "" : "s");
}

static void open_data(void *self, RunEngine *e) {
    Finetune *f = self;
    const Config *cfg = e->cfg;
    f->e = e;
    {  // the files behind the paths the config agreed on: a stale copy on one node differs here
        const char *keys[] = {"task_train_file", "task_dev_file", "tokenizer_file"};
        const char *paths[] = {cfg->task.train_file, cfg->task.dev_file, cfg->data.tokenizer};
        char *agree = rank_agree_files_text(e->config_yaml, 3, keys, paths);
        rank_agree(e->comm, "data", agree);
        free(agree);
    }
    f->tok = tokenizer_load(cfg->data.tokenizer);
    f->train = task_data_load(cfg, f->tok, TASK_SPLIT_TRAIN);
    f->dev = task_data_load(cfg, f->tok, TASK_SPLIT_DEV);
    const long n = task_data_features(f->train);
    if (n == 0) mhe_fail("%s: no training example", cfg->task.train_file);
    f->G = cfg->train.global_batch;
    f->mb = cfg->train.micro_batch;
    f->steps_per_epoch = (n + f->G - 1) / f->G;
    e->total_steps = f->steps_per_epoch * (cfg->task.epochs > 0 ? cfg->task.epochs : 1);
    if (cfg->train.steps > 0 && cfg->train.steps < e->total_steps) e->total_steps = cfg->train.steps;
    f->n_chunks_max = f->G / f->mb / e->world + 1;
    f->bufs = mhe_calloc((size_t)f->n_chunks_max, sizeof *f->bufs);
    for (int i = 0; i < f->n_chunks_max; i++) f->bufs[i] = task_batch_buf_new(f->mb, f->T);
    f->chunks = mhe_calloc((size_t)f->n_chunks_max, sizeof *f->chunks);
    f->perm = mhe_malloc((size_t)n * sizeof *f->perm);
    f->idx = mhe_malloc((size_t)f->mb * sizeof *f->idx);
    f->width = cfg->task.type == TASK_SPAN ? 2 * f->T : param_task_outputs(cfg);
    f->outputs = mhe_malloc(((size_t)task_data_features(f->dev) + 1) * f->width * sizeof(float));
}

static void begin(void *self, RunEngine *e) {
    Finetune *f = self;
    const Config *cfg = e->cfg;
    if (e->rank != 0) return;
    if (!e->resumed && !(cfg->train.init_from && cfg->train.init_from[0]))
        fprintf(stderr, "random initialisation (train.init_from is empty)\n");
    fprintf(stderr,
            "finetune: %s %s, %zu parameters | task %s (%s) | %ld train features (%ld examples), %ld dev | "
            "workers %d x micro-batch %d, global batch %d | seq %d | %lld steps/epoch, %lld steps | device %s | "
            "ZeRO-%d | gradients all-reduced by %s\n",
            arch_name(cfg->model.arch), attention_type_name(cfg->attention.type), e->table->total,
            cfg->task.format ? cfg->task.format : "?",
            cfg->task.type == TASK_SPAN ? "span" : cfg->task.type == TASK_REGRESSION ? "regression" : "classification",
            task_data_features(f->train), task_data_examples(f->train), task_data_features(f->dev), e->world, f->mb,
            f->G, f->T, (long long)f->steps_per_epoch, (long long)e->total_steps, e->be->name, e->zero->enabled,
            grad_reducer_describe(e->reducer));
}

static void finish(void *self, RunEngine *e) {
    (void)e;
    report(self);
}

static void close_data(void *self, RunEngine *e) {
    (void)e;
    Finetune *f = self;
    for (int i = 0; i < f->n_chunks_max; i++) task_batch_buf_free(f->bufs[i]);
    free(f->bufs);
    free(f->chunks);
    free(f->perm);
    free(f->idx);
    free(f->outputs);
    task_data_free(f->train);
    task_data_free(f->dev);
    tokenizer_free(f->tok);
}

int finetune_run(const Config *cfg, Comm *comm, const FinetuneOptions *opt) {
    if (cfg->task.type == TASK_NONE)
        mhe_fail("%s: finetune needs a task: section (task.type: classification, regression or span)", cfg->source);
    Finetune f = {.T = cfg->task.max_seq > 0 ? cfg->task.max_seq : cfg->data.seq_len, .shuffled = -1, .best = -INFINITY};
    RunJob job = {.self = &f, .seq_len = f.T, .backward = model_backward_task, .open = open_data,
                  .init_from = init_from, .resumed = resumed, .begin = begin, .batch = batch,
                  .empty_batch = empty_batch, .forward = forward, .log = log_step, .after_step = after_step,
                  .finish = finish, .close = close_data};
    return run_engine(cfg, comm, opt, &job);
}
