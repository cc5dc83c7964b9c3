// The run engine (run_engine.h): setup, the step, the loop and teardown that pretraining and
// fine-tuning share.  Dropout, data order and masks depend on the step number only (the jobs key
// them so), so resume is exact and world sizes agree.
#include "trainer/train/run_engine.h"
#include "trainer/train/divergence.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/fnv1a.h"
#include "common/fs.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/run_lock.h"
#include "trainer/train/rank_agree.h"
#include "trainer/train/reducer_setup.h"
#include "trainer/train/run_identity.h"
#include "trainer/train/schedule.h"
#include "trainer/train/zero.h"

int run_is_host(const RunEngine *e) { return strcmp(e->be->name, "cpu") == 0; }

// Rank 0's outputs must be written: a run whose metrics or events are lost is not a success.
void run_check_write(RunEngine *e, int rc, const char *what) {
    if (rc == 0) return;
    char msg[4352];
    snprintf(msg, sizeof msg, "%s/%s: write failed: %s; stopping (the last checkpoint is kept)", e->cfg->train.out_dir,
             what, strerror(errno));
    comm_abort(e->comm, 1, msg);
}

void run_record(RunEngine *e, int n, const MetricValue *v, int nt, const char *const *tags, const float *vals) {
    run_check_write(e, metrics_write(&e->metrics, e->step, n, v), "metrics.jsonl");
    if (nt > 0) run_check_write(e, tb_write_scalars(&e->tb, e->step, tb_wall_time(), nt, tags, vals), "tensorboard");
}

// A refusal decided on rank 0 (lock held, unusable checkpoints): every rank learns it, rank 0
// prints the one line, and all leave with the input-error status.
static void refuse_if(RunEngine *e, int refuse, const char *why) {
    int r = refuse;
    comm_broadcast(e->comm, &r, sizeof r, 0);
    if (!r) return;
    if (e->rank == 0) fprintf(stderr, "mhetrain: %s\n", why);
    comm_finalize(e->comm);
    exit(MHE_EXIT_INPUT);
}

// Rank 0's host weights (and optimizer state) to every rank and onto the device.
static void share_state(RunEngine *e) {
    comm_broadcast(e->comm, e->host_params, e->table->total * sizeof(float), 0);
    if (run_is_host(e)) return;
    e->be->upload(e->be, e->params, e->host_params, e->table->total * sizeof(float));
    size_t bytes = (e->opt_state.end - e->opt_state.begin) * sizeof(float);
    e->be->upload(e->be, e->dev_m, e->opt_state.m, bytes);
    e->be->upload(e->be, e->dev_v, e->opt_state.v, bytes);
}

// Rank 0 reads this run's checkpoint; everyone receives the weights, optimizer state and position.
static void restore(RunEngine *e, const char *dir) {
    CheckpointState st = {0};
    // Checkpoints hold the whole optimizer state; under ZeRO-1 rank 0 reads it and scatters.
    OptimState full = {0};
    if (e->zero->enabled && e->rank == 0) optim_state_init(&full, e->table, 0, e->table->total);
    if (e->rank == 0) {
        checkpoint_load(dir, e->table, e->host_params, e->zero->enabled ? &full : &e->opt_state, &st);
        fprintf(stderr, "resumed from %s (step %lld, saved by %d worker%s)\n", dir, (long long)st.step, st.world_size,
                st.world_size == 1 ? "" : "s");
    }
    if (e->zero->enabled) {
        zero_scatter_state(e->zero, e->comm, &full, &e->opt_state);
    } else {
        comm_broadcast(e->comm, e->opt_state.buf, 2 * (e->opt_state.end - e->opt_state.begin) * sizeof(float), 0);
        comm_broadcast(e->comm, &e->opt_state.step, sizeof e->opt_state.step, 0);
    }
    comm_broadcast(e->comm, &st.step, sizeof st.step, 0);
    e->step = st.step;
    e->resumed = 1;
    share_state(e);
    if (full.buf) optim_state_free(&full);
    checkpoint_state_free(&st);
}

