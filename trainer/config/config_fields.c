// The table of config fields: the one place a key is declared.  Parsing, defaults, range
// checks, --dry-run output and the configs/README.md reference are all made from it, so adding
// a key is one row here (plus its member in config.h and any cross-field check in config.c).
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/num.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

#define KEY(s, k, t) .section = #s, .key = #k, .type = t, .offset = offsetof(Config, s.k)
#define ENUM_KEY(s, k, n) KEY(s, k, F_ENUM), .names = n
#define PATHS_KEY(s, k, count) KEY(s, k, F_PATHS), .count_offset = offsetof(Config, s.count)
// Integer ranges are closed; UNBOUNDED as hi reads "must be >= lo".
#define UNBOUNDED 1e300
#define IRANGE(l, h) .ranged = true, .range = {(l), (h), false, false}
// Float ranges: lo and hi with open (1) or closed (0) ends, as in the messages.
#define FRANGE(l, lo_open, h, hi_open) .ranged = true, .range = {(l), (h), (lo_open), (hi_open)}
// 1e38 rather than infinity keeps the historical bound: a finite value above it is rejected.
#define FMAX 1e38

const ConfigSection CONFIG_SECTIONS[] = {
    {"model", NULL},
    {"attention",
     "Shape rules: `el_att` needs `heads · head_dim = hidden` (keys and values are slices of the\n"
     "input); `gqa` needs `groups` dividing `heads`. `mhetrain info --attention-types` lists the\n"
     "types and the keys each one reads."},
    {"objective", NULL},
    {"data", NULL},
    {"optim", NULL},
    {"train", NULL},
    {"dist", NULL},
    {"runtime", NULL},
    {"task",
     "Fine-tuning (`mhetrain finetune`, issue 14): `type: none` is pretraining. Formats and their\n"
     "files: `trainer/task/README.md`. `num_labels` and `metric` follow the format; the metrics a\n"
     "task reports: classification `accuracy`, `f1` (2 labels, positive class 1), `f1_macro`, `mcc`,\n"
     "`acc_and_f1`, `acc_and_f1_macro` (means of the two); regression `pearson`, `spearman`, `corr`\n"
     "(their mean), `mse`; span `squad_em`, `squad_f1` (squad2 also `has_ans_em`, `has_ans_f1`,\n"
     "`no_ans_acc`, and the official v2.0 script's `best_exact`, `best_f1` with `best_f1_thresh`:\n"
     "the scores at the null-score threshold that maximises them on this split, BERT's protocol)."},
    {NULL, NULL},
};

// Upper bounds far beyond any real model keep every derived product (n*d, 4D, V*D) in range.
static const ConfigField MODEL_FIELDS[] = {
    {ENUM_KEY(model, arch, CONFIG_ARCH_NAMES), .def = "bert",
     .doc = "`bert` (encoder, MLM head, token types) or `gpt` (decoder, tied LM head)"},
    {KEY(model, layers, F_INT), .def = "2", IRANGE(1, 10000), .doc = "number of transformer layers L"},
    {KEY(model, hidden, F_INT), .def = "128", IRANGE(1, 1 << 20), .doc = "model width D"},
    {KEY(model, heads, F_INT), .def = "4", IRANGE(1, 1 << 14), .doc = "attention heads n"},
    {KEY(model, head_dim, F_INT), .def = "0", .def_doc = "0 → D/n", IRANGE(0, 1 << 16),
     .doc = "head size d; 0 means D/n (then D must be divisible by n); any value is allowed "
            "otherwise (\"fixed head size\"); n·d ≤ 4194304"},
    {KEY(model, ffn, F_INT), .def = "0", .def_doc = "0 → 4D", IRANGE(0, 1 << 22),
     .doc = "feed-forward inner size"},
    {KEY(model, vocab_size, F_INT), .def = "8192", IRANGE(2, 1 << 24),
     .doc = "vocabulary size (must match the tokenizer)"},
    {KEY(model, max_seq, F_INT), .def = "128", IRANGE(2, 1 << 22),
     .doc = "learned position embeddings (longest sequence)"},
    // Checked in config.c: its range depends on the arch.
    {KEY(model, type_vocab, F_INT), .set_bit = CONFIG_SET_TYPE_VOCAB, .def = "2",
     .def_doc = "bert 2 / gpt 0", .range_doc = "bert [1, 65536]; gpt 0",
     .doc = "BERT token-type vocabulary (GPT has no token types)"},
    {ENUM_KEY(model, norm, CONFIG_NORM_NAMES), .set_bit = CONFIG_SET_NORM, .def = "post",
     .def_doc = "bert `post` / gpt `pre`",
     .doc = "LayerNorm placement: `post` (BERT) or `pre` (GPT-2, with a final LayerNorm)"},
    {ENUM_KEY(model, activation, CONFIG_ACTIVATION_NAMES), .set_bit = CONFIG_SET_ACTIVATION,
     .def = "gelu", .def_doc = "bert `gelu` / gpt `gelu_tanh`",
     .doc = "FFN activation: erf GELU or the tanh approximation"},
    {KEY(model, ln_eps, F_FLOAT), .set_bit = CONFIG_SET_LN_EPS, .def = "1e-12",
     .def_doc = "bert 1e-12 / gpt 1e-5", FRANGE(0, 1, 1, 0), .doc = "LayerNorm epsilon"},
    {KEY(model, dropout, F_FLOAT), .def = "0.1", FRANGE(0, 0, 1, 1), .doc = "hidden dropout"},
    {KEY(model, attn_dropout, F_FLOAT), .def = "0.1", FRANGE(0, 0, 1, 1),
     .doc = "dropout on attention probabilities"},
    {KEY(model, init_std, F_FLOAT), .def = "0.02", FRANGE(0, 1, FMAX, 0),
     .doc = "weights and embeddings start as N(0, init_std²); GPT residual projections are "
            "scaled by 1/√(2L)"},
};

