#include "trainer/train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm/grad_reducer.h"
#include "common/error.h"
#include "common/fnv1a.h"
#include "common/fs.h"
#include "common/rng.h"
#include "data/loader.h"
#include "kernels/backend_info.h"
#include "kernels/gpu_peak.h"
#include "kernels/ops.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train/evaluate.h"
#include "trainer/io/metrics.h"
#include "trainer/io/run_lock.h"
#include "trainer/model/model.h"
#include "trainer/train/optim.h"
#include "trainer/train/reducer_setup.h"
#include "trainer/train/peak.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/run_identity.h"
#include "trainer/train/schedule.h"
#include "trainer/train/signals.h"
#include "trainer/io/tensorboard.h"
#include "trainer/train/zero.h"

typedef struct {
    const Config *cfg;
    const TrainOptions *opt;
    Comm *comm;
    int rank, world;
    Backend *be;
    Model *model;
    const ParamTable *table;
    Loader *train, *valid;
    LoaderBatch *micro;         // this rank's micro-batches of the current step
    int n_micro;
    float *params, *grads;      // backend memory
    float *host_params;         // host mirror (the CPU backend's own buffer)
    float *dev_m, *dev_v, *dev_u;  // device optimizer state (non-host backends)
    DeviceComm *dcomm;          // NCCL between GPUs (dist.backend auto|nccl on a device)
    OptimState opt_state;       // this rank's range (ZeRO-1) or the whole buffer
    GradReducer *reducer;       // MPI buckets / ZeRO-1 / MPI staged / NCCL: chosen in setup
    const GradShards *zero;     // the reducer's ranges: this rank's optimizer range
    GradDevice device;          // device gradients: the backend's copies, NCCL when present
    GradPiece *pieces;          // the parameter table as the reducer sees it
    int64_t step, total_steps, start_step;
    double peak_gflops;         // all ranks together; <= 0 unknown
    int said_over;              // the GPU outran its data sheet: said once
    const char *peak_card;      // a GPU run: the card of rank 0's data-sheet peak; NULL on the CPU or unknown
    double flops_per_step;
    double t_start;
    MetricsLog metrics;
    TbWriter tb;
    SignalWatch signals;
    char *config_yaml;
    float *eval_logits;
    int64_t replica_checks;     // logging steps at which all ranks compared weight checksums
    int lock_fd;                // rank 0: flock on out_dir/.lock (-1 elsewhere)
    int64_t nonfinite_run;      // consecutive non-finite steps so far
} Trainer;

// Rank 0's outputs must be written: a run whose metrics or events are lost is not a success.
static void check_write(Trainer *t, int rc, const char *what) {
    if (rc == 0) return;
    char msg[4352];
    snprintf(msg, sizeof msg, "%s/%s: write failed: %s; stopping (the last checkpoint is kept)", t->cfg->train.out_dir,
             what, strerror(errno));
    comm_abort(t->comm, 1, msg);
}

// A refusal decided on rank 0 (lock held, unusable checkpoints): every rank learns it, rank 0
// prints the one line, and all leave with the input-error status.
static void refuse_if(Trainer *t, int refuse, const char *why) {
    int r = refuse;
    comm_broadcast(t->comm, &r, sizeof r, 0);
    if (!r) return;
    if (t->rank == 0) fprintf(stderr, "mhetrain: %s\n", why);
    comm_finalize(t->comm);
    exit(MHE_EXIT_INPUT);
}

static int is_host_backend(const Backend *be) { return strcmp(be->name, "cpu") == 0; }




static Backend *make_backend(const Config *cfg, Comm *comm) {
    if (cfg->runtime.device == DEVICE_CUDA)
        return backend_cuda_create_for(comm_local_rank(comm), cfg->runtime.precision == PREC_BF16);
    return backend_cpu_create_for(cfg->runtime.threads, cfg->runtime.precision == PREC_BF16);
}

static int64_t total_steps_of(const Config *cfg) {
    if (cfg->train.steps > 0) return cfg->train.steps;
    int64_t per_step = (int64_t)cfg->train.global_batch * cfg->data.seq_len;
    return (cfg->train.tokens + per_step - 1) / per_step;
}