void run_save(RunEngine *e, const char *dir, int keep_last) {
    if (!run_is_host(e)) {
        e->be->download(e->be, e->host_params, e->params, e->table->total * sizeof(float));
        size_t bytes = (e->opt_state.end - e->opt_state.begin) * sizeof(float);
        e->be->download(e->be, e->opt_state.m, e->dev_m, bytes);
        e->be->download(e->be, e->opt_state.v, e->dev_v, bytes);
    }
    OptimState full = {0};
    const OptimState *opt = &e->opt_state;
    if (e->zero->enabled) {
        if (e->rank == 0) optim_state_init(&full, e->table, 0, e->table->total);
        zero_gather_state(e->zero, e->comm, &e->opt_state, &full);
        opt = &full;
    }
    if (e->rank == 0) {
        CheckpointState st = {
            .step = e->step,
            .consumed_samples = e->step * e->cfg->train.global_batch,
            .rng_seed = e->cfg->train.seed,
            .rng_offset = (uint64_t)e->step,
            .loss_scale = 1.0,
            .world_size = e->world,
            .config_yaml = e->config_yaml,
        };
        if (checkpoint_save(dir, &st, e->table, e->host_params, opt, keep_last) != 0)
            comm_abort(e->comm, 1, "saving the checkpoint failed; the previous checkpoint is intact");
        fprintf(stderr, "checkpoint: %s/checkpoints/step_%08lld\n", dir, (long long)e->step);
    }
    if (full.buf) optim_state_free(&full);
    comm_barrier_allowing(e->comm, checkpoint_save_allowance_s(e->table->total), "barrier after the checkpoint");
}

// A checkpoint dir's config.yaml against this run's: what differs in the model.
static char *arch_refusal(RunEngine *e, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.yaml", dir);
    char *saved = mhe_read_file(path, NULL);
    char *arch = run_arch_diff(saved, e->config_yaml), *msg = NULL;
    if (arch) {  // equal shapes do not make the same model (mhe_mul vs mhe_add, ln_eps)
        msg = mhe_malloc(strlen(path) + strlen(arch) + 256);
        sprintf(msg, "%s: train.init_from: the checkpoint's model differs from this run's (%s; checkpoint -> "
                     "this run): model.* and attention.* must match the checkpoint's config.yaml", path, arch);
    }
    free(arch);
    free(saved);
    return msg;
}

// --resume: this run's checkpoint (rank 0's path; "(rank 0)" elsewhere), or NULL.
static char *find_checkpoint(RunEngine *e, char *why, size_t why_len) {
    const char *resume = e->opt->resume, *out = e->cfg->train.out_dir;
    if (strcmp(resume, "none") == 0) return NULL;
    if (strcmp(resume, "auto") != 0) return checkpoint_resolve(resume);
    char *ckpt = e->rank == 0 ? checkpoint_find_latest(out) : NULL;
    // Checkpoints that all fail validation are the user's to repair or discard: starting from
    // step 0 over them would later prune them away.
    char names[4096] = "";
    int unusable = e->rank == 0 && !ckpt && checkpoint_list(out, names, sizeof names) > 0;
    if (unusable)
        snprintf(why, why_len,
                 "%s: no valid checkpoint among %s (reasons above); refusing to start over them -- "
                 "repair or move them, or pass --resume none to start afresh deliberately", out, names);
    refuse_if(e, unusable, why);
    int found = ckpt != NULL;
    comm_broadcast(e->comm, &found, sizeof found, 0);
    if (found && e->rank != 0) ckpt = mhe_strdup("(rank 0)");
    return ckpt;
}

