// Checkpoints (DESIGN.md §5): out/checkpoints/step_%08d/ holding
//   model.safetensors      fp32 weights under the parameter table's canonical names
//   optimizer.safetensors  "m", "v" (the OptimState buffer halves), "step", "range" [begin, end, total]
//   config.yaml            the resolved config
//   state.json             step, consumed samples, RNG, loss scale, world size, the config
//                          text, and the sha256 and size of every other file
// and out/checkpoints/latest, a file naming the newest directory.
//
// Crash safety: everything is written into a temporary directory next to the final one, each
// file and the directory fsynced, then renamed into place (an existing directory of the same
// step is swapped out atomically), the parent fsynced, and only then `latest` replaced (write,
// fsync, rename) and older checkpoints beyond keep-last-K deleted.  Killing the writer at any
// instant leaves the previous checkpoint complete; temporary leftovers start with '.' and are
// ignored by readers and removed by the next save.
#ifndef MHE_TRAINER_CHECKPOINT_H
#define MHE_TRAINER_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/io/optim_state.h"
#include "trainer/model/params.h"

typedef struct {
    int64_t step;               // optimizer steps completed
    int64_t consumed_samples;   // training sequences consumed (the loader's position)
    uint64_t rng_seed;          // the counter-based RNG's key ...
    uint64_t rng_offset;        // ... and how far the run has drawn from it
    double loss_scale;          // 1 without loss scaling
    int world_size;
    char *config_yaml;          // resolved config text (owned; may be NULL when saving)
} CheckpointState;

// Writes out_dir/checkpoints/step_<state->step>/ atomically, points `latest` at it, then keeps
// only the newest `keep_last` checkpoints (0 keeps all); checkpoints of a later step than the
// one saved are never deleted (nothing is removed that a valid checkpoint did not supersede).  `opt` may be NULL (no optimizer
// file).  Returns 0, or -1 after printing why on stderr (disk full, permissions): the caller
// decides whether a failed save is fatal.
int checkpoint_save(const char *out_dir, const CheckpointState *state, const ParamTable *t, const float *params,
                    const OptimState *opt, int keep_last);

// A new run directory's contents (import, convert): `dir`/config.yaml and a weights-only step-0
// checkpoint of `params`, with cfg's text and train.seed.  Exit 1 when either cannot be written.
void checkpoint_save_new_run(const char *dir, const Config *cfg, const ParamTable *t, const float *params,
                             const char *who);

// How long the other ranks may wait for rank 0's checkpoint_save of `n_params` parameters (and
// the optimizer's two moments) beyond dist.timeout_s before calling rank 0 stuck: the save's
// fsyncs can each wait seconds behind other writers' dirty pages, and its bytes go to disk at
// the pace of a slow network file system (20 MB/s assumed).
double checkpoint_save_allowance_s(size_t n_params);

// 0 when `dir` is a complete checkpoint: state.json parses, its step matches the directory
// name, every file it lists is present with the recorded size and sha256.  Otherwise -1 and
// the reason in `why`.
int checkpoint_validate(const char *dir, char *why, size_t why_len);

// The newest valid checkpoint under out_dir/checkpoints (malloc'd path), or NULL when there is
// none.  Invalid or partial ones are reported on stderr and skipped.  For `--resume auto`.
char *checkpoint_find_latest(const char *out_dir);

// How many step_* directories out_dir/checkpoints holds, valid or not, and their paths
// (newest first, comma separated, truncated to len) in `names`.
int checkpoint_list(const char *out_dir, char *names, size_t len);

// A user-supplied path: a checkpoint directory itself, or a run's output directory (then its
// newest valid checkpoint).  Exit 2 with a message when neither.  Malloc'd.
char *checkpoint_resolve(const char *path);

// Full resume: validates checksums, tensor names and shapes against `t`, then fills params, the
// optimizer state and `state`.  The file's optimizer range must contain opt's range: a state
// saved whole (e.g. ZeRO-1 shards gathered on rank 0) can be read back by each shard.  Any
// mismatch is a user error naming the file and tensor (exit 2).
void checkpoint_load(const char *dir, const ParamTable *t, float *params, OptimState *opt, CheckpointState *state);

// Weights only (train.init_from, eval, export): model.safetensors checked and loaded; the
// optimizer file is neither needed nor read.
void checkpoint_load_weights(const char *dir, const ParamTable *t, float *params);

void checkpoint_state_free(CheckpointState *state);

#endif