static const ConfigField ATTENTION_FIELDS[] = {
    {ENUM_KEY(attention, type, CONFIG_ATTENTION_NAMES), .def = "mha",
     .doc = "the attention variant (DESIGN.md §1)"},
};

// Keys that belong to individual attention variants.  They follow attention.type; when the
// variants declare their own keys this list is what they replace.
static const ConfigField ATTENTION_VARIANT_FIELDS[] = {
    {KEY(attention, groups, F_INT), .def = "0", IRANGE(0, UNBOUNDED),
     .doc = "`gqa` only: number of K/V heads g, required for gqa, must divide `model.heads` "
            "(g = n is MHA, g = 1 is MQA); ignored by the other types"},
    {KEY(attention, collab_dim, F_INT), .def = "0", .def_doc = "0 → n·d", IRANGE(0, 1 << 22),
     .doc = "`collab` only: width D̃ of the shared query/key space"},
    {KEY(attention, latent_dim, F_INT), .def = "0", .def_doc = "0 → 4·d", IRANGE(0, 1 << 22),
     .doc = "`mla` only: width d_c of the latent c = X W_DKV shared by every head's keys and "
            "values (DeepSeek-V2 uses 4·d)"},
    {KEY(attention, q_latent_dim, F_INT), .def = "0", IRANGE(0, 1 << 22),
     .doc = "`mla` only: width of the queries' own latent (Q_i = X W_DQ W_UQ^(i)); 0: queries "
            "straight from X as in `mha`"},
    {KEY(attention, embed_std, F_FLOAT), .def = "0.02", FRANGE(0, 0, FMAX, 0),
     .doc = "`mhe_add`/`mhe_mul`: head embeddings start as N(0, embed_std²); `collab`: mixing "
            "vectors start at 1 + N(0, embed_std²). 0 makes all heads identical forever"},
    {KEY(attention, fast_path, F_BOOL), .def = "true",
     .doc = "`mhe_*`: use the shared-score / shared-K,V identities instead of materialising "
            "per-head Q, K, V (same result)"},
};

static const ConfigField OBJECTIVE_FIELDS[] = {
    {ENUM_KEY(objective, type, CONFIG_OBJECTIVE_NAMES), .set_bit = CONFIG_SET_OBJECTIVE,
     .def = "mlm", .def_doc = "bert `mlm` / gpt `clm`",
     .doc = "masked (bert only) or causal (gpt only) language modelling"},
    {KEY(objective, mask_prob, F_FLOAT), .def = "0.15", FRANGE(0, 1, 1, 1),
     .doc = "MLM: fraction of non-special positions selected"},
    {KEY(objective, eval_mask_prob, F_FLOAT), .def = "0", FRANGE(0, 0, 1, 1),
     .doc = "MLM: the fraction selected in the validation split (loss, accuracy); 0: `mask_prob`. "
            "Lets runs trained at different masking rates be scored on the same positions"},
    {KEY(objective, mask_token_frac, F_FLOAT), .def = "0.8", FRANGE(0, 0, 1, 0),
     .doc = "MLM: of the selected, the fraction replaced by `[MASK]`"},
    {KEY(objective, random_token_frac, F_FLOAT), .def = "0.1", FRANGE(0, 0, 1, 0),
     .doc = "MLM: of the selected, the fraction replaced by a random token (the rest stay); "
            "`mask_token_frac + random_token_frac ≤ 1`"},
    {KEY(objective, whole_word, F_BOOL), .def = "false",
     .doc = "MLM: select whole words (WordPiece `##` continuations go with their word)"},
};