// Weights: resume > init_from > fresh initialisation (identical on every rank by seed).
// Returns what a resume changes in the run's settings (rank 0).
static RunDiff load_weights(RunEngine *e, const RunJob *job) {
    const Config *cfg = e->cfg;
    model_init_params(e->model, cfg->train.seed);
    if (!run_is_host(e)) model_get_params(e->model, e->host_params);
    char why[8192] = "";
    char *ckpt = find_checkpoint(e, why, sizeof why);
    if (ckpt) {
        restore(e, ckpt);
        if (job->resumed) job->resumed(job->self, e);
    } else if (cfg->train.init_from && cfg->train.init_from[0]) {
        char *dir = checkpoint_resolve(cfg->train.init_from);
        // Every rank checks its own copy: the path is the same text on every rank (rank_agree), the
        // checkpoint behind it need not be (a stale copy on another node).
        char *msg = arch_refusal(e, dir);
        rank_refuse_any(e->comm, msg);
        if (e->rank == 0) job->init_from(job->self, e, dir);
        share_state(e);
        free(dir);
    }
    RunDiff diff = {NULL, NULL, NULL};
    if (ckpt && e->rank == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s/config.yaml", ckpt);
        char *saved = mhe_read_file(path, NULL);
        diff = run_identity_diff(saved, e->config_yaml);
        e->saved_total = run_saved_total_steps(saved, (int64_t)cfg->train.global_batch * cfg->data.seq_len);
        free(saved);
        if (diff.identity && !e->opt->allow_config_change)
            snprintf(why, sizeof why,
                     "%s: resuming would change the run's data order or model (%s); pass --allow-config-change "
                     "to resume anyway (the change is recorded in metrics.jsonl), or use another train.out_dir",
                     ckpt, diff.identity);
    }
    refuse_if(e, e->rank == 0 && diff.identity && !e->opt->allow_config_change, why);
    free(ckpt);
    e->start_step = e->step;
    return diff;
}

static void open_outputs(RunEngine *e, const RunDiff *diff) {
    const char *out = e->cfg->train.out_dir;
    mhe_mkdirs(out);
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", out);
    if (metrics_open(&e->metrics, path) != 0) mhe_fail("%s: cannot open: %s", path, strerror(errno));
    snprintf(path, sizeof path, "%s/tensorboard", out);
    mhe_mkdirs(path);
    if (tb_open(&e->tb, path, tb_wall_time()) != 0) mhe_fail("%s: cannot open an event file: %s", path, strerror(errno));
    if (diff->harmless) fprintf(stderr, "mhetrain: resuming with changed settings (harmless): %s\n", diff->harmless);
    if (diff->length) schedule_resume_notice(&e->cfg->optim, diff->length, e->step, e->saved_total, e->total_steps);
    schedule_warmup_warning(&e->cfg->optim, e->total_steps, e->cfg->source);
    if (diff->identity) {
        fprintf(stderr, "mhetrain: --allow-config-change: resuming with a changed run identity: %s\n", diff->identity);
        MetricValue v[] = {{"event", 0, "config_change"}, {"changes", 0, diff->identity}};
        run_record(e, 2, v, 0, NULL, NULL);
    }
}

