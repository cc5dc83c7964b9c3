// The fine-tuning loop (finetune.h).  Mirrors trainer.c where the two agree (backend, gradient
// reducer, optimizer, schedule, clipping, checkpoints, lock, signals, metrics, TensorBoard); what
// differs is the data (trainer/task features instead of shards), the epochs, the evaluation
// (task scores on the whole dev split) and the best-evaluation checkpoint.
//
// Batches: epoch e visits the train features in a permutation seeded by (train.seed, e); step s
// of the epoch takes positions [s G, min((s+1) G, n)) (the last step of an epoch may be short).
// The global batch is cut into chunks of micro_batch rows; rank r of W takes chunks
// [r K / W, (r+1) K / W) of the K chunks, and each chunk's dropout is keyed by (step, chunk), so
// every chunk computes the same thing whatever the number of workers: W ranks and 1 rank differ
// only by the order of the gradient sums.
#include "trainer/train/finetune.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "comm/grad_reducer.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/rng.h"
#include "kernels/backend_info.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/metrics.h"
#include "trainer/io/run_lock.h"
#include "trainer/io/tensorboard.h"
#include "trainer/model/model.h"
#include "trainer/task/task.h"
#include "trainer/train/divergence.h"
#include "trainer/train/finetune_init.h"
#include "trainer/train/finetune_scores.h"
#include "trainer/train/optim.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/run_identity.h"
#include "trainer/train/reducer_setup.h"
#include "trainer/train/schedule.h"
#include "trainer/train/signals.h"

typedef struct {
    const Config *cfg;
    const FinetuneOptions *opt;
    Comm *comm;
    int rank, world;
    Backend *be;
    Model *model;
    const ParamTable *table;
    Tokenizer *tok;
    TaskData *train, *dev;
    int T, G, mb, n_chunks_max;
    TaskBatchBuf **bufs;          // one per chunk this rank may hold in a step
    const TaskBatch **chunks;
    long *perm, *idx;             // epoch permutation; scratch indices
    int64_t step, total_steps, steps_per_epoch;
    float *params, *grads, *host_params;
    float *dev_m, *dev_v, *dev_u;
    OptimState opt_state;
    GradReducer *reducer;
    GradPiece *pieces;
    DeviceComm *dcomm;
    GradDevice device;
    float *outputs, *row_out;     // dev outputs of every feature [n_dev, width]; one batch's
    int width;                    // floats per feature of the outputs
    MetricsLog metrics;
    TbWriter tb;
    SignalWatch signals;
    char *config_yaml;
    int lock_fd;
    double best;                  // primary dev score of the best evaluation (-inf: none yet)
    TaskScores best_scores;
    int64_t best_step;
    int best_epoch;
    double t_start;
    double last_dev_loss;         // of the latest evaluation (divergence.h)
    int64_t diverged_at;          // first step of the trailing run of non-finite losses (0: none)
} Finetune;

static int is_host(const Backend *be) { return strcmp(be->name, "cpu") == 0; }

static void check_write(Finetune *f, int rc, const char *what) {
    if (rc == 0) return;
    char msg[4352];
    snprintf(msg, sizeof msg, "%s/%s: write failed: %s", f->cfg->train.out_dir, what, strerror(errno));
    comm_abort(f->comm, 1, msg);
}



static int row_labelled(const TaskBatch *b, int r) {
    if (b->label) return b->label[r] >= 0;
    if (b->target) return !isnan(b->target[r]);
    if (b->start) return b->start[r] >= 0 && b->end[r] >= 0;
    return 0;
}

static void save(Finetune *f, const char *out_dir, int keep_last) {
    if (!is_host(f->be)) {
        f->be->download(f->be, f->host_params, f->params, f->table->total * sizeof(float));
        f->be->download(f->be, f->opt_state.m, f->dev_m, f->table->total * sizeof(float));
        f->be->download(f->be, f->opt_state.v, f->dev_v, f->table->total * sizeof(float));
    }
    if (f->rank == 0) {
        CheckpointState st = {.step = f->step,
                              .consumed_samples = f->step * f->G,
                              .rng_seed = f->cfg->train.seed,
                              .rng_offset = (uint64_t)f->step,
                              .loss_scale = 1.0,
                              .world_size = f->world,
                              .config_yaml = f->config_yaml};
        if (checkpoint_save(out_dir, &st, f->table, f->host_params, &f->opt_state, keep_last) != 0)
            comm_abort(f->comm, 1, "saving the checkpoint failed; the previous checkpoint is intact");
    }
    comm_barrier_allowing(f->comm, checkpoint_save_allowance_s(f->table->total), "barrier after the checkpoint");
}