static const ConfigField DATA_FIELDS[] = {
    {PATHS_KEY(data, train, n_train), .def = "[]", .range_doc = "up to 16",
     .doc = "training shards: Megatron `.bin`/`.idx` prefixes (without extension) or globs; "
            "one string or a list"},
    {PATHS_KEY(data, valid, n_valid), .def = "[]", .range_doc = "up to 16",
     .doc = "held-out shards for evaluation, same form"},
    {KEY(data, tokenizer, F_STRING), .def = "",
     .doc = "tokenizer file: `vocab.txt` or `tokenizer.json` (WordPiece), `vocab.json` (next "
            "to `merges.txt`) or `tokenizer.json` (BPE)"},
    {ENUM_KEY(data, tokenizer_kind, CONFIG_TOKENIZER_NAMES), .set_bit = CONFIG_SET_TOKENIZER_KIND,
     .def = "wordpiece", .def_doc = "bert `wordpiece` / gpt `bpe`",
     .doc = "the tokenizer's algorithm; must be that of the `data.tokenizer` file (checked when "
            "the data is opened)"},
    {KEY(data, seq_len, F_INT), .def = "0", .def_doc = "0 → `model.max_seq`", IRANGE(0, UNBOUNDED),
     .range_doc = "2 ≤ seq_len ≤ `model.max_seq` once resolved", .doc = "training sequence length"},
    {KEY(data, shuffle_seed, F_U64), .def = "1234",
     .doc = "seed of the global sample order (independent of the number of workers)"},
};

static const ConfigField OPTIM_FIELDS[] = {
    {ENUM_KEY(optim, name, CONFIG_OPTIMIZER_NAMES), .def = "adamw", .doc = "the optimizer"},
    {KEY(optim, lr, F_FLOAT), .def = "1e-3", FRANGE(0, 1, FMAX, 0), .doc = "peak learning rate"},
    {KEY(optim, beta1, F_FLOAT), .def = "0.9", FRANGE(0, 0, 1, 1), .doc = "first-moment decay"},
    {KEY(optim, beta2, F_FLOAT), .def = "0.999", FRANGE(0, 0, 1, 1), .doc = "second-moment decay"},
    {KEY(optim, eps, F_FLOAT), .def = "1e-8", FRANGE(0, 1, FMAX, 0), .doc = "denominator epsilon"},
    {KEY(optim, weight_decay, F_FLOAT), .def = "0.01", FRANGE(0, 0, FMAX, 0),
     .doc = "decoupled weight decay"},
    {KEY(optim, decay_all, F_BOOL), .def = "false",
     .doc = "also decay biases, LayerNorm parameters and embeddings"},
    {KEY(optim, clip_norm, F_FLOAT), .def = "1.0", FRANGE(0, 0, FMAX, 0),
     .doc = "global gradient-norm clipping threshold; 0 disables"},
    {ENUM_KEY(optim, schedule, CONFIG_SCHEDULE_NAMES), .def = "linear",
     .doc = "after warmup: `linear` or `cosine` decay to `min_lr` at the last step, or `constant`"},
    {KEY(optim, warmup_steps, F_INT), .def = "20", IRANGE(0, UNBOUNDED),
     .doc = "linear warmup from 0 to `lr`; more than the run's steps is a warning (`lr` is never reached)"},
    {KEY(optim, min_lr, F_FLOAT), .def = "0.0", FRANGE(0, 0, FMAX, 0),
     .doc = "floor of the decay; min_lr ≤ lr"},
};