// Rank 0 reads the checkpoint; everyone receives the weights, optimizer state and position.
static void restore(Trainer *t, const char *dir, int weights_only) {
    CheckpointState st = {0};
    // Checkpoints hold the whole optimizer state; under ZeRO-1 rank 0 reads it and scatters.
    OptimState full = {0};
    if (t->zero->enabled && !weights_only && t->rank == 0) optim_state_init(&full, t->table, 0, t->table->total);
    if (t->rank == 0) {
        if (weights_only) {
            checkpoint_load_weights(dir, t->table, t->host_params);
        } else {
            checkpoint_load(dir, t->table, t->host_params, t->zero->enabled ? &full : &t->opt_state, &st);
            fprintf(stderr, "resumed from %s (step %lld, saved by %d worker%s)\n", dir, (long long)st.step,
                    st.world_size, st.world_size == 1 ? "" : "s");
        }
    }
    comm_broadcast(t->comm, t->host_params, t->table->total * sizeof(float), 0);
    if (!weights_only && t->zero->enabled) {
        zero_scatter_state(t->zero, t->comm, &full, &t->opt_state);
        comm_broadcast(t->comm, &st.step, sizeof st.step, 0);
        t->step = st.step;
    } else if (!weights_only) {
        comm_broadcast(t->comm, t->opt_state.buf, 2 * (t->opt_state.end - t->opt_state.begin) * sizeof(float), 0);
        comm_broadcast(t->comm, &t->opt_state.step, sizeof t->opt_state.step, 0);
        comm_broadcast(t->comm, &st.step, sizeof st.step, 0);
        t->step = st.step;
    }
    if (!is_host_backend(t->be)) {
        t->be->upload(t->be, t->params, t->host_params, t->table->total * sizeof(float));
        size_t bytes = (t->opt_state.end - t->opt_state.begin) * sizeof(float);
        t->be->upload(t->be, t->dev_m, t->opt_state.m, bytes);
        t->be->upload(t->be, t->dev_v, t->opt_state.v, bytes);
    }
    if (full.buf) optim_state_free(&full);
    checkpoint_state_free(&st);
}

static void save(Trainer *t) {
    if (!is_host_backend(t->be)) {
        t->be->download(t->be, t->host_params, t->params, t->table->total * sizeof(float));
        size_t bytes = (t->opt_state.end - t->opt_state.begin) * sizeof(float);
        t->be->download(t->be, t->opt_state.m, t->dev_m, bytes);
        t->be->download(t->be, t->opt_state.v, t->dev_v, bytes);
    }
    OptimState full = {0};
    const OptimState *opt = &t->opt_state;
    if (t->zero->enabled) {
        if (t->rank == 0) optim_state_init(&full, t->table, 0, t->table->total);
        zero_gather_state(t->zero, t->comm, &t->opt_state, &full);
        opt = &full;
    }
    if (t->rank == 0) {
        CheckpointState st = {
            .step = t->step,
            .consumed_samples = t->step * t->cfg->train.global_batch,
            .rng_seed = t->cfg->train.seed,
            .rng_offset = (uint64_t)t->step,
            .loss_scale = 1.0,
            .world_size = t->world,
            .config_yaml = t->config_yaml,
        };
        if (checkpoint_save(t->cfg->train.out_dir, &st, t->table, t->host_params, opt,
                            t->cfg->train.keep_last) != 0)
            comm_abort(t->comm, 1, "saving the checkpoint failed; the previous checkpoint is intact");
        fprintf(stderr, "checkpoint: %s/checkpoints/step_%08lld\n", t->cfg->train.out_dir, (long long)t->step);
    }
    if (full.buf) optim_state_free(&full);
    comm_barrier_allowing(t->comm, checkpoint_save_allowance_s(t->table->total), "barrier after the checkpoint");
}