// JSON has no inf or NaN (a correlation of constant predictions, no evaluation yet): null, so
// the files stay JSON whatever the numbers.
static void json_number(FILE *fp, double v) {
    if (isfinite(v)) fprintf(fp, "%.17g", v);
    else fputs("null", fp);
}

// A string with JSON's escapes (paths may hold quotes, backslashes or control characters).
static void json_string(FILE *fp, const char *s) {
    fputc('"', fp);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(fp, "\\%c", *p);
        else if (*p < 0x20) fprintf(fp, "\\u%04x", *p);
        else fputc(*p, fp);
    }
    fputc('"', fp);
}

static void write_scores_json(FILE *fp, const TaskScores *s) {
    fputc('{', fp);
    for (int i = 0; i < s->n; i++) {
        fprintf(fp, "%s\"%s\": ", i ? ", " : "", s->name[i]);
        json_number(fp, s->value[i]);
    }
    fputc('}', fp);
}

// out_dir/best.json: which evaluation the weights in out_dir/best come from (read back on resume).
static void write_best_json(Finetune *f) {
    if (f->rank != 0) return;
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/best.json", f->cfg->train.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    if (!fp) check_write(f, -1, "best.json");
    fprintf(fp, "{\"epoch\": %d, \"step\": %lld, \"metric\": \"%s\", \"value\": ", f->best_epoch,
            (long long)f->best_step, f->best_scores.name[f->best_scores.primary]);
    json_number(fp, f->best);
    fputs(", \"scores\": ", fp);
    write_scores_json(fp, &f->best_scores);
    fputs("}\n", fp);
    check_write(f, fclose(fp) != 0 || rename(tmp, path) != 0 ? -1 : 0, "best.json");
}

