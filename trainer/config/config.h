// The experiment configuration: one typed struct per YAML section (DESIGN.md §1-§6).
// Every key's type, default, range and documentation is one row of config_fields.c.
#ifndef MHE_TRAINER_CONFIG_H
#define MHE_TRAINER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "data/loader.h"     // Objective, LoaderOptions, Loader
#include "data/tokenizer.h"  // TokenizerKind, Tokenizer
#include "trainer/config/attention_types.h"

typedef enum { ARCH_BERT, ARCH_GPT } Arch;
typedef enum { NORM_POST, NORM_PRE } NormPlacement;
typedef enum { ACT_GELU_ERF, ACT_GELU_TANH } Activation;
// ATTN_MHA, ATTN_SHA, ...: one value per line of the registry (attention_types.h).
#define MHE_ATTN_ENUM_(E, name) ATTN_##E,
typedef enum { MHE_ATTENTION_TYPES(MHE_ATTN_ENUM_) ATTN_TYPE_COUNT } AttentionType;
#undef MHE_ATTN_ENUM_
typedef enum { OPT_ADAMW, OPT_LAMB } OptimizerKind;
typedef enum { SCHED_LINEAR, SCHED_COSINE, SCHED_CONSTANT } ScheduleKind;
typedef enum { NONFINITE_SKIP, NONFINITE_STOP } NonfinitePolicy;
// Activation recomputation (train.recompute): what the forward keeps and the backward recomputes.
typedef enum { RECOMPUTE_NONE, RECOMPUTE_ATTENTION, RECOMPUTE_LAYER } RecomputeMode;
typedef enum { DIST_AUTO, DIST_MPI, DIST_NCCL } DistBackend;
typedef enum { DEVICE_CPU, DEVICE_CUDA } Device;
// PREC_AUTO lives only in a loaded config: a run resolves it to fp32 or bf16 before any backend
// exists (trainer/train/precision_auto.h), and its resolved config names the choice.
typedef enum { PREC_FP32, PREC_BF16, PREC_AUTO } Precision;

typedef struct {
    Arch arch;
    int layers;          // L
    int hidden;          // D
    int heads;           // n
    int head_dim;        // d; config value 0 means D/n, resolved on load
    int ffn;             // 0 means 4D, resolved on load
    int vocab_size;
    int max_seq;         // learned position embeddings
    int type_vocab;      // BERT token types (0 for gpt)
    NormPlacement norm;  // default: post for bert, pre for gpt
    Activation activation;  // default: erf for bert, tanh for gpt
    float ln_eps;        // default: 1e-12 bert, 1e-5 gpt
    float dropout;       // hidden dropout
    float attn_dropout;  // dropout on attention probabilities
    float init_std;      // N(0, init_std) for weights
} ModelConfig;

typedef struct {
    AttentionType type;
    int groups;          // gqa: number of K/V heads (divides heads)
    int collab_dim;      // collab: D~ (0 means n*d)
    int latent_dim;      // mla: d_c, width of the shared K/V latent (0 means 4*d)
    int q_latent_dim;    // mla: width of the query latent (0: queries straight from X)
    float embed_std;     // mhe_*: head embeddings ~ N(0, embed_std)
    bool fast_path;      // mhe_*: use the shared-score / shared-K,V identities
} AttentionConfig;

typedef struct {
    Objective type;           // default: mlm for bert, clm for gpt
    float mask_prob;          // fraction of non-special positions selected (MLM)
    float eval_mask_prob;     // the same for the validation split; 0: mask_prob
    float mask_token_frac;    // of those, replaced by [MASK]
    float random_token_frac;  // of those, replaced by a random token (rest unchanged)
    bool whole_word;          // whole-word masking (WordPiece ## continuation)
} ObjectiveConfig;

#define MHE_MAX_PATHS 16
typedef struct {
    int n_train;
    char *train[MHE_MAX_PATHS];  // shard prefixes (without .bin/.idx) or globs
    int n_valid;
    char *valid[MHE_MAX_PATHS];
    char *tokenizer;             // tokenizer file (vocab.txt, tokenizer.json, vocab.json)
    TokenizerKind tokenizer_kind;
    int seq_len;                 // training sequence length (<= model.max_seq)
    uint64_t shuffle_seed;
} DataConfig;

typedef struct {
    OptimizerKind name;
    float lr;
    float beta1, beta2, eps;
    float weight_decay;
    bool decay_all;        // also decay biases, LayerNorm and embeddings
    float clip_norm;       // 0 disables clipping
    ScheduleKind schedule;
    int warmup_steps;
    float min_lr;          // floor of the decay
} OptimConfig;

typedef struct {
    int global_batch;      // sequences per optimizer step, over all workers
    int micro_batch;       // sequences per forward/backward on one worker
    int64_t steps;         // 0: derived from tokens
    int64_t tokens;        // token budget (0: use steps)
    uint64_t seed;
    int log_every;
    int eval_every;        // 0: only at the end
    int eval_batches;      // 0: the whole validation split
    int final_eval_batches;  // at the end of the run; 0: the whole split
    int checkpoint_every;  // 0: only at the end
    int keep_last;         // checkpoints kept (0 keeps all)
    char *out_dir;
    NonfinitePolicy on_nonfinite;
    char *init_from;       // weights-only initialisation from a checkpoint ("" = none)
    int max_nonfinite;     // consecutive non-finite steps that end the run (0: never)
    RecomputeMode recompute;  // none: keep every activation; attention / layer: see trainer/model/README.md
    float time_limit_s;    // stop this process after that many seconds of training, with a checkpoint (0: no limit)
} TrainConfig;

typedef struct {
    DistBackend backend;
    float bucket_mb;
    int zero;              // 0 or 1
    float timeout_s;
} DistConfig;