static void setup(Trainer *t) {
    const Config *cfg = t->cfg;
    t->rank = comm_rank(t->comm);
    t->world = comm_world(t->comm);
    // Before anything that can differ between ranks reaches a collective (the lock's broadcast
    // is the first): the config and the model's tensors, then, once opened, the data.
    t->config_yaml = config_to_yaml(cfg);
    rank_agree_model(t->comm, t->config_yaml, cfg);
    if (cfg->train.global_batch % (t->world * cfg->train.micro_batch) != 0)
        mhe_fail("%s: train.global_batch %d is not a multiple of %d workers x train.micro_batch %d", cfg->source,
                 cfg->train.global_batch, t->world, cfg->train.micro_batch);
    if (cfg->runtime.threads > 0) omp_set_num_threads(cfg->runtime.threads);
    char why[8192] = "";
    t->lock_fd = t->rank == 0 ? run_lock_take(cfg->train.out_dir, why, sizeof why) : -1;
    refuse_if(t, t->rank == 0 && t->lock_fd < 0, why);
    t->be = make_backend(cfg, t->comm);
    // Optimizer state in the model's memory: m and v (host), or m, v and the update buffer on
    // a device; a ZeRO-1 rank holds its 1/world share.
    double state = (is_host_backend(t->be) ? 2.0 : 3.0) / (cfg->dist.zero == 1 ? t->world : 1);
    t->model = model_create_with_state(cfg, t->be, cfg->train.micro_batch, cfg->data.seq_len, state);
    t->table = model_param_table(t->model);
    // Training needs logits only where a label is (MLM: ~15% of positions); eval turns them on.
    model_set_full_logits(t->model, 0);
    t->params = model_params(t->model);
    t->grads = model_grads(t->model);
    t->host_params = is_host_backend(t->be) ? t->params : mhe_malloc(t->table->total * sizeof(float));
    if (t->rank == 0) config_data_warnings(cfg);
    t->train = loader_open_config(cfg, false);
    t->valid = cfg->data.n_valid > 0 ? loader_open_config(cfg, true) : NULL;
    char *agree = rank_agree_text(t->config_yaml, t->table, t->train, t->valid);
    // The tokenizer decides the special ids the masks avoid: its bytes too, not only its path.
    char *with_tok = rank_agree_files_text(agree, 1, (const char *const[]){"tokenizer_file"},
                                           (const char *const[]){cfg->data.tokenizer});
    rank_agree(t->comm, "data", with_tok);
    free(with_tok);
    free(agree);
    t->n_micro = loader_micro_batches(t->train, t->world);
    t->micro = mhe_calloc((size_t)t->n_micro, sizeof *t->micro);
    for (int i = 0; i < t->n_micro; i++) t->micro[i] = loader_batch_alloc(t->train);
    const int host = is_host_backend(t->be);
    if (!host && cfg->dist.zero == 1 && cfg->dist.backend == DIST_MPI && t->world > 1)
        mhe_fail("%s: dist.zero: 1 with runtime.device: cuda reduces through NCCL: set dist.backend to auto or nccl",
                 cfg->source);
    if (!host && cfg->dist.backend != DIST_MPI && t->world > 1)
        t->dcomm = device_comm_create(comm_mpi_handle(t->comm), t->be, cfg->dist.timeout_s);
    t->reducer = reducer_setup(t->comm, t->be, t->dcomm, t->table, t->grads, cfg, cfg->dist.zero == 1, &t->device,
                               &t->pieces, 0);
    grad_reducer_set_overlap(t->reducer, !t->opt->no_overlap);
    t->zero = grad_reducer_shards(t->reducer);
    optim_state_init(&t->opt_state, t->table, t->zero->begin, t->zero->end);
    if (!host) {
        size_t bytes = (t->zero->end - t->zero->begin) * sizeof(float);
        t->dev_m = t->be->alloc(t->be, bytes);
        t->dev_v = t->be->alloc(t->be, bytes);
        t->dev_u = t->be->alloc(t->be, bytes);
    }
    t->total_steps = total_steps_of(cfg);

    // Weights: resume > init_from > fresh initialisation (identical on every rank by seed).
    model_init_params(t->model, cfg->train.seed);
    if (!is_host_backend(t->be)) model_get_params(t->model, t->host_params);
    char *ckpt = NULL;
    if (strcmp(t->opt->resume, "none") != 0) {
        if (strcmp(t->opt->resume, "auto") == 0) {
            if (t->rank == 0) ckpt = checkpoint_find_latest(cfg->train.out_dir);
            // Checkpoints that all fail validation are the user's to repair or discard: starting
            // from step 0 over them would later prune them away.
            char names[4096] = "";
            int unusable = t->rank == 0 && !ckpt && checkpoint_list(cfg->train.out_dir, names, sizeof names) > 0;
            if (unusable)
                snprintf(why, sizeof why,
                         "%s: no valid checkpoint among %s (reasons above); refusing to start over them -- "
                         "repair or move them, or pass --resume none to start afresh deliberately",
                         cfg->train.out_dir, names);
            refuse_if(t, unusable, why);
            int found = ckpt != NULL;
            comm_broadcast(t->comm, &found, sizeof found, 0);
            if (found && t->rank != 0) ckpt = mhe_strdup("(rank 0)");
        } else {
            ckpt = checkpoint_resolve(t->opt->resume);
        }
    }
    if (ckpt) restore(t, ckpt, 0);
    else if (cfg->train.init_from && cfg->train.init_from[0]) {
        char *dir = checkpoint_resolve(cfg->train.init_from);
        if (t->rank == 0) {  // equal shapes do not make the same model (mhe_mul vs mhe_add, ln_eps)
            char path[4200];
            snprintf(path, sizeof path, "%s/config.yaml", dir);
            char *saved = mhe_read_file(path, NULL);
            char *arch = run_arch_diff(saved, t->config_yaml), *msg = NULL;
            if (arch) {
                msg = mhe_malloc(strlen(path) + strlen(arch) + 256);
                sprintf(msg, "%s: train.init_from: the checkpoint's model differs from this run's (%s; checkpoint -> "
                             "this run): model.* and attention.* must match the checkpoint's config.yaml", path, arch);
            }
            refuse_if(t, arch != NULL, msg);
            free(msg);
            free(arch);
            free(saved);
        } else {
            refuse_if(t, 0, why);
        }
        restore(t, dir, 1);
        if (t->rank == 0) fprintf(stderr, "initialised weights from %s\n", dir);
        free(dir);
    }
    RunDiff diff = {NULL, NULL};
    if (ckpt && t->rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.yaml", ckpt);
        char *saved = mhe_read_file(path, NULL);
        diff = run_identity_diff(saved, t->config_yaml);
        free(saved);
        if (diff.identity && !t->opt->allow_config_change)
            snprintf(why, sizeof why,
                     "%s: resuming would change the run's data order or model (%s); pass --allow-config-change "
                     "to resume anyway (the change is recorded in metrics.jsonl), or use another train.out_dir",
                     ckpt, diff.identity);
    }
    refuse_if(t, t->rank == 0 && diff.identity && !t->opt->allow_config_change, why);
    free(ckpt);
    t->start_step = t->step;

    const int B = cfg->train.micro_batch, T = cfg->data.seq_len;
    t->flops_per_step = model_step_flops(t->model, B, T) * t->n_micro * t->world;
    // The ceiling MFU is counted against (DESIGN.md §9): on the CPU the best matmul rate this
    // process reaches, on a GPU the card's dense peak at the run's precision.
    // A GPU without a row in the table has no MFU (never an in-process probe).
    double mine = host ? peak_matmul_ceiling(t->be, NULL)
                       : backend_cuda_peak_flops(comm_local_rank(t->comm), cfg->runtime.precision == PREC_BF16,
                                                 &t->peak_card) / 1e9;
    // Unknown on any rank is unknown for the job: a partial sum would understate the peak.
    double unknown = mine > 0 ? 0 : 1;
    comm_allreduce_sum_f64(t->comm, &mine, 1);
    comm_allreduce_sum_f64(t->comm, &unknown, 1);
    t->peak_gflops = unknown > 0 ? 0 : mine;
    char peak_line[160];
    if (host)
        snprintf(peak_line, sizeof peak_line, "matmul ceiling %.1f GFLOP/s", t->peak_gflops);
    else if (t->peak_gflops > 0)
        snprintf(peak_line, sizeof peak_line, "MFU peak %.1f GFLOP/s (%d x %s, dense %s)", t->peak_gflops, t->world,
                 t->peak_card, cfg->runtime.precision == PREC_BF16 ? "bf16" : "fp32");
    else
        snprintf(peak_line, sizeof peak_line, "MFU n/a (a GPU without a data-sheet peak: set MHE_GPU_PEAK_TFLOPS)");
    if (t->rank == 0) {
        mhe_mkdirs(cfg->train.out_dir);
        char path[4096];
        snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->train.out_dir);
        if (metrics_open(&t->metrics, path) != 0) mhe_fail("%s: cannot open: %s", path, strerror(errno));
        snprintf(path, sizeof path, "%s/tensorboard", cfg->train.out_dir);
        mhe_mkdirs(path);
        if (tb_open(&t->tb, path, tb_wall_time()) != 0) mhe_fail("%s: cannot open an event file: %s", path, strerror(errno));
        if (diff.harmless) fprintf(stderr, "mhetrain: resuming with changed settings (harmless): %s\n", diff.harmless);
        if (diff.identity) {
            fprintf(stderr, "mhetrain: --allow-config-change: resuming with a changed run identity: %s\n", diff.identity);
            MetricValue v[] = {{"event", 0, "config_change"}, {"changes", 0, diff.identity}};
            check_write(t, metrics_write(&t->metrics, t->step, 2, v), "metrics.jsonl");
        }
            fprintf(stderr,
                "model: %s %s, %zu parameters | workers %d x micro-batch %d x %d accumulation = global batch %d | "
                "seq %d | steps %lld\n",
                arch_name(cfg->model.arch), attention_type_name(cfg->attention.type), t->table->total, t->world, B,
                t->n_micro, cfg->train.global_batch, T, (long long)t->total_steps);
        fprintf(stderr,
                "memory per worker: parameters+gradients %.1f MiB, optimizer %.1f MiB (ZeRO-%d: %zu bytes), "
                "activations %.1f MiB | %s\n"
                "device %s | gradients all-reduced by %s\n",
                model_state_bytes(t->model) / 1048576.0,
                2.0 * (t->zero->end - t->zero->begin) * sizeof(float) / 1048576.0, t->zero->enabled,
                2 * (t->zero->end - t->zero->begin) * sizeof(float),
                model_arena_bytes(t->model) / 1048576.0, peak_line, t->be->name,
                grad_reducer_describe(t->reducer));
    }
    run_diff_free(&diff);
    if (t->valid) {
        LoaderBatch probe = loader_batch_alloc(t->valid);
        t->eval_logits = mhe_malloc((size_t)probe.batch * probe.seq_len * cfg->model.vocab_size * sizeof(float));
        loader_batch_free(&probe);
    }
    signals_install(&t->signals);
    t->t_start = omp_get_wtime();
}