// A missing best.json means no evaluation finished before the stop: the best starts afresh.
// A present but unreadable one is an error on every rank: starting afresh would let the next,
// possibly worse, evaluation replace the weights in out_dir/best.
static void read_best_json(Finetune *f) {
    char path[4200];
    snprintf(path, sizeof path, "%s/best.json", f->cfg->train.out_dir);
    double v[4] = {-INFINITY, 0, 0, 1};  // value, epoch, step, readable
    if (f->rank == 0 && access(path, F_OK) == 0) {
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
    comm_broadcast(f->comm, v, sizeof v, 0);
    comm_broadcast(f->comm, &f->best_scores, sizeof f->best_scores, 0);
    if (v[3] == 0) {
        if (f->rank == 0)
            mhe_fail("%s: expected a JSON object with numbers \"value\", \"epoch\" and \"step\", \"metric\" and "
                     "\"scores\" (the best "
                     "evaluation so far, written by finetune); restore it or remove it with %s/best to start the best afresh",
                     path, f->cfg->train.out_dir);
        exit(MHE_EXIT_INPUT);
    }
    f->best = v[0];
    f->best_epoch = (int)v[1];
    f->best_step = (int64_t)v[2];
}

// Forward over the whole dev split, this rank's contiguous share; outputs summed over ranks
// (each feature's row is written by exactly one rank) and scored on every rank alike.
static double evaluate(Finetune *f, TaskScores *scores) {
    const long n = task_data_features(f->dev);
    const long begin = n * f->rank / f->world, end = n * (f->rank + 1) / f->world;
    memset(f->outputs, 0, (size_t)n * f->width * sizeof(float));
    double sums[2] = {0, 0};  // loss sum, labelled rows
    for (long i = begin; i < end; i += f->mb) {
        const int B = (int)(end - i < f->mb ? end - i : f->mb);
        for (int r = 0; r < B; r++) f->idx[r] = i + r;
        const TaskBatch *b = task_data_fill(f->dev, f->idx, B, f->bufs[0]);
        model_forward_task(f->model, b, 0);
        if (model_label_count(f->model) > 0) {
            sums[0] += model_loss_sum(f->model);
            sums[1] += (double)model_label_count(f->model);
        }
        model_download_task_outputs(f->model, f->outputs + (size_t)i * f->width);
    }
    comm_allreduce_sum_f32(f->comm, f->outputs, (size_t)n * f->width);
    comm_allreduce_sum_f64(f->comm, sums, 2);
    task_score(f->dev, f->outputs, scores);
    return sums[1] > 0 ? sums[0] / sums[1] : NAN;
}

static void eval_and_keep_best(Finetune *f, int epoch) {
    TaskScores s;
    const double loss = f->last_dev_loss = evaluate(f, &s);
    const double primary = s.value[s.primary];
    const int better = primary > f->best || !isfinite(f->best);
    if (f->rank == 0) {
        fprintf(stderr, "eval epoch %d step %lld: dev loss %.4f |", epoch, (long long)f->step, loss);
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
        check_write(f, metrics_write(&f->metrics, f->step, k, v), "metrics.jsonl");
        check_write(f, tb_write_scalars(&f->tb, f->step, tb_wall_time(), nt, tags, vals), "tensorboard");
    }
    if (!better) return;
    f->best = primary;
    f->best_scores = s;
    f->best_step = f->step;
    f->best_epoch = epoch;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/best", f->cfg->train.out_dir);
    save(f, dir, 1);
    write_best_json(f);
}

// Epoch e's permutation of the train features (Fisher-Yates, seeded by (seed, e)).
static void shuffle(Finetune *f, int64_t epoch) {
    const long n = task_data_features(f->train);
    for (long i = 0; i < n; i++) f->perm[i] = i;
    Rng r = rng_stream(f->cfg->train.seed, 0xf17e, (uint64_t)epoch);
    for (long i = n - 1; i > 0; i--) {
        long j = (long)(rng_next(&r) % (uint64_t)(i + 1));
        long t = f->perm[i];
        f->perm[i] = f->perm[j];
        f->perm[j] = t;
    }
}

// One optimizer step (f->step, within its epoch).  Returns 0 applied, 1 skipped, 2 stop.
static int train_step(Finetune *f, double *loss_out, double *gnorm_out, double *lr_out) {
    const Config *cfg = f->cfg;
    const long n = task_data_features(f->train);
    const int64_t s = f->step % f->steps_per_epoch;
    const long g0 = (long)s * f->G, g = (long)(n - g0 < f->G ? n - g0 : f->G);
    const int K = (int)((g + f->mb - 1) / f->mb);
    const int c0 = K * f->rank / f->world, c1 = K * (f->rank + 1) / f->world;
    double counts[2] = {0, 0};  // labelled rows, loss sum
    for (int c = c0; c < c1; c++) {
        const long b0 = (long)c * f->mb, B = g - b0 < f->mb ? g - b0 : f->mb;
        for (long r = 0; r < B; r++) f->idx[r] = f->perm[g0 + b0 + r];
        f->chunks[c - c0] = task_data_fill(f->train, f->idx, (int)B, f->bufs[c - c0]);
        for (int r = 0; r < (int)B; r++) counts[0] += row_labelled(f->chunks[c - c0], r);
    }
    comm_allreduce_sum_f64(f->comm, counts, 1);
    if (counts[0] == 0) comm_abort(f->comm, MHE_EXIT_INPUT, "finetune: a global batch holds no labelled row");
    model_zero_grad(f->model);
    double loss_sum = 0;
    for (int c = c0; c < c1; c++) {
        model_set_dropout_seed(f->model, rng_at(cfg->train.seed, 0xf1d0, (uint64_t)f->step, (uint64_t)c));
        model_forward_task(f->model, f->chunks[c - c0], 1);
        loss_sum += model_loss_sum(f->model);
        int overlap = c == c1 - 1 && grad_reducer_overlaps(f->reducer);
        model_set_backward_hook(f->model, overlap ? reducer_setup_stage_done : NULL, f->reducer);
        model_backward_task(f->model, counts[0]);
    }
    grad_reducer_finish(f->reducer);
    counts[1] = loss_sum;
    comm_allreduce_sum_f64(f->comm, counts + 1, 1);
    const double loss = counts[1] / counts[0];
    const double gnorm = sqrt(f->be->sum_squares(f->be, f->grads, f->table->total));
    const double lr = schedule_lr(&cfg->optim, f->step, f->total_steps);
    *loss_out = loss;
    *gnorm_out = gnorm;
    *lr_out = lr;
    if (!isfinite(loss) || !isfinite(gnorm)) return cfg->train.on_nonfinite == NONFINITE_STOP ? 2 : 1;
    const float coef = optim_clip_coef(gnorm, cfg->optim.clip_norm);
    if (f->dev_m) {
        optim_step_backend(f->be, &f->opt_state, &cfg->optim, f->table, f->params, f->grads, f->dev_m, f->dev_v,
                           f->dev_u, (float)lr, coef, NULL, NULL);
    } else {
        optim_step_scaled(&f->opt_state, &cfg->optim, f->table, f->params, f->grads, (float)lr, coef, NULL, NULL);
    }
    return 0;
}

static void log_step(Finetune *f, int epoch, double loss, double gnorm, double lr, double step_s, int skipped) {
    if (f->rank != 0) return;
    const double elapsed = omp_get_wtime() - f->t_start;
    fprintf(stderr, "step %lld/%lld | epoch %d | loss %.4f | lr %.3e | grad norm %.3f | %.2f s/step%s\n",
            (long long)f->step, (long long)f->total_steps, epoch, loss, lr, gnorm, step_s,
            skipped ? " | SKIPPED (non-finite)" : "");
    MetricValue v[] = {{"epoch", epoch, NULL},  {"loss", loss, NULL},          {"lr", lr, NULL},
                       {"grad_norm", gnorm, NULL}, {"elapsed_s", elapsed, NULL}, {"skipped", skipped, NULL}};
    check_write(f, metrics_write(&f->metrics, f->step, 6, v), "metrics.jsonl");
    const char *tags[] = {"train/loss", "train/lr", "train/grad_norm"};
    float vals[] = {(float)loss, (float)lr, (float)gnorm};
    check_write(f, tb_write_scalars(&f->tb, f->step, tb_wall_time(), 3, tags, vals), "tensorboard");
}

static void refuse_if(Finetune *f, int refuse, const char *why) {
    int r = refuse;
    comm_broadcast(f->comm, &r, sizeof r, 0);
    if (!r) return;
    if (f->rank == 0) fprintf(stderr, "mhetrain: %s\n", why);
    comm_finalize(f->comm);
    exit(MHE_EXIT_INPUT);
}

// Weights: resume (out_dir's own checkpoint) > train.init_from (encoder) > seeded random.
static void init_weights(Finetune *f) {
    const Config *cfg = f->cfg;
    model_init_params(f->model, cfg->train.seed);
    model_get_params(f->model, f->host_params);
    char *ckpt = NULL;
    if (strcmp(f->opt->resume, "none") != 0) {
        if (strcmp(f->opt->resume, "auto") == 0) {
            int found = 0;
            if (f->rank == 0) found = (ckpt = checkpoint_find_latest(cfg->train.out_dir)) != NULL;
            comm_broadcast(f->comm, &found, sizeof found, 0);
            if (found && f->rank != 0) ckpt = mhe_strdup("(rank 0)");
        } else {
            ckpt = checkpoint_resolve(f->opt->resume);
        }
    }
    if (ckpt) {
        CheckpointState st = {0};
        if (f->rank == 0) {
            checkpoint_load(ckpt, f->table, f->host_params, &f->opt_state, &st);
            fprintf(stderr, "resumed from %s (step %lld)\n", ckpt, (long long)st.step);
        }
        comm_broadcast(f->comm, f->opt_state.buf, 2 * f->table->total * sizeof(float), 0);
        comm_broadcast(f->comm, &f->opt_state.step, sizeof f->opt_state.step, 0);
        comm_broadcast(f->comm, &st.step, sizeof st.step, 0);
        f->step = st.step;
        checkpoint_state_free(&st);
        read_best_json(f);
    } else if (cfg->train.init_from && cfg->train.init_from[0]) {
        if (f->rank == 0) {
            char dir[4200];
            char *resolved = checkpoint_resolve(cfg->train.init_from);
            run_arch_check(resolved, f->config_yaml, "train.init_from");
            free(resolved);
            int ignored = finetune_load_encoder(cfg->train.init_from, f->table, f->host_params, dir, sizeof dir);
            fprintf(stderr, "initialised the encoder from %s (%d pretraining tensor%s ignored; task head seeded)\n", dir,
                    ignored, ignored == 1 ? "" : "s");
        }
    } else if (f->rank == 0) {
        fprintf(stderr, "random initialisation (train.init_from is empty)\n");
    }
    free(ckpt);
    comm_broadcast(f->comm, f->host_params, f->table->total * sizeof(float), 0);
    model_set_params(f->model, f->host_params);
    if (!is_host(f->be)) {
        f->be->upload(f->be, f->dev_m, f->opt_state.m, f->table->total * sizeof(float));
        f->be->upload(f->be, f->dev_v, f->opt_state.v, f->table->total * sizeof(float));
    }
}

static void setup(Finetune *f) {
    const Config *cfg = f->cfg;
    f->rank = comm_rank(f->comm);
    f->world = comm_world(f->comm);
    // Ranks agree on the config and the model's tensors before any check or collective that
    // could go differently on one of them (trainer.c does the same).
    f->config_yaml = config_to_yaml(cfg);
    if (cfg->task.type != TASK_NONE) {
        rank_agree_model(f->comm, f->config_yaml, cfg);
    } else {
        rank_agree(f->comm, "config", f->config_yaml);
    }
    if (cfg->task.type == TASK_NONE)
        mhe_fail("%s: finetune needs a task: section (task.type: classification, regression or span)", cfg->source);
    if (cfg->dist.zero) mhe_fail("%s: dist.zero: 1 is not supported by finetune (the task models are small)", cfg->source);
    f->G = cfg->train.global_batch;
    f->mb = cfg->train.micro_batch;
    if (f->G % f->mb != 0 || (f->G / f->mb) % f->world != 0)
        mhe_fail("%s: train.global_batch %d is not a multiple of %d workers x train.micro_batch %d", cfg->source, f->G,
                 f->world, f->mb);
    f->T = cfg->task.max_seq > 0 ? cfg->task.max_seq : cfg->data.seq_len;
    if (cfg->runtime.threads > 0) omp_set_num_threads(cfg->runtime.threads);
    char why[8192] = "";
    f->lock_fd = f->rank == 0 ? run_lock_take(cfg->train.out_dir, why, sizeof why) : -1;
    refuse_if(f, f->rank == 0 && f->lock_fd < 0, why);

    {  // the files behind the paths the config agreed on: a stale copy on one node differs here
        const char *keys[] = {"task_train_file", "task_dev_file", "tokenizer_file"};
        const char *paths[] = {cfg->task.train_file, cfg->task.dev_file, cfg->data.tokenizer};
        char *agree = rank_agree_files_text(f->config_yaml, 3, keys, paths);
        rank_agree(f->comm, "data", agree);
        free(agree);
    }
    f->tok = tokenizer_load(cfg->data.tokenizer);
    f->train = task_data_load(cfg, f->tok, TASK_SPLIT_TRAIN);
    f->dev = task_data_load(cfg, f->tok, TASK_SPLIT_DEV);
    const long n = task_data_features(f->train);
    if (n == 0) mhe_fail("%s: no training example", cfg->task.train_file);
    f->steps_per_epoch = (n + f->G - 1) / f->G;
    f->total_steps = f->steps_per_epoch * (cfg->task.epochs > 0 ? cfg->task.epochs : 1);
    if (cfg->train.steps > 0 && cfg->train.steps < f->total_steps) f->total_steps = cfg->train.steps;
    if (f->rank == 0) schedule_warmup_warning(&cfg->optim, f->total_steps, cfg->source);

    f->be = cfg->runtime.device == DEVICE_CUDA
                ? backend_cuda_create_for(comm_local_rank(f->comm), cfg->runtime.precision == PREC_BF16)
                : backend_cpu_create_for(cfg->runtime.threads, cfg->runtime.precision == PREC_BF16);
    f->model = model_create(cfg, f->be, f->mb, f->T);
    f->table = model_param_table(f->model);
    f->params = model_params(f->model);
    f->grads = model_grads(f->model);
    const size_t total = f->table->total;
    f->host_params = is_host(f->be) ? f->params : mhe_malloc(total * sizeof(float));
    optim_state_init(&f->opt_state, f->table, 0, total);
    if (!is_host(f->be)) {
        f->dev_m = f->be->alloc(f->be, total * sizeof(float));
        f->dev_v = f->be->alloc(f->be, total * sizeof(float));
        if (cfg->optim.name == OPT_LAMB) f->dev_u = f->be->alloc(f->be, total * sizeof(float));
        if (cfg->dist.backend != DIST_MPI && f->world > 1)
            f->dcomm = device_comm_create(comm_mpi_handle(f->comm), f->be, cfg->dist.timeout_s);
    }
    f->reducer = reducer_setup(f->comm, f->be, f->dcomm, f->table, f->grads, cfg, 0, &f->device, &f->pieces, 0);

    f->n_chunks_max = f->G / f->mb / f->world + 1;
    f->bufs = mhe_calloc((size_t)f->n_chunks_max, sizeof *f->bufs);
    for (int i = 0; i < f->n_chunks_max; i++) f->bufs[i] = task_batch_buf_new(f->mb, f->T);
    f->chunks = mhe_calloc((size_t)f->n_chunks_max, sizeof *f->chunks);
    f->perm = mhe_malloc((size_t)n * sizeof *f->perm);
    f->idx = mhe_malloc((size_t)f->mb * sizeof *f->idx);
    f->width = cfg->task.type == TASK_SPAN ? 2 * f->T : param_task_outputs(cfg);
    f->outputs = mhe_malloc(((size_t)task_data_features(f->dev) + 1) * f->width * sizeof(float));
    f->best = -INFINITY;
    init_weights(f);

    if (f->rank == 0) {
        mhe_mkdirs(cfg->train.out_dir);
        char path[4200];
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->train.out_dir);
        if (metrics_open(&f->metrics, path) != 0) mhe_fail("%s: cannot open: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/tensorboard", cfg->train.out_dir);
        mhe_mkdirs(path);
        if (tb_open(&f->tb, path, tb_wall_time()) != 0) mhe_fail("%s: cannot open an event file: %s", path, strerror(errno));
        fprintf(stderr,
                "finetune: %s %s, %zu parameters | task %s (%s) | %ld train features (%ld examples), %ld dev | "
                "workers %d x micro-batch %d, global batch %d | seq %d | %lld steps/epoch, %lld steps | device %s\n",
                arch_name(cfg->model.arch), attention_type_name(cfg->attention.type), total,
                cfg->task.format ? cfg->task.format : "?",
                cfg->task.type == TASK_SPAN ? "span" : cfg->task.type == TASK_REGRESSION ? "regression" : "classification",
                n, task_data_examples(f->train), task_data_features(f->dev), f->world, f->mb, f->G, f->T,
                (long long)f->steps_per_epoch, (long long)f->total_steps, f->be->name);
    }
    signals_install(&f->signals);
    f->t_start = omp_get_wtime();
}

