// A run's identity on resume: the resolved config saved in the checkpoint (config.yaml) against
// the one resuming.  Keys that change the data order, the model or the optimisation (seed,
// seq_len, global_batch, lr, the data, every model key, ...) are identity; keys that only say
// how long to run or how to report, checkpoint, or where/how to compute (steps, tokens,
// log/eval/checkpoint intervals, keep_last, out_dir, runtime.*, dist.*, micro_batch, recompute,
// time_limit_s) are harmless.  The run's length (train.steps, train.tokens) is its own kind: the
// learning-rate schedule is computed over it, so a change moves the learning rate from the resumed
// step on (schedule_resume_notice says how).  Keys present in only one text (another version's
// config) are not compared.
#ifndef MHE_TRAINER_RUN_IDENTITY_H
#define MHE_TRAINER_RUN_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *identity;   // "data.seq_len 64 -> 32, optim.lr 0.002 -> 0.001" or NULL (malloc'd)
    char *harmless;   // the same for harmless keys, or NULL
    char *length;     // the same for train.steps / train.tokens, or NULL
} RunDiff;

// The saved config's number of steps (train.steps, else train.tokens over tokens_per_step);
// 0 when it cannot be read.
int64_t run_saved_total_steps(const char *saved_yaml, int64_t tokens_per_step);

// Compares two texts written by config_write_yaml (saved first, then current).
RunDiff run_identity_diff(const char *saved_yaml, const char *current_yaml);
void run_diff_free(RunDiff *d);

// The architecture-defining keys that differ between a checkpoint's config.yaml and this run's
// (every model.* and attention.* key but those that only set the initialisation, dropout or the
// compute path): "attention.type mhe_mul -> mhe_add" or NULL (malloc'd).  For train.init_from,
// where equal tensor shapes do not make the same model (mhe_mul and mhe_add, another ln_eps).
char *run_arch_diff(const char *saved_yaml, const char *current_yaml);

#endif