static const ConfigField TRAIN_FIELDS[] = {
    {KEY(train, global_batch, F_INT), .def = "32", IRANGE(1, 1 << 30),
     .doc = "sequences per optimizer step, summed over all workers"},
    {KEY(train, micro_batch, F_INT), .def = "8", IRANGE(1, 1 << 30),
     .doc = "sequences per forward/backward on one worker; must divide `global_batch` (and the "
            "trainer checks it divides `global_batch / world size`)"},
    {KEY(train, steps, F_I64), .set_bit = CONFIG_SET_STEPS, .def = "200", IRANGE(0, UNBOUNDED),
     .doc = "optimizer steps; when `tokens` is set, derived from it. If `steps` and `tokens` come "
            "from different places (a base, the file, an argument), the more derived one wins; "
            "written in the same place they must agree (`steps: 0` defers to `tokens`)"},
    {KEY(train, tokens, F_I64), .def = "0", IRANGE(0, UNBOUNDED),
     .doc = "token budget; > 0 sets `steps = ceil(tokens / (global_batch · seq_len))`"},
    {KEY(train, seed, F_U64), .def = "42", .doc = "seed of initialisation, masking and dropout"},
    {KEY(train, log_every, F_INT), .def = "10", IRANGE(1, UNBOUNDED),
     .doc = "steps between progress lines"},
    {KEY(train, eval_every, F_INT), .def = "100", IRANGE(0, UNBOUNDED),
     .doc = "steps between evaluations; 0 evaluates only at the end"},
    {KEY(train, eval_batches, F_INT), .def = "20", IRANGE(0, UNBOUNDED),
     .doc = "global batches per evaluation during training (the same batches each time); 0 = "
            "the whole validation split"},
    {KEY(train, final_eval_batches, F_INT), .def = "0", IRANGE(0, UNBOUNDED),
     .doc = "global batches of the evaluation at the end of the run; 0 = every sample of the "
            "validation split once (the number to compare runs by)"},
    {KEY(train, checkpoint_every, F_INT), .def = "100", IRANGE(0, UNBOUNDED),
     .doc = "steps between checkpoints; 0 checkpoints only at the end"},
    {KEY(train, keep_last, F_INT), .def = "3", IRANGE(0, UNBOUNDED),
     .doc = "checkpoints kept; 0 keeps all"},
    {KEY(train, out_dir, F_STRING), .def = "out/run", .range_doc = "non-empty",
     .doc = "run directory (checkpoints, metrics, TensorBoard events)"},
    {ENUM_KEY(train, on_nonfinite, CONFIG_NONFINITE_NAMES), .def = "skip",
     .doc = "a non-finite loss or gradient norm: `skip` the step, or `stop` keeping the last "
            "good checkpoint"},
    {KEY(train, init_from, F_STRING), .def = "",
     .doc = "weights-only initialisation from a checkpoint; `\"\"` = none"},
    {KEY(train, max_nonfinite, F_INT), .def = "10", IRANGE(0, UNBOUNDED),
     .doc = "this many non-finite steps in a row end the run with exit status 1 (NaN weights or "
            "data would otherwise skip every step and save a useless model); 0 never stops"},
    {ENUM_KEY(train, recompute, CONFIG_RECOMPUTE_NAMES), .def = "none",
     .doc = "activation recomputation, trading compute for memory (same losses, gradients and "
            "checkpoints bit for bit): `none` keeps every activation; `attention` keeps each "
            "layer but recomputes its attention block (projections, per-head copies, the "
            "attention core; pre-LN also LN1) before its backward; `layer` keeps only each "
            "layer's input and recomputes the whole layer (one layer's activations in memory)"},
    {KEY(train, time_limit_s, F_FLOAT), .def = "0", FRANGE(0, 0, FMAX, 0),
     .doc = "seconds of training after which this process stops at the next step boundary with a "
            "checkpoint and exit status 0, as `--stop-after` does (the same command resumes, with the "
            "limit afresh); counted from the first step (set-up excluded, evaluations and checkpoints "
            "during the run included); the schedule still spans `steps`; 0 = no limit"},
};

static const ConfigField DIST_FIELDS[] = {
    {ENUM_KEY(dist, backend, CONFIG_BACKEND_NAMES), .def = "auto",
     .doc = "gradient all-reduce: `auto` (NCCL on cuda, MPI on cpu), `mpi`, `nccl` (needs "
            "`runtime.device: cuda`)"},
    {KEY(dist, bucket_mb, F_FLOAT), .def = "25", FRANGE(0, 1, FMAX, 0),
     .doc = "all-reduce bucket size in MiB"},
    {KEY(dist, zero, F_INT), .def = "0", IRANGE(0, 1),
     .doc = "1 shards the optimizer state (ZeRO-1)"},
    {KEY(dist, timeout_s, F_FLOAT), .def = "300", FRANGE(0, 1, FMAX, 0),
     .doc = "deadline of every collective in seconds (the barrier after a checkpoint allows rank 0's save "
             "more); a dead or stuck peer ends the job"},
};