static void teardown(Finetune *f) {
    signals_restore(&f->signals);
    run_lock_release(f->lock_fd);
    if (f->rank == 0) {
        metrics_close(&f->metrics);
        tb_close(&f->tb);
    }
    for (int i = 0; i < f->n_chunks_max; i++) task_batch_buf_free(f->bufs[i]);
    free(f->bufs);
    free(f->chunks);
    free(f->perm);
    free(f->idx);
    free(f->outputs);
    optim_state_free(&f->opt_state);
    grad_reducer_free(f->reducer);
    free(f->pieces);
    if (!is_host(f->be)) {
        free(f->host_params);
        device_comm_free(f->dcomm);
        f->be->free(f->be, f->dev_m);
        f->be->free(f->be, f->dev_v);
        f->be->free(f->be, f->dev_u);
    }
    model_free(f->model);
    f->be->destroy(f->be);
    task_data_free(f->train);
    task_data_free(f->dev);
    tokenizer_free(f->tok);
    free(f->config_yaml);
}

// finetune_result.json and the final line: the best evaluation and the trivial predictor's.
static void report(Finetune *f) {
    if (f->rank != 0) return;
    TaskScores triv;
    task_score_trivial(f->dev, f->train, &triv);
    const char *name = f->best_scores.name[f->best_scores.primary];
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/finetune_result.json", f->cfg->train.out_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "w");
    if (!fp) check_write(f, -1, "finetune_result.json");
    fprintf(fp, "{\"format\": \"%s\", \"attention\": \"%s\", \"init_from\": ",
            f->cfg->task.format ? f->cfg->task.format : "", attention_type_name(f->cfg->attention.type));
    json_string(fp, f->cfg->train.init_from);
    fprintf(fp, ", \"best_epoch\": %d, \"best_step\": %lld, \"steps\": %lld, \"metric\": \"%s\", \"value\": ",
            f->best_epoch, (long long)f->best_step, (long long)f->step, name);
    json_number(fp, f->best);
    fputs(", \"scores\": ", fp);
    write_scores_json(fp, &f->best_scores);
    fprintf(fp, ", \"trivial\": ");
    write_scores_json(fp, &triv);
    fputs("}\n", fp);
    check_write(f, fclose(fp) != 0 || rename(tmp, path) != 0 ? -1 : 0, "finetune_result.json");
    printf("finetune: best epoch %d (step %lld) dev %s %.4f | trivial %s %.4f | weights %s/best\n", f->best_epoch,
           (long long)f->best_step, name, f->best, triv.name[triv.primary], triv.value[triv.primary],
           f->cfg->train.out_dir);
    fflush(stdout);
}