static void teardown(Trainer *t) {
    signals_restore(&t->signals);
    run_lock_release(t->lock_fd);
    if (t->rank == 0 && t->replica_checks > 0)
        fprintf(stderr, "replicas identical at all %lld checks (%d workers)\n", (long long)t->replica_checks, t->world);
    if (t->rank == 0) {
        metrics_close(&t->metrics);
        tb_close(&t->tb);
    }
    for (int i = 0; i < t->n_micro; i++) loader_batch_free(&t->micro[i]);
    free(t->micro);
    free(t->eval_logits);
    optim_state_free(&t->opt_state);
    grad_reducer_free(t->reducer);
    free(t->pieces);
    loader_close(t->train);
    if (t->valid) loader_close(t->valid);
    if (!is_host_backend(t->be)) {
        free(t->host_params);
        device_comm_free(t->dcomm);
        t->be->free(t->be, t->dev_m);
        t->be->free(t->be, t->dev_v);
        t->be->free(t->be, t->dev_u);
    }
    model_free(t->model);
    t->be->destroy(t->be);
    free(t->config_yaml);
}

// batches <= 0: the whole validation split (the run's final, comparable number).
static void evaluate(Trainer *t, int batches) {
    if (!t->valid) return;
    const Config *cfg = t->cfg;
    EvalResult r = evaluate_split(t->model, t->valid, t->comm, batches, t->eval_logits);
    const char *scope = batches <= 0 ? " (whole split)" : "";
    if (t->rank != 0) return;
    int mlm = cfg->objective.type == OBJ_MLM;
    if (mlm)
        fprintf(stderr, "eval step %lld%s: valid loss %.4f | masked-token accuracy %.4f | %lld tokens\n",
                (long long)t->step, scope, r.loss, r.accuracy, (long long)r.tokens);
    else
        fprintf(stderr, "eval step %lld%s: valid loss %.4f | perplexity %.2f | %lld tokens\n", (long long)t->step,
                scope, r.loss, r.perplexity, (long long)r.tokens);
    double tokens_seen = (double)t->step * cfg->train.global_batch * cfg->data.seq_len;
    MetricValue v[] = {{"split", 0, "valid"},
                       {"valid_loss", r.loss, NULL},
                       {mlm ? "valid_accuracy" : "valid_perplexity", mlm ? r.accuracy : r.perplexity, NULL},
                       {"tokens_seen", tokens_seen, NULL},
                       {"valid_tokens", (double)r.tokens, NULL},
                       {"whole_split", batches <= 0, NULL}};
    check_write(t, metrics_write(&t->metrics, t->step, 6, v), "metrics.jsonl");
    const char *tags[] = {"valid/loss", mlm ? "valid/accuracy" : "valid/perplexity"};
    float vals[] = {(float)r.loss, (float)(mlm ? r.accuracy : r.perplexity)};
    check_write(t, tb_write_scalars(&t->tb, t->step, tb_wall_time(), 2, tags, vals), "tensorboard");
}