static const ConfigField RUNTIME_FIELDS[] = {
    {ENUM_KEY(runtime, device, CONFIG_DEVICE_NAMES), .def = "cpu",
     .doc = "one GPU per worker on cuda, chosen by local rank"},
    {KEY(runtime, threads, F_INT), .def = "0", IRANGE(0, 4096),
     .doc = "OpenMP threads per worker; 0 uses the OpenMP default"},
    {ENUM_KEY(runtime, precision, CONFIG_PRECISION_NAMES), .def = "auto",
     .doc = "`auto`: bf16 on cuda; on the CPU bf16 only where its matmuls beat fp32's on the model's "
             "product shapes (measured once per machine, cached; the run says which and why, and a resume "
             "keeps its checkpoint's choice); `fp32`; or `bf16`: activations stored in bf16 on either device and bf16 "
             "matmul operands, with fp32 accumulation, master weights, statistics and loss, on either device "
             "(a CPU without native bf16 emulates it and says so once, with the measured slowdown)"},
    {KEY(runtime, attention_core, F_STRING), .def = "auto", .range_doc = "auto or a core of `mhetrain info`",
     .doc = "the CUDA attention core: `auto` takes, per layer shape, the fastest that serves it (`cudnn`, then "
            "`gemm_bf16` in bf16 where flash has no tensor-core kernel, then the own `flash`, `gemm`, `plain`) and "
            "says which and why; a named core that cannot serve a "
            "layer is refused before training"},
};

// Fine-tuning (issue 14).  Cross-field checks and the per-format resolution: config.c check_task.
static const ConfigField TASK_FIELDS[] = {
    {ENUM_KEY(task, type, CONFIG_TASK_TYPE_NAMES), .def = "none",
     .doc = "`none` (pretraining, the LM/MLM head), or the head fine-tuning trains: "
            "`classification`, `regression` or `span` (must match the format)"},
    {KEY(task, format, F_STRING), .def = "",
     .range_doc = "cola sst2 mrpc qqp stsb mnli mnli_mm qnli rte wnli boolq cb superglue_rte wic "
                  "squad1 squad2 tsv jsonl",
     .doc = "the files' layout: GLUE TSV, SuperGLUE JSONL, SQuAD JSON, or generic `tsv` (header "
            "row) / `jsonl` with named columns; required when type is not none"},
    {KEY(task, train_file, F_STRING), .def = "", .doc = "training split (required when type is not none)"},
    {KEY(task, dev_file, F_STRING), .def = "",
     .doc = "dev split, evaluated every epoch (required when type is not none; it must have labels)"},
    {KEY(task, text_a, F_STRING), .def = "",
     .doc = "generic formats: column (tsv header name / jsonl key) of the first text; required"},
    {KEY(task, text_b, F_STRING), .def = "",
     .doc = "generic formats: column of the second text of a pair; `\"\"` = single text"},
    {KEY(task, label_column, F_STRING), .def = "",
     .doc = "generic formats: column of the label (classification) or target (regression); required"},
    {KEY(task, labels, F_STRING), .def = "",
     .doc = "generic classification: the label strings, comma-separated, in class-index order; "
            "required there, empty otherwise"},
    {KEY(task, num_labels, F_INT), .def = "0", .def_doc = "0 → from the format", IRANGE(0, 8),
     .doc = "outputs of the head: the format's label count (or `labels`'), 1 for regression, 0 for "
            "span; a value given must agree"},
    {KEY(task, metric, F_STRING), .def = "", .def_doc = "per format",
     .range_doc = "a metric the task reports, not `mse`",
     .doc = "primary metric (the best epoch is chosen by it): GLUE's per task (CoLA `mcc`, MRPC/QQP "
            "`acc_and_f1`, STS-B `corr`, CB `acc_and_f1_macro`, SQuAD `squad_f1`, else `accuracy`)"},
    {KEY(task, max_seq, F_INT), .def = "0", .def_doc = "0 → `data.seq_len`", IRANGE(0, 1 << 22),
     .range_doc = "≤ `model.max_seq` once resolved",
     .doc = "tokens per row (pairs are truncated longest-first to fit)"},
    {KEY(task, doc_stride, F_INT), .def = "0",
     .def_doc = "0 → min(128, window / 2), window = max_seq − max_query_len − 3", IRANGE(0, 1 << 22),
     .range_doc = "≤ the context window once resolved",
     .doc = "span: distance between the starts of consecutive context windows"},
    {KEY(task, max_query_len, F_INT), .def = "64", IRANGE(1, 1 << 22),
     .doc = "span: question tokens kept (the rest are cut)"},
    {KEY(task, max_answer_len, F_INT), .def = "30", IRANGE(1, 1 << 22),
     .doc = "span: longest answer (in tokens) the predictor considers"},
    {KEY(task, null_threshold, F_FLOAT), .def = "0", FRANGE(-FMAX, 0, FMAX, 0),
     .doc = "squad2: answer \"\" when the null score minus the best span's exceeds it (BERT's "
            "`null_score_diff_threshold`; the scores' `best_f1_thresh` is the dev-tuned value)"},
    {KEY(task, epochs, F_INT), .def = "3", IRANGE(1, 1 << 20),
     .doc = "passes over the training split; `train.steps`, when given, caps the steps"},
    {KEY(task, classifier_dropout, F_FLOAT), .def = "-1", .def_doc = "-1 → `model.dropout`",
     FRANGE(-1, 0, 1, 1),
     .doc = "dropout before the classifier/regressor; < 0 uses `model.dropout`"},
};