static void setup(RunEngine *e, const RunJob *job) {
    const Config *cfg = e->cfg;
    e->rank = comm_rank(e->comm);
    e->world = comm_world(e->comm);
    // Before anything that can differ between ranks reaches a collective (the lock's broadcast
    // is the first): the config and the model's tensors, then, once opened, the data.
    e->config_yaml = config_yaml_text(cfg);
    rank_agree_model(e->comm, e->config_yaml, cfg);
    if (cfg->train.global_batch % (e->world * cfg->train.micro_batch) != 0)
        mhe_fail("%s: train.global_batch %d is not a multiple of %d workers x train.micro_batch %d", cfg->source,
                 cfg->train.global_batch, e->world, cfg->train.micro_batch);
    if (cfg->runtime.threads > 0) omp_set_num_threads(cfg->runtime.threads);
    char why[8192] = "";
    e->lock_fd = e->rank == 0 ? run_lock_take(cfg->train.out_dir, why, sizeof why) : -1;
    refuse_if(e, e->rank == 0 && e->lock_fd < 0, why);
    e->be = backend_for_config(cfg, comm_local_rank(e->comm), comm_rank(e->comm) == 0);
    const int host = run_is_host(e);
    // Optimizer state in the model's memory: m and v (host), or m, v and the update buffer on
    // a device; a ZeRO-1 rank holds its 1/world share.
    double state = (host ? 2.0 : 3.0) / (cfg->dist.zero == 1 ? e->world : 1);
    e->model = model_create_with_state(cfg, e->be, cfg->train.micro_batch, job->seq_len, state);
    e->table = model_param_table(e->model);
    e->params = model_params(e->model);
    e->grads = model_grads(e->model);
    e->host_params = host ? e->params : mhe_malloc(e->table->total * sizeof(float));
    job->open(job->self, e);
    if (!host && cfg->dist.zero == 1 && cfg->dist.backend == DIST_MPI && e->world > 1)
        mhe_fail("%s: dist.zero: 1 with runtime.device: cuda reduces through NCCL: set dist.backend to auto or nccl",
                 cfg->source);
    if (!host && cfg->dist.backend != DIST_MPI && e->world > 1)
        e->dcomm = device_comm_create(comm_mpi_handle(e->comm), e->be, cfg->dist.timeout_s);
    e->reducer = reducer_setup(e->comm, e->be, e->dcomm, e->table, e->grads, cfg, cfg->dist.zero == 1, &e->device,
                               &e->pieces, 0);
    grad_reducer_set_overlap(e->reducer, !e->opt->no_overlap);
    e->zero = grad_reducer_shards(e->reducer);
    optim_state_init(&e->opt_state, e->table, e->zero->begin, e->zero->end);
    if (!host) {
        size_t bytes = (e->zero->end - e->zero->begin) * sizeof(float);
        e->dev_m = e->be->alloc(e->be, bytes);
        e->dev_v = e->be->alloc(e->be, bytes);
        e->dev_u = e->be->alloc(e->be, bytes);
    }
    RunDiff diff = load_weights(e, job);
    if (e->rank == 0) open_outputs(e, &diff);
    run_diff_free(&diff);
    signals_install(&e->signals);
    e->t_start = omp_get_wtime();
}

static void teardown(RunEngine *e, const RunJob *job) {
    signals_restore(&e->signals);
    run_lock_release(e->lock_fd);
    if (e->rank == 0 && e->replica_checks > 0)
        fprintf(stderr, "replicas identical at all %lld checks (%d workers)\n", (long long)e->replica_checks, e->world);
    if (e->rank == 0) {
        metrics_close(&e->metrics);
        tb_close(&e->tb);
    }
    if (job->close) job->close(job->self, e);
    optim_state_free(&e->opt_state);
    grad_reducer_free(e->reducer);
    free(e->pieces);
    if (!run_is_host(e)) {
        free(e->host_params);
        device_comm_free(e->dcomm);
        e->be->free(e->be, e->dev_m);
        e->be->free(e->be, e->dev_v);
        e->be->free(e->be, e->dev_u);
    }
    model_free(e->model);
    e->be->destroy(e->be);
    free(e->config_yaml);
}

// LAMB's per-tensor norms when tensors straddle ZeRO shards.
static void sum_across_ranks(double *norms, int n, void *comm) { comm_allreduce_sum_f64(comm, norms, (size_t)n); }