// LAMB's per-tensor norms when tensors straddle ZeRO shards.
static void sum_across_ranks(double *norms, int n, void *comm) { comm_allreduce_sum_f64(comm, norms, (size_t)n); }

// One optimizer step.  Returns 0 applied, 1 skipped (non-finite), 2 stop (non-finite, policy stop).
static int train_step(Trainer *t, double *loss_out, double *gnorm_out, double *lr_out) {
    const Config *cfg = t->cfg;
    // Every micro-batch of this rank first: the global count of labelled positions divides every
    // gradient, so accumulation over micro-batches and workers gives the global-batch mean.
    double counts[2] = {0, 0};  // labelled positions, loss sum
    for (int i = 0; i < t->n_micro; i++) {
        loader_batch(t->train, t->step, t->rank, t->world, i, &t->micro[i]);
        const int32_t *lab = t->micro[i].labels;
        for (int j = 0; j < t->micro[i].batch * t->micro[i].seq_len; j++) counts[0] += lab[j] >= 0;
    }
    comm_allreduce_sum_f64(t->comm, counts, 1);
    if (counts[0] == 0) {
        // Nothing to learn from (a corpus of padding): a loss of 0 would look like success.
        char msg[4352];
        snprintf(msg, sizeof msg, "step %lld: the global batch holds no trainable token (only padding?) in data.train %s",
                 (long long)t->step + 1, cfg->data.n_train > 0 ? cfg->data.train[0] : "");
        comm_abort(t->comm, MHE_EXIT_INPUT, msg);
    }
    const double divisor = counts[0] > 0 ? counts[0] : 1.0;

    model_zero_grad(t->model);
    double loss_sum = 0;
    for (int i = 0; i < t->n_micro; i++) {
        LoaderBatch *b = &t->micro[i];
        // Dropout keyed by the global micro-batch: the same masks whatever the worker count.
        model_set_dropout_seed(t->model, rng_at(cfg->train.seed, 0xd809, (uint64_t)t->step,
                                                (uint64_t)(t->rank * t->n_micro + i)));
        model_forward(t->model, b->input_ids, b->token_type_ids, b->attention_mask, b->labels, b->batch,
                      b->seq_len, 1);
        loss_sum += model_loss_sum(t->model);
        // The last micro-batch completes the gradients: reduce buckets as they become final.
        int overlap = i == t->n_micro - 1 && grad_reducer_overlaps(t->reducer);
        model_set_backward_hook(t->model, overlap ? reducer_setup_stage_done : NULL, t->reducer);
        model_backward(t->model, divisor);
    }
    grad_reducer_finish(t->reducer);
    counts[1] = loss_sum;
    comm_allreduce_sum_f64(t->comm, counts + 1, 1);
    const double loss = counts[1] / divisor;
    if (t->step == t->opt->inject_nonfinite_step) {
        float nan = NAN;
        t->be->upload(t->be, t->grads, &nan, sizeof nan);
    }
    // Under ZeRO-1 each rank holds the reduced gradients of its range only.
    float *g = t->grads + t->zero->begin;
    const size_t gn = t->zero->end - t->zero->begin;
    double sq = t->be->sum_squares(t->be, g, gn);
    if (t->zero->enabled) comm_allreduce_sum_f64(t->comm, &sq, 1);
    const double gnorm = sqrt(sq);
    const double lr = schedule_lr(&cfg->optim, t->step, t->total_steps);
    *loss_out = loss;
    *gnorm_out = gnorm;
    *lr_out = lr;
    if (!isfinite(loss) || !isfinite(gnorm)) return cfg->train.on_nonfinite == NONFINITE_STOP ? 2 : 1;
    const float coef = optim_clip_coef(gnorm, cfg->optim.clip_norm);
    OptimReduceFn reduce = t->zero->enabled ? sum_across_ranks : NULL;
    if (t->dev_m) {
        optim_step_backend(t->be, &t->opt_state, &cfg->optim, t->table, t->params, t->grads, t->dev_m, t->dev_v,
                           t->dev_u, (float)lr, coef, reduce, t->comm);
    } else {
        optim_step_scaled(&t->opt_state, &cfg->optim, t->table, t->params, t->grads, (float)lr, coef, reduce, t->comm);
    }
    grad_reducer_gather_params(t->reducer, t->params);
    return 0;
}