// Enum fields are written through an int pointer.
_Static_assert(sizeof(AttentionType) == sizeof(int) && sizeof(Arch) == sizeof(int),
               "enums must be int-sized");

#define LIST(a) {a, (int)(sizeof a / sizeof *a)}
static const struct {
    const ConfigField *fields;
    int n;
} LISTS[] = {
    LIST(MODEL_FIELDS), LIST(ATTENTION_FIELDS), LIST(ATTENTION_VARIANT_FIELDS),
    LIST(OBJECTIVE_FIELDS), LIST(DATA_FIELDS), LIST(OPTIM_FIELDS), LIST(TRAIN_FIELDS),
    LIST(DIST_FIELDS), LIST(RUNTIME_FIELDS), LIST(TASK_FIELDS),
};
#define N_LISTS (int)(sizeof LISTS / sizeof *LISTS)

int config_field_count(void) {
    int n = 0;
    for (int l = 0; l < N_LISTS; l++) n += LISTS[l].n;
    return n;
}

const ConfigField *config_field(int i) {
    for (int l = 0; l < N_LISTS; l++) {
        if (i < LISTS[l].n) return &LISTS[l].fields[i];
        i -= LISTS[l].n;
    }
    return NULL;
}

const ConfigField *config_field_find(const char *section, const char *key) {
    for (int i = 0, n = config_field_count(); i < n; i++) {
        const ConfigField *f = config_field(i);
        if (!strcmp(f->section, section) && !strcmp(f->key, key)) return f;
    }
    return NULL;
}

// A default is YAML text the table's author wrote; a bad one is a bug, reported as such.
static void set_default(Config *cfg, const ConfigField *f) {
    char *p = (char *)cfg + f->offset;
    char *end = NULL;
    long long i64 = 0;
    uint64_t u64 = 0;
    // The same number parser as the values users write (common/num.h).
    switch (f->type) {
    case F_INT:
        if (mhe_parse_int(f->def, INT32_MIN, INT32_MAX, &i64) == MHE_NUM_OK) end = (char *)f->def + strlen(f->def);
        *(int *)p = (int)i64;
        break;
    case F_I64:
        if (mhe_parse_int(f->def, INT64_MIN, INT64_MAX, &i64) == MHE_NUM_OK) end = (char *)f->def + strlen(f->def);
        *(int64_t *)p = (int64_t)i64;
        break;
    case F_U64:
        if (mhe_parse_u64(f->def, &u64) == MHE_NUM_OK) end = (char *)f->def + strlen(f->def);
        *(uint64_t *)p = u64;
        break;
    // strtof rounds once, like the float literal it replaces (the form checked first).
    case F_FLOAT:
        if (mhe_num_is_number(f->def)) *(float *)p = strtof(f->def, &end);
        break;
    case F_BOOL:
        *(bool *)p = !strcmp(f->def, "true");
        end = (char *)f->def + (!strcmp(f->def, "true") || !strcmp(f->def, "false") ? strlen(f->def) : 0);
        break;
    case F_ENUM:
        for (int i = 0; f->names[i]; i++)
            if (!strcmp(f->names[i], f->def)) {
                *(int *)p = i;
                end = (char *)f->def + strlen(f->def);
            }
        break;
    case F_STRING:
        *(char **)p = mhe_strdup(f->def);
        end = (char *)f->def + strlen(f->def);
        break;
    case F_PATHS:  // only the empty list
        *(int *)((char *)cfg + f->count_offset) = 0;
        if (!strcmp(f->def, "[]")) end = (char *)f->def + 2;
        break;
    }
    const bool ok = end && *end == '\0' && (end != f->def || f->type == F_STRING);
    if (!ok)
        mhe_fail("internal: bad default '%s' for %s.%s in the config table", f->def, f->section,
                 f->key);
}