// One optimizer step.  Returns 0 applied, 1 skipped (non-finite), 2 stop (non-finite, policy stop).
static int train_step(RunEngine *e, const RunJob *job, StepResult *res) {
    const Config *cfg = e->cfg;
    // Every micro-batch of this rank first: the global count of labelled positions divides every
    // gradient, so accumulation over micro-batches and workers gives the global-batch mean.
    double counts[2] = {0, 0};  // labelled positions, loss sum
    const int n_micro = job->batch(job->self, e, &counts[0]);
    comm_allreduce_sum_f64(e->comm, counts, 1);
    if (counts[0] == 0) {
        // Nothing to learn from (a corpus of padding): a loss of 0 would look like success.
        char msg[4352];
        job->empty_batch(job->self, e, msg, sizeof msg);
        comm_abort(e->comm, MHE_EXIT_INPUT, msg);
    }
    const double divisor = counts[0];
    model_zero_grad(e->model);
    double loss_sum = 0;
    for (int i = 0; i < n_micro; i++) {
        job->forward(job->self, e, i);
        loss_sum += model_loss_sum(e->model);
        // The last micro-batch completes the gradients: reduce buckets as they become final.
        int overlap = i == n_micro - 1 && grad_reducer_overlaps(e->reducer);
        model_set_backward_hook(e->model, overlap ? reducer_setup_stage_done : NULL, e->reducer);
        job->backward(e->model, divisor);
    }
    grad_reducer_finish(e->reducer);
    counts[1] = loss_sum;
    comm_allreduce_sum_f64(e->comm, counts + 1, 1);
    if (e->step == e->opt->inject_nonfinite_step) {
        float nan = NAN;
        e->be->upload(e->be, e->grads, &nan, sizeof nan);
    }
    // Under ZeRO-1 each rank holds the reduced gradients of its range only.
    float *g = e->grads + e->zero->begin;
    double sq = e->be->sum_squares(e->be, g, e->zero->end - e->zero->begin);
    if (e->zero->enabled) comm_allreduce_sum_f64(e->comm, &sq, 1);
    res->loss = counts[1] / divisor;
    res->grad_norm = sqrt(sq);
    res->lr = schedule_lr(&cfg->optim, e->step, e->total_steps);
    if (!isfinite(res->loss) || !isfinite(res->grad_norm)) return cfg->train.on_nonfinite == NONFINITE_STOP ? 2 : 1;
    const float coef = optim_clip_coef(res->grad_norm, cfg->optim.clip_norm);
    OptimReduceFn reduce = e->zero->enabled ? sum_across_ranks : NULL;
    if (e->dev_m) {
        optim_step_backend(e->be, &e->opt_state, &cfg->optim, e->table, e->params, e->grads, e->dev_m, e->dev_v,
                           e->dev_u, (float)res->lr, coef, reduce, e->comm);
    } else {
        optim_step_scaled(&e->opt_state, &cfg->optim, e->table, e->params, e->grads, (float)res->lr, coef, reduce,
                          e->comm);
    }
    grad_reducer_gather_params(e->reducer, e->params);
    return 0;
}

// Data parallelism keeps one model: every rank must hold bit-identical weights after every
// step.  Compare a checksum of the weight bytes across ranks; a mismatch ends the job.
static void check_replicas(RunEngine *e) {
    if (e->world == 1) return;
    if (!run_is_host(e)) e->be->download(e->be, e->host_params, e->params, e->table->total * sizeof(float));
    uint64_t h = fnv1a(FNV1A_BASIS, e->host_params, e->table->total * sizeof(float));
    uint64_t *all = mhe_malloc((size_t)e->world * sizeof *all);
    comm_allgather(e->comm, &h, all, sizeof h);
    for (int r = 1; r < e->world; r++)
        if (all[r] != all[0]) {
            char msg[160];
            snprintf(msg, sizeof msg, "after step %lld the weights of rank %d differ from rank 0's", (long long)e->step, r);
            comm_abort(e->comm, 1, msg);
        }
    free(all);
    e->replica_checks++;
}

