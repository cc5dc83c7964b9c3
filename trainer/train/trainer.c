// Pretraining on the run engine (run_engine.h): the batch source is the loader's shards (this
// rank's micro-batches of the global batch), the loss the model's MLM/CLM objective, the
// evaluation the validation split's loss, accuracy or perplexity.
#include "trainer/train/trainer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/rng.h"
#include "data/loader.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train/divergence.h"
#include "trainer/train/evaluate.h"
#include "trainer/train/peak_track.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/run_engine.h"

typedef struct {
    Loader *train, *valid;
    LoaderBatch *micro;         // this rank's micro-batches of the current step
    int n_micro;
    PeakTrack peak;             // MFU's nominal peak and the measured matmul ceiling
    double flops_per_step;
    float *eval_logits;
} Pretrain;

static int64_t total_steps_of(const Config *cfg) {
    if (cfg->train.steps > 0) return cfg->train.steps;
    int64_t per_step = (int64_t)cfg->train.global_batch * cfg->data.seq_len;
    return (cfg->train.tokens + per_step - 1) / per_step;
}

static void open_data(void *self, RunEngine *e) {
    Pretrain *p = self;
    const Config *cfg = e->cfg;
    // Training needs logits only where a label is (MLM: ~15% of positions); eval turns them on.
    model_set_full_logits(e->model, 0);
    if (e->rank == 0) config_data_warnings(cfg);
    p->train = loader_open_config(cfg, false);
    p->valid = cfg->data.n_valid > 0 ? loader_open_config(cfg, true) : NULL;
    char *agree = rank_agree_text(e->config_yaml, e->table, p->train, p->valid);
    // The tokenizer decides the special ids the masks avoid: its bytes too, not only its path.
    char *with_tok = rank_agree_files_text(agree, 1, (const char *const[]){"tokenizer_file"},
                                           (const char *const[]){cfg->data.tokenizer});
    rank_agree(e->comm, "data", with_tok);
    free(with_tok);
    free(agree);
    p->n_micro = loader_micro_batches(p->train, e->world);
    p->micro = mhe_calloc((size_t)p->n_micro, sizeof *p->micro);
    for (int i = 0; i < p->n_micro; i++) p->micro[i] = loader_batch_alloc(p->train);
    if (p->valid) {
        LoaderBatch probe = loader_batch_alloc(p->valid);
        p->eval_logits = mhe_malloc((size_t)probe.batch * probe.seq_len * cfg->model.vocab_size * sizeof(float));
        loader_batch_free(&probe);
    }
    e->total_steps = total_steps_of(cfg);
}

static void init_from(void *self, RunEngine *e, const char *dir) {
    (void)self;
    checkpoint_load_weights(dir, e->table, e->host_params);
    fprintf(stderr, "initialised weights from %s\n", dir);
}

// batches <= 0: the whole validation split (the run's final, comparable number).  Returns the
// validation loss (0 without a validation split).
static double evaluate(Pretrain *p, RunEngine *e, int batches) {
    if (!p->valid) return 0;
    const Config *cfg = e->cfg;
    EvalResult r = evaluate_split(e->model, p->valid, e->comm, batches, p->eval_logits);
    peak_track_remeasure(&p->peak, e->be, e->comm);  // a busy start must not fix the ceiling low
    const char *scope = batches <= 0 ? " (whole split)" : "";
    if (e->rank != 0) return r.loss;
    int mlm = cfg->objective.type == OBJ_MLM;
    char loss_text[48];
    divergence_format(loss_text, sizeof loss_text, r.loss, 4);
    if (mlm)
        fprintf(stderr, "eval step %lld%s: valid loss %s | masked-token accuracy %.4f | %lld tokens\n",
                (long long)e->step, scope, loss_text, r.accuracy, (long long)r.tokens);
    else
        fprintf(stderr, "eval step %lld%s: valid loss %s | perplexity %.2f | %lld tokens\n", (long long)e->step,
                scope, loss_text, r.perplexity, (long long)r.tokens);
    const int64_t diverged = divergence_step(e->diverged_at, r.loss, e->step);
    double tokens_seen = (double)e->step * cfg->train.global_batch * cfg->data.seq_len;
    MetricValue v[] = {{"split", 0, "valid"},
                       {"valid_loss", r.loss, NULL},
                       {mlm ? "valid_accuracy" : "valid_perplexity", mlm ? r.accuracy : r.perplexity, NULL},
                       {"tokens_seen", tokens_seen, NULL},
                       {"valid_tokens", (double)r.tokens, NULL},
                       {"whole_split", batches <= 0, NULL},
                       {"diverged_at_step", (double)diverged, NULL}};
    const char *tags[] = {"valid/loss", mlm ? "valid/accuracy" : "valid/perplexity"};
    float vals[] = {(float)r.loss, (float)(mlm ? r.accuracy : r.perplexity)};
    run_record(e, diverged ? 7 : 6, v, 2, tags, vals);
    return r.loss;
}