typedef struct {
    Device device;
    int threads;           // 0: OpenMP default
    Precision precision;
    char *attention_core;  // "auto" or a CUDA attention core's name (`mhetrain info`)
} RuntimeConfig;

typedef enum { TASK_NONE, TASK_CLASSIFICATION, TASK_REGRESSION, TASK_SPAN } TaskType;
typedef struct {
    TaskType type;        // none (default): pretraining; the model has its LM/MLM head
    char *format;         // cola sst2 mrpc qqp stsb mnli mnli_mm qnli rte wnli | boolq cb
                          // superglue_rte wic | squad1 squad2 | tsv jsonl (generic, named columns)
    char *train_file, *dev_file;
    char *text_a, *text_b, *label_column;   // generic formats (tsv header names / jsonl keys)
    char *labels;         // generic classification: comma-separated label strings, index order
    int num_labels;       // resolved from the format (or labels); 1 for regression; 0 for span
    char *metric;         // primary metric: accuracy f1 mcc pearson spearman squad_f1 ... (default per format)
    int max_seq;          // 0: data.seq_len
    int doc_stride;       // span (0 → min(128, context window / 2), resolved by the config)
    int max_query_len;    // span (default 64)
    int max_answer_len;   // span (default 30)
    float null_threshold; // squad2: no answer when null score - best span score exceeds it (default 0)
    int epochs;           // default 3; train.steps, when > 0, caps the steps
    float classifier_dropout;  // < 0: model.dropout
} TaskConfig;

typedef struct Config {
    ModelConfig model;
    AttentionConfig attention;
    ObjectiveConfig objective;
    DataConfig data;
    OptimConfig optim;
    TrainConfig train;
    DistConfig dist;
    RuntimeConfig runtime;
    TaskConfig task;
    char *source;          // the top-level file it was loaded from
    // CONFIG_SET_* bits: arch-dependent fields the user gave explicitly, so config_resolve
    // keeps them instead of applying the arch default.  config_resolve sets the bits of the
    // fields it resolved, which makes resolving twice a no-op.
    unsigned explicit_fields;
} Config;

enum {
    CONFIG_SET_NORM = 1u << 0,
    CONFIG_SET_ACTIVATION = 1u << 1,
    CONFIG_SET_LN_EPS = 1u << 2,
    CONFIG_SET_TYPE_VOCAB = 1u << 3,
    CONFIG_SET_OBJECTIVE = 1u << 4,
    CONFIG_SET_TOKENIZER_KIND = 1u << 5,
    CONFIG_SET_STEPS = 1u << 6,
};

// Defaults for every field (strings allocated).  arch-dependent fields stay unresolved:
// set model.arch (and anything else) and call config_resolve.
void config_defaults(Config *cfg);

// Loads `path` (following `base:` chains), applies `key.path=value` overrides, resolves
// arch-dependent defaults and validates.  Any problem: "file:line:col: message", exit 2.
void config_load(Config *cfg, const char *path, int n_overrides, char **overrides);

// Validation and resolution alone (used by tests that build configs in code).
// Errors are attributed to `where`.  Resolution fills model.norm, activation, ln_eps,
// type_vocab, objective.type and data.tokenizer_kind from model.arch unless their
// CONFIG_SET_* bit is in cfg->explicit_fields: code that wants e.g. a pre-LN BERT sets
// `cfg.model.norm = NORM_PRE; cfg.explicit_fields |= CONFIG_SET_NORM;`.  It also replaces
// head_dim 0 (D/n), ffn 0 (4D), collab_dim 0 (n*d), latent_dim 0 (4d), data.seq_len 0 (max_seq) and derives
// train.steps from train.tokens.
void config_resolve(Config *cfg, const char *where);

// Writes the fully resolved config as YAML that config_load reads back to the same struct.
void config_write_yaml(const Config *cfg, FILE *out);
// The same text in memory (malloc'd): what checkpoints store and ranks compare.
char *config_yaml_text(const Config *cfg);

void config_free(Config *cfg);

// The key reference of configs/README.md (markdown, one table per section) from the field table.
void config_write_reference(FILE *out);

// An integer field by its key ("attention.groups"); 0 when no such integer key exists.
int config_get_int(const Config *cfg, const char *key, int *value);
int config_set_int(Config *cfg, const char *key, int value);

// Names used in YAML and in messages.
const char *attention_type_name(AttentionType t);
// The config-facing spec of a variant (trainer/config/attention_types.h); NULL when out of range.
const AttnTypeSpec *attention_type_spec(AttentionType t);
const char *arch_name(Arch a);
const char *objective_name(Objective o);
const char *recompute_name(RecomputeMode r);

// The data loader from a resolved Config (config_data.c).  loader_options_from_config fills
// opt from the config and its tokenizer; the continuation table (whole-word masking) is
// allocated into *continuation (free it after loader_close).  loader_open_config loads the
// tokenizer named by the config and opens data.train (valid=false) or data.valid.
void loader_options_from_config(LoaderOptions *opt, const Config *cfg, const Tokenizer *tok,
                                uint8_t **continuation);
Loader *loader_open_config(const Config *cfg, bool valid);
// Settings that are legal but probably not meant, printed as "mhetrain: warning: ..." lines on
// stderr (the trainer's rank 0 calls it): model.vocab_size above the tokenizer's vocabulary
// (embedding rows no token uses), and a data.valid entry that is also a data.train entry
// (validation would measure training data).  Returns the number of warnings.
int config_data_warnings(const Config *cfg);
// The manifest check of config_data_warnings for data.valid alone (eval reads nothing else).
int config_valid_data_warnings(const Config *cfg);

#endif