// Data parallelism keeps one model: every rank must hold bit-identical weights after every
// step.  Compare a checksum of the weight bytes across ranks; a mismatch ends the job.
static void check_replicas(Trainer *t) {
    if (t->world == 1) return;
    if (!is_host_backend(t->be)) t->be->download(t->be, t->host_params, t->params, t->table->total * sizeof(float));
    uint64_t h = fnv1a(FNV1A_BASIS, t->host_params, t->table->total * sizeof(float));
    uint64_t *all = mhe_malloc((size_t)t->world * sizeof *all);
    comm_allgather(t->comm, &h, all, sizeof h);
    for (int r = 1; r < t->world; r++)
        if (all[r] != all[0]) {
            char msg[160];
            snprintf(msg, sizeof msg, "after step %lld the weights of rank %d differ from rank 0's", (long long)t->step, r);
            comm_abort(t->comm, 1, msg);
        }
    free(all);
    t->replica_checks++;
}

static void log_step(Trainer *t, double loss, double gnorm, double lr, double step_s, int skipped) {
    if (t->rank != 0) return;
    const Config *cfg = t->cfg;
    const double tokens = (double)cfg->train.global_batch * cfg->data.seq_len;
    const double tps = step_s > 0 ? tokens / step_s : 0;
    const double achieved = step_s > 0 ? t->flops_per_step / step_s / 1e9 : 0;
    int over = 0;
    // A GPU's peak is its data sheet's, fixed: a faster step caps at 100% and says the table is wrong.
    const double mfu = is_host_backend(t->be) ? peak_mfu(&t->peak_gflops, achieved)
                                              : gpu_mfu(achieved, t->peak_gflops, &over);
    if (over && !t->said_over++)
        fprintf(stderr, "mhetrain: the step ran at %.1f GFLOP/s, above the %.1f GFLOP/s data-sheet peak of %s: MFU "
                        "shown as 100%%; the table (kernels/gpu_peak.c) is wrong for this card or MHE_GPU_PEAK_TFLOPS "
                        "is too low\n", achieved, t->peak_gflops, t->peak_card ? t->peak_card : "the GPU");
    Progress p = {.step = t->step,
                  .total_steps = t->total_steps,
                  .start_step = t->start_step,
                  .elapsed_s = omp_get_wtime() - t->t_start,
                  .loss = loss,
                  .lr = lr,
                  .grad_norm = gnorm,
                  .tokens_per_s = tps,
                  .mfu = mfu};
    char line[512];
    progress_format(line, sizeof line, &p);
    fprintf(stderr, "%s%s\n", line, skipped ? " | SKIPPED (non-finite)" : "");
    MetricValue v[] = {{"loss", loss, NULL},           {"lr", lr, NULL},
                       {"grad_norm", gnorm, NULL},     {"tokens_per_s", tps, NULL},
                       {"mfu", mfu, NULL},             {"elapsed_s", p.elapsed_s, NULL},
                       {"tokens_seen", t->step * tokens, NULL}, {"skipped", skipped, NULL}};
    check_write(t, metrics_write(&t->metrics, t->step, 8, v), "metrics.jsonl");
    const char *tags[] = {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_s"};
    float vals[] = {(float)loss, (float)lr, (float)gnorm, (float)tps};
    check_write(t, tb_write_scalars(&t->tb, t->step, tb_wall_time(), 4, tags, vals), "tensorboard");
}

int trainer_run(const Config *cfg, Comm *comm, const TrainOptions *opt) {
    Trainer t = {.cfg = cfg, .opt = opt, .comm = comm};
    setup(&t);
    int status = 0, saved_at_end = 0;
    // The untrained model's validation loss: the baseline the run's progress is read against.
    if (t.step == 0 && cfg->train.eval_every > 0) evaluate(&t, cfg->train.eval_batches);
    while (t.step < t.total_steps) {
        double t0 = omp_get_wtime(), loss, gnorm, lr;
        int r = train_step(&t, &loss, &gnorm, &lr);
        if (r == 2) {
            if (t.rank == 0)
                fprintf(stderr,
                        "mhetrain: step %lld: non-finite %s (train.on_nonfinite: stop); the last checkpoint is kept\n",
                        (long long)t.step + 1, isfinite(loss) ? "gradient norm" : "loss");
            status = 1;
            break;
        }
        if (r == 1) model_zero_grad(t.model);
        t.nonfinite_run = r == 1 ? t.nonfinite_run + 1 : 0;
        t.step++;
        if (r == 1 || t.step % cfg->train.log_every == 0 || t.step == t.total_steps) {
            log_step(&t, loss, gnorm, lr, omp_get_wtime() - t0, r == 1);
            check_replicas(&t);
        }
        if (cfg->train.max_nonfinite > 0 && t.nonfinite_run >= cfg->train.max_nonfinite) {
            // Every step skipped (NaN weights, a broken batch): saving would publish a useless model.
            if (t.rank == 0)
                fprintf(stderr,
                        "mhetrain: steps %lld-%lld: %lld non-finite steps in a row (train.max_nonfinite: %d); "
                        "stopping, the last checkpoint is kept\n",
                        (long long)(t.step - t.nonfinite_run + 1), (long long)t.step, (long long)t.nonfinite_run,
                        cfg->train.max_nonfinite);
            status = 1;
            break;
        }
        int64_t stop = signals_pending(&t.signals);  // the signal number: every rank exits alike
        comm_allreduce_max_i64(comm, &stop, 1);
        int stop_here = stop || (opt->stop_after > 0 && t.step == opt->stop_after);
        if (cfg->train.eval_every > 0 && t.step % cfg->train.eval_every == 0 && t.step < t.total_steps) evaluate(&t, cfg->train.eval_batches);
        if (stop_here || (cfg->train.checkpoint_every > 0 && t.step % cfg->train.checkpoint_every == 0) ||
            t.step == t.total_steps) {
            save(&t);
            saved_at_end = t.step == t.total_steps;
        }
        if (stop_here) {
            if (t.rank == 0)
                fprintf(stderr, "stopping after step %lld (%s); run the same command to resume\n", (long long)t.step,
                        stop ? "signal" : "--stop-after");
            teardown(&t);
            return stop ? 128 + (int)stop : 0;
        }
    }
    if (status == 0) {
        evaluate(&t, cfg->train.final_eval_batches);
        if (!saved_at_end) save(&t);
    }
    teardown(&t);
    return status;
}