int finetune_run(const Config *cfg, Comm *comm, const FinetuneOptions *opt) {
    Finetune f = {.cfg = cfg, .opt = opt, .comm = comm};
    setup(&f);
    const int log_every = cfg->train.log_every > 0 ? cfg->train.log_every : 1;
    int status = 0;
    int64_t shuffled = -1;  // the epoch f.perm holds (a resumed run may start mid-epoch)
    while (f.step < f.total_steps) {
        const int64_t epoch0 = f.step / f.steps_per_epoch;
        if (epoch0 != shuffled) shuffle(&f, shuffled = epoch0);
        double t0 = omp_get_wtime(), loss, gnorm, lr;
        int r = train_step(&f, &loss, &gnorm, &lr);
        if (r == 2) {
            if (f.rank == 0)
                fprintf(stderr, "mhetrain: step %lld: non-finite %s (train.on_nonfinite: stop)\n", (long long)f.step + 1,
                        isfinite(loss) ? "gradient norm" : "loss");
            status = 1;
            break;
        }
        if (r == 1) model_zero_grad(f.model);
        f.step++;
        f.diverged_at = isfinite(loss) ? 0 : f.diverged_at ? f.diverged_at : f.step;
        const int epoch = (int)((f.step - 1) / f.steps_per_epoch) + 1;  // 1-based, of the step just done
        if (r == 1 || f.step % log_every == 0 || f.step == f.total_steps)
            log_step(&f, epoch, loss, gnorm, lr, omp_get_wtime() - t0, r == 1);
        const int epoch_end = f.step % f.steps_per_epoch == 0 || f.step == f.total_steps;
        if (epoch_end || (cfg->train.eval_every > 0 && f.step % cfg->train.eval_every == 0))
            eval_and_keep_best(&f, epoch);
        int64_t stop = signals_pending(&f.signals);
        comm_allreduce_max_i64(comm, &stop, 1);
        const int stop_here = stop || (opt->stop_after > 0 && f.step == opt->stop_after);
        if (stop_here || epoch_end) save(&f, cfg->train.out_dir, cfg->train.keep_last);
        if (stop_here) {
            if (f.rank == 0)
                fprintf(stderr, "stopping after step %lld (%s); run the same command to resume\n", (long long)f.step,
                        stop ? "signal" : "--stop-after");
            teardown(&f);
            return stop ? 128 + (int)stop : 0;
        }
    }
    if (status == 0) report(&f);
    if (status == 0) status = divergence_check(f.rank, f.diverged_at, f.last_dev_loss, f.step);
    teardown(&f);
    return status;
}