// The banner, and the untrained model's validation loss: the baseline progress is read against.
static void begin(void *self, RunEngine *e) {
    Pretrain *p = self;
    const Config *cfg = e->cfg;
    const int B = cfg->train.micro_batch, T = cfg->data.seq_len;
    p->flops_per_step = model_step_flops(e->model, B, T) * p->n_micro * e->world;
    // What MFU is counted against (DESIGN.md §9): the nominal peak of the cores, or the GPU's
    // dense data-sheet peak, at the run's precision; the CPU's measured ceiling beside it.
    peak_track_start(&p->peak, e->be, e->comm,
                     run_is_host(e) ? 0
                                    : backend_cuda_peak_flops(comm_local_rank(e->comm),
                                                              cfg->runtime.precision == PREC_BF16, NULL) / 1e9);
    e->t_start = omp_get_wtime();  // elapsed_s counts from here: the measurement above is set-up
    if (e->rank == 0) {
        char peak_text[384];
        const size_t opt_bytes = 2 * (e->zero->end - e->zero->begin) * sizeof(float);
        fprintf(stderr,
                "model: %s %s, %zu parameters | workers %d x micro-batch %d x %d accumulation = global batch %d | "
                "seq %d | steps %lld\n",
                arch_name(cfg->model.arch), attention_type_name(cfg->attention.type), e->table->total, e->world, B,
                p->n_micro, cfg->train.global_batch, T, (long long)e->total_steps);
        fprintf(stderr,
                "memory per worker: parameters+gradients %.1f MiB, optimizer %.1f MiB (ZeRO-%d: %zu bytes), "
                "activations %.1f MiB | %s\n"
                "device %s | gradients all-reduced by %s\n",
                model_state_bytes(e->model) / 1048576.0, opt_bytes / 1048576.0, e->zero->enabled, opt_bytes,
                model_arena_bytes(e->model) / 1048576.0, peak_track_describe(&p->peak, peak_text, sizeof peak_text),
                e->be->name,
                grad_reducer_describe(e->reducer));
    }
    if (e->step == 0 && cfg->train.eval_every > 0) evaluate(p, e, cfg->train.eval_batches);
}

static int batch(void *self, RunEngine *e, double *labelled) {
    Pretrain *p = self;
    for (int i = 0; i < p->n_micro; i++) {
        loader_batch(p->train, e->step, e->rank, e->world, i, &p->micro[i]);
        const int32_t *lab = p->micro[i].labels;
        for (int j = 0; j < p->micro[i].batch * p->micro[i].seq_len; j++) *labelled += lab[j] >= 0;
    }
    return p->n_micro;
}

static void empty_batch(void *self, RunEngine *e, char *msg, size_t len) {
    (void)self;
    const Config *cfg = e->cfg;
    snprintf(msg, len, "step %lld: the global batch holds no trainable token (only padding?) in data.train %s",
             (long long)e->step + 1, cfg->data.n_train > 0 ? cfg->data.train[0] : "");
}

static void forward(void *self, RunEngine *e, int i) {
    Pretrain *p = self;
    const LoaderBatch *b = &p->micro[i];
    // Dropout keyed by the global micro-batch: the same masks whatever the worker count.
    model_set_dropout_seed(e->model, rng_at(e->cfg->train.seed, 0xd809, (uint64_t)e->step,
                                            (uint64_t)(e->rank * p->n_micro + i)));
    model_forward(e->model, b->input_ids, b->token_type_ids, b->attention_mask, b->labels, b->batch, b->seq_len, 1);
}

static void log_step(void *self, RunEngine *e, const StepResult *r) {
    Pretrain *p = self;
    const Config *cfg = e->cfg;
    const double tokens = (double)cfg->train.global_batch * cfg->data.seq_len;
    const double tps = r->step_s > 0 ? tokens / r->step_s : 0;
    const double achieved = r->step_s > 0 ? p->flops_per_step / r->step_s / 1e9 : 0;
    const double mfu = peak_track_mfu(&p->peak, achieved);
    Progress pr = {.step = e->step,
                   .total_steps = e->total_steps,
                   .start_step = e->start_step,
                   .elapsed_s = omp_get_wtime() - e->t_start,
                   .loss = r->loss,
                   .lr = r->lr,
                   .grad_norm = r->grad_norm,
                   .tokens_per_s = tps,
                   .mfu = mfu,
                   .ceiling_gflops = p->peak.ceiling};
    char line[512];
    progress_format(line, sizeof line, &pr);
    fprintf(stderr, "%s%s\n", line, r->skipped ? " | SKIPPED (non-finite)" : "");
    MetricValue v[] = {{"loss", r->loss, NULL},           {"lr", r->lr, NULL},
                       {"grad_norm", r->grad_norm, NULL}, {"tokens_per_s", tps, NULL},
                       {"mfu", mfu, NULL},                {"elapsed_s", pr.elapsed_s, NULL},
                       {"tokens_seen", e->step * tokens, NULL}, {"skipped", r->skipped, NULL},
                       {"matmul_ceiling_gflops", p->peak.ceiling, NULL}};
    const char *tags[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s"};
    float vals[] = {(float)r->loss, (float)r->lr, (float)r->grad_norm, (float)tps};
    run_record(e, 9, v, 4, tags, vals);
}

static int after_step(void *self, RunEngine *e) {
    const TrainConfig *tc = &e->cfg->train;
    if (tc->eval_every > 0 && e->step % tc->eval_every == 0 && e->step < e->total_steps)
        evaluate(self, e, tc->eval_batches);
    return tc->checkpoint_every > 0 && e->step % tc->checkpoint_every == 0;
}

static void finish(void *self, RunEngine *e) { e->final_loss = evaluate(self, e, e->cfg->train.final_eval_batches); }

static void close_data(void *self, RunEngine *e) {
    (void)e;
    Pretrain *p = self;
    for (int i = 0; i < p->n_micro; i++) loader_batch_free(&p->micro[i]);
    free(p->micro);
    free(p->eval_logits);
    loader_close(p->train);
    if (p->valid) loader_close(p->valid);
}

int trainer_run(const Config *cfg, Comm *comm, const TrainOptions *opt) {
    Pretrain p = {0};
    RunJob job = {.self = &p, .seq_len = cfg->data.seq_len, .backward = model_backward,
                  .open = open_data, .init_from = init_from, .begin = begin, .finish = finish, .close = close_data,
                  .batch = batch, .empty_batch = empty_batch, .forward = forward, .log = log_step,
                  .after_step = after_step};
    return run_engine(cfg, comm, opt, &job);
}