// Whether the run must stop after this step (1), printing why on rank 0.
static int nonfinite_stop(RunEngine *e, int r, const StepResult *res) {
    const Config *cfg = e->cfg;
    if (r == 2) {
        if (e->rank == 0)
            fprintf(stderr, "mhetrain: step %lld: non-finite %s (train.on_nonfinite: stop); the last checkpoint is kept\n",
                    (long long)e->step + 1, isfinite(res->loss) ? "gradient norm" : "loss");
        return 1;
    }
    if (cfg->train.max_nonfinite <= 0 || e->nonfinite_run < cfg->train.max_nonfinite) return 0;
    // Every step skipped (NaN weights, a broken batch): saving would publish a useless model.
    if (e->rank == 0)
        fprintf(stderr,
                "mhetrain: steps %lld-%lld: %lld non-finite steps in a row (train.max_nonfinite: %d); "
                "stopping, the last checkpoint is kept\n",
                (long long)(e->step - e->nonfinite_run + 1), (long long)e->step, (long long)e->nonfinite_run,
                cfg->train.max_nonfinite);
    return 1;
}

int run_engine(const Config *cfg, Comm *comm, const RunOptions *opt, const RunJob *job) {
    RunEngine e = {.cfg = cfg, .opt = opt, .comm = comm};
    setup(&e, job);
    if (job->begin) job->begin(job->self, &e);
    const int log_every = cfg->train.log_every > 0 ? cfg->train.log_every : 1;
    int status = 0, saved_at_end = 0;
    while (e.step < e.total_steps) {
        StepResult res = {0};
        double t0 = omp_get_wtime();
        int r = train_step(&e, job, &res);
        if (r == 2 && nonfinite_stop(&e, r, &res)) {
            status = 1;
            break;
        }
        if (r == 1) model_zero_grad(e.model);
        e.nonfinite_run = r == 1 ? e.nonfinite_run + 1 : 0;
        e.step++;
        e.diverged_at = isfinite(res.loss) ? 0 : e.diverged_at ? e.diverged_at : e.step;
        if (r == 1 || e.step % log_every == 0 || e.step == e.total_steps) {
            res.step_s = omp_get_wtime() - t0;
            res.skipped = r == 1;
            if (e.rank == 0) job->log(job->self, &e, &res);
            check_replicas(&e);
        }
        if (nonfinite_stop(&e, r, &res)) {
            status = 1;
            break;
        }
        // The signal number, and whether train.time_limit_s has passed on rank 0's clock (the
        // ranks' clocks differ, so rank 0 decides): every rank stops after the same step.
        const double trained_s = omp_get_wtime() - e.t_start;
        const float limit_s = cfg->train.time_limit_s;
        int64_t flags[2] = {signals_pending(&e.signals), e.rank == 0 && limit_s > 0 && trained_s >= limit_s};
        comm_allreduce_max_i64(comm, flags, 2);
        const int64_t stop = flags[0];
        const int timed_out = !stop && flags[1] && e.step < e.total_steps;  // at the last step: a plain end
        int stop_here = stop || timed_out || (opt->stop_after > 0 && e.step == opt->stop_after);
        int due = job->after_step(job->self, &e);
        // No checkpoint while the loss is not finite: keep_last would prune the good ones for it.
        if (stop_here || (!e.diverged_at && (due || e.step == e.total_steps))) {
            run_save(&e, cfg->train.out_dir, cfg->train.keep_last);
            saved_at_end = e.step == e.total_steps;
        }
        if (stop_here) {
            if (e.rank == 0 && timed_out)
                fprintf(stderr,
                        "stopping after step %lld (train.time_limit_s %g: %.2f s of training); run the same command "
                        "to resume\n",
                        (long long)e.step, limit_s, trained_s);
            else if (e.rank == 0)
                fprintf(stderr, "stopping after step %lld (%s); run the same command to resume\n", (long long)e.step,
                        stop ? "signal" : "--stop-after");
            teardown(&e, job);
            return stop ? 128 + (int)stop : 0;
        }
    }
    if (status == 0) {
        if (job->finish) job->finish(job->self, &e);
        status = divergence_check(e.rank, e.diverged_at, e.final_loss, e.step);
        if (!saved_at_end && status == 0) run_save(&e, cfg->train.out_dir, cfg->train.keep_last);
    }
    teardown(&e, job);
    return status;
}