// Defaults are sized for a laptop CPU: a 2-layer, 128-wide BERT trains in minutes.
// Arch-dependent fields hold their bert value until config_resolve.
void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    for (int i = 0, n = config_field_count(); i < n; i++) set_default(cfg, config_field(i));
}

void config_free(Config *cfg) {
    for (int i = 0, n = config_field_count(); i < n; i++) {
        const ConfigField *f = config_field(i);
        char *p = (char *)cfg + f->offset;
        if (f->type == F_STRING) free(*(char **)p);
        if (f->type == F_PATHS) {
            int count = *(int *)((char *)cfg + f->count_offset);
            for (int j = 0; j < count; j++) free(((char **)p)[j]);
        }
    }
    free(cfg->source);
    memset(cfg, 0, sizeof *cfg);
}

static void check_range(const ConfigMarks *m, const char *key, const ConfigField *f, double v,
                        long long iv) {
    const ConfigRange *r = &f->range;
    if (f->type == F_FLOAT) {
        int bad = v != v || (r->lo_open ? v <= r->lo : v < r->lo) || (r->hi_open ? v >= r->hi : v > r->hi);
        if (!bad) return;
        if (r->hi > 1e30)
            config_fail_key(m, key, "%s must be %s %g, got %g", key, r->lo_open ? ">" : ">=", r->lo, v);
        config_fail_key(m, key, "%s must be in %c%g, %g%c, got %g", key, r->lo_open ? '(' : '[',
                        r->lo, r->hi, r->hi_open ? ')' : ']', v);
    }
    if (v >= r->lo && v <= r->hi) return;
    if (r->hi >= 0x7fffffff)
        config_fail_key(m, key, "%s must be >= %lld, got %lld", key, (long long)r->lo, iv);
    config_fail_key(m, key, "%s must be in [%lld, %lld], got %lld", key, (long long)r->lo,
                    (long long)r->hi, iv);
}

void config_check_ranges(const Config *cfg, const ConfigMarks *marks, const char *section) {
    for (int i = 0, n = config_field_count(); i < n; i++) {
        const ConfigField *f = config_field(i);
        if (!f->ranged || strcmp(f->section, section) != 0) continue;
        char key[64];
        snprintf(key, sizeof key, "%s.%s", f->section, f->key);
        const char *p = (const char *)cfg + f->offset;
        switch (f->type) {
        case F_INT: check_range(marks, key, f, *(const int *)p, *(const int *)p); break;
        case F_I64:
            check_range(marks, key, f, (double)*(const int64_t *)p, (long long)*(const int64_t *)p);
            break;
        case F_FLOAT: check_range(marks, key, f, *(const float *)p, 0); break;
        default: mhe_fail("internal: %s has a range but no numeric type", key);
        }
    }
}

// Integer fields by "section.key", for code that holds a key name (the attention registry's).
static int *int_field(Config *c, const char *key) {
    const char *dot = strchr(key, '.');
    if (!dot) return NULL;
    char section[32];
    snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
    const ConfigField *f = config_field_find(section, dot + 1);
    return f && f->type == F_INT ? (int *)((char *)c + f->offset) : NULL;
}

int config_get_int(const Config *c, const char *key, int *value) {
    const int *p = int_field((Config *)c, key);
    if (p) *value = *p;
    return p != NULL;
}

int config_set_int(Config *c, const char *key, int value) {
    int *p = int_field(c, key);
    if (p) *p = value;
    return p != NULL;
}
