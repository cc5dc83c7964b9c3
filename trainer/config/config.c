// Enum spellings, resolution of arch-dependent values and the checks that involve more than
// one field.  Each key's default and range live in the table of config_fields.c; parsing in
// config_yaml.c / config_load.c, printing in config_write.c and config_doc.c.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"
#include "trainer/config/task_formats.h"

const char *const CONFIG_ARCH_NAMES[] = {"bert", "gpt", NULL};
const char *const CONFIG_NORM_NAMES[] = {"post", "pre", NULL};
const char *const CONFIG_ACTIVATION_NAMES[] = {"gelu", "gelu_tanh", NULL};
#define MHE_ATTN_NAME_(E, name) #name,
const char *const CONFIG_ATTENTION_NAMES[] = {MHE_ATTENTION_TYPES(MHE_ATTN_NAME_) NULL};
#undef MHE_ATTN_NAME_
const char *const CONFIG_OBJECTIVE_NAMES[] = {"mlm", "clm", NULL};
const char *const CONFIG_OPTIMIZER_NAMES[] = {"adamw", "lamb", NULL};
const char *const CONFIG_SCHEDULE_NAMES[] = {"linear", "cosine", "constant", NULL};
const char *const CONFIG_NONFINITE_NAMES[] = {"skip", "stop", NULL};
const char *const CONFIG_RECOMPUTE_NAMES[] = {"none", "attention", "layer", NULL};
const char *const CONFIG_BACKEND_NAMES[] = {"auto", "mpi", "nccl", NULL};
const char *const CONFIG_DEVICE_NAMES[] = {"cpu", "cuda", NULL};
const char *const CONFIG_PRECISION_NAMES[] = {"fp32", "bf16", "auto", NULL};
const char *const CONFIG_TOKENIZER_NAMES[] = {"wordpiece", "bpe", NULL};
const char *const CONFIG_TASK_TYPE_NAMES[] = {"none", "classification", "regression", "span", NULL};

const char *attention_type_name(AttentionType t) {
    return (unsigned)t < ATTN_TYPE_COUNT ? CONFIG_ATTENTION_NAMES[t] : "?";
}

const char *arch_name(Arch a) { return (unsigned)a <= ARCH_GPT ? CONFIG_ARCH_NAMES[a] : "?"; }

const char *recompute_name(RecomputeMode r) {
    return (unsigned)r <= RECOMPUTE_LAYER ? CONFIG_RECOMPUTE_NAMES[r] : "?";
}

const char *objective_name(Objective o) {
    return (unsigned)o <= OBJ_CLM ? CONFIG_OBJECTIVE_NAMES[o] : "?";
}

void config_marks_set(ConfigMarks *m, const char *key, const char *file, int line, int col) {
    ConfigMark *k = NULL;
    for (int i = 0; i < m->count; i++)
        if (strcmp(m->marks[i].key, key) == 0) k = &m->marks[i];
    if (!k) {
        if (m->count == m->cap) {
            m->cap = m->cap ? 2 * m->cap : 64;
            m->marks = mhe_realloc(m->marks, (size_t)m->cap * sizeof *m->marks);
        }
        k = &m->marks[m->count++];
        snprintf(k->key, sizeof k->key, "%s", key);
    }
    k->file = file;
    k->line = line;
    k->col = col;
}

const ConfigMark *config_marks_find(const ConfigMarks *m, const char *key) {
    for (int i = 0; m && i < m->count; i++)
        if (strcmp(m->marks[i].key, key) == 0) return &m->marks[i];
    return NULL;
}

void config_marks_free(ConfigMarks *m) {
    free(m->marks);
    memset(m, 0, sizeof *m);
}

_Noreturn void config_fail_key(const ConfigMarks *m, const char *keys, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *p = keys;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        char key[48];
        snprintf(key, sizeof key, "%.*s", (int)n, p);
        const ConfigMark *k = config_marks_find(m, key);
        if (k) mhe_fail_at(k->file, k->line, k->col, "%s", msg);
        p += n + (bar ? 1 : 0);
    }
    mhe_fail_at(m->fallback_file ? m->fallback_file : "<config>", m->fallback_line,
                m->fallback_col, "%s", msg);
}

static void resolve_arch_defaults(Config *c) {
    const int gpt = c->model.arch == ARCH_GPT;
    unsigned set = c->explicit_fields;
    if (!(set & CONFIG_SET_NORM)) c->model.norm = gpt ? NORM_PRE : NORM_POST;
    if (!(set & CONFIG_SET_ACTIVATION)) c->model.activation = gpt ? ACT_GELU_TANH : ACT_GELU_ERF;
    if (!(set & CONFIG_SET_LN_EPS)) c->model.ln_eps = gpt ? 1e-5f : 1e-12f;
    if (!(set & CONFIG_SET_TYPE_VOCAB)) c->model.type_vocab = gpt ? 0 : 2;
    if (!(set & CONFIG_SET_OBJECTIVE)) c->objective.type = gpt ? OBJ_CLM : OBJ_MLM;
    if (!(set & CONFIG_SET_TOKENIZER_KIND)) c->data.tokenizer_kind = gpt ? TOK_BPE : TOK_WORDPIECE;
    c->explicit_fields |= CONFIG_SET_NORM | CONFIG_SET_ACTIVATION | CONFIG_SET_LN_EPS |
                          CONFIG_SET_TYPE_VOCAB | CONFIG_SET_OBJECTIVE | CONFIG_SET_TOKENIZER_KIND;
}

static void check_model(Config *c, const ConfigMarks *mk) {
    ModelConfig *m = &c->model;
    config_check_ranges(c, mk, "model");
    if (m->arch == ARCH_BERT) {
        if (m->type_vocab < 1 || m->type_vocab > (1 << 16))
            config_fail_key(mk, "model.type_vocab", "model.type_vocab must be in [1, 65536], got %d",
                            m->type_vocab);
    } else if (m->type_vocab != 0)
        config_fail_key(mk, "model.type_vocab|model.arch",
                        "model.type_vocab must be 0 for arch gpt (GPT has no token types), got %d",
                        m->type_vocab);
    if (m->head_dim == 0) {
        if (m->hidden % m->heads != 0)
            config_fail_key(mk, "model.heads|model.hidden",
                            "model.hidden (%d) must be divisible by model.heads (%d) when model.head_dim "
                            "is 0 (d = D/n); set model.head_dim explicitly otherwise",
                            m->hidden, m->heads);
        m->head_dim = m->hidden / m->heads;
    }
    if ((long long)m->heads * m->head_dim > (1 << 22))
        config_fail_key(mk, "model.head_dim|model.heads",
                        "model.heads * model.head_dim must be <= %d, got %lld", 1 << 22,
                        (long long)m->heads * m->head_dim);
    if (m->ffn == 0) m->ffn = 4 * m->hidden;
}

static void check_attention(Config *c, const ConfigMarks *mk) {
    AttentionConfig *a = &c->attention;
    config_check_ranges(c, mk, "attention");
    // The variant's own shape checks, then every variant's derived defaults (registry order).
    const AttnTypeSpec *spec = attention_type_spec(a->type);
    const char *keys = NULL;
    char msg[512];
    if (spec->check && spec->check(c, &keys, msg, sizeof msg)) config_fail_key(mk, keys, "%s", msg);
    for (int t = 0; t < ATTN_TYPE_COUNT; t++)
        if (attention_type_spec((AttentionType)t)->resolve) attention_type_spec((AttentionType)t)->resolve(c);
}

static void check_objective(Config *c, const ConfigMarks *mk) {
    ObjectiveConfig *o = &c->objective;
    if (o->type == OBJ_MLM && c->model.arch != ARCH_BERT)
        config_fail_key(mk, "objective.type|model.arch",
                        "objective.type mlm needs model.arch bert (gpt is causal: use clm)");
    if (o->type == OBJ_CLM && c->model.arch != ARCH_GPT)
        config_fail_key(mk, "objective.type|model.arch",
                        "objective.type clm needs model.arch gpt (bert is bidirectional: use mlm)");
    config_check_ranges(c, mk, "objective");
    if (o->mask_token_frac + o->random_token_frac > 1.0f + 1e-6f)
        config_fail_key(mk, "objective.random_token_frac|objective.mask_token_frac",
                        "objective.mask_token_frac + objective.random_token_frac must be <= 1, got "
                        "%g + %g", o->mask_token_frac, o->random_token_frac);
}

static void check_data(Config *c, const ConfigMarks *mk) {
    DataConfig *d = &c->data;
    config_check_ranges(c, mk, "data");
    if (d->seq_len == 0) d->seq_len = c->model.max_seq;
    if (d->seq_len < 2) config_fail_key(mk, "data.seq_len", "data.seq_len must be >= 2, got %d", d->seq_len);
    if (d->seq_len > c->model.max_seq)
        config_fail_key(mk, "data.seq_len|model.max_seq",
                        "data.seq_len (%d) must be <= model.max_seq (%d), the number of learned "
                        "positions", d->seq_len, c->model.max_seq);
}

static void check_optim(Config *c, const ConfigMarks *mk) {
    OptimConfig *o = &c->optim;
    config_check_ranges(c, mk, "optim");
    if (o->min_lr > o->lr)
        config_fail_key(mk, "optim.min_lr|optim.lr", "optim.min_lr (%g) must be <= optim.lr (%g)",
                        o->min_lr, o->lr);
}

static void check_train(Config *c, const ConfigMarks *mk) {
    TrainConfig *t = &c->train;
    config_check_ranges(c, mk, "train");
    if (t->global_batch % t->micro_batch != 0)
        config_fail_key(mk, "train.micro_batch|train.global_batch",
                        "train.micro_batch (%d) must divide train.global_batch (%d)", t->micro_batch,
                        t->global_batch);
    if (t->tokens > 0) {
        // A token budget fixes the step count; an explicit different step count contradicts it.
        const int64_t per_step = (int64_t)t->global_batch * c->data.seq_len;
        const int64_t derived = (t->tokens + per_step - 1) / per_step;
        if ((c->explicit_fields & CONFIG_SET_STEPS) && t->steps != 0 && t->steps != derived)
            config_fail_key(mk, "train.steps|train.tokens",
                            "train.steps (%lld) contradicts train.tokens (%lld tokens = %lld steps of "
                            "%lld tokens); give one of them, or steps: 0",
                            (long long)t->steps, (long long)t->tokens, (long long)derived,
                            (long long)per_step);
        t->steps = derived;
        c->explicit_fields |= CONFIG_SET_STEPS;
    }
    // Fine-tuning's budget is task.epochs (train.steps > 0 only caps it).
    if (t->steps == 0 && c->task.type == TASK_NONE)
        config_fail_key(mk, "train.steps|train.tokens",
                        "train.steps or train.tokens must be > 0 (the training budget)");
    if (!t->out_dir || !t->out_dir[0])
        config_fail_key(mk, "train.out_dir", "train.out_dir must be a non-empty directory path");
}

static void check_dist_runtime(Config *c, const ConfigMarks *mk) {
    config_check_ranges(c, mk, "dist");
    config_check_ranges(c, mk, "runtime");
    if (c->dist.backend == DIST_NCCL && c->runtime.device == DEVICE_CPU)
        config_fail_key(mk, "dist.backend|runtime.device",
                        "dist.backend nccl needs runtime.device cuda (use mpi or auto on the CPU)");
    const char *core = c->runtime.attention_core;
    if (!core || !core[0])
        config_fail_key(mk, "runtime.attention_core", "runtime.attention_core must be auto or a core's name");
    // The names of the CUDA cores are the backend's (checked when it is created, before training).
    if (c->runtime.device == DEVICE_CPU && strcmp(core, "auto") != 0)
        config_fail_key(mk, "runtime.attention_core|runtime.device",
                        "runtime.attention_core %s is a CUDA core; runtime.device cpu has one (auto)", core);
}

static int count_labels(const char *labels) {
    int n = 0;
    for (const char *p = labels; p && *p; n++) {
        const char *comma = strchr(p, ',');
        if (!comma) return n + 1;
        p = comma + 1;
        if (!*p) return -1;  // a trailing comma: an empty label
    }
    return n;
}

// The task section (issue 14): the format decides the type, the labels and the default metric.
// Nothing is checked for type none (pretraining), so a pretraining config may carry a task
// section a fine-tuning run will complete with overrides.
static void check_task(Config *c, const ConfigMarks *mk) {
    TaskConfig *t = &c->task;
    config_check_ranges(c, mk, "task");
    if (t->type == TASK_NONE) return;
    const char *tname = CONFIG_TASK_TYPE_NAMES[t->type];
    if (!t->format || !t->format[0])
        config_fail_key(mk, "task.format|task.type", "task.format is required for task.type %s (one of: %s)",
                        tname, task_format_names());
    const TaskFormatSpec *fmt = task_format_find(t->format);
    if (!fmt)
        config_fail_key(mk, "task.format", "task.format: expected one of %s, found '%s'",
                        task_format_names(), t->format);
    if (fmt->type != TASK_NONE && fmt->type != t->type)
        config_fail_key(mk, "task.type|task.format", "task.format %s is a %s task, but task.type is %s",
                        fmt->name, CONFIG_TASK_TYPE_NAMES[fmt->type], tname);
    if (!t->train_file || !t->train_file[0])
        config_fail_key(mk, "task.train_file|task.type", "task.train_file is required for task.type %s", tname);
    if (!t->dev_file || !t->dev_file[0])
        config_fail_key(mk, "task.dev_file|task.type", "task.dev_file is required for task.type %s", tname);
    int labels = fmt->num_labels;
    if (fmt->family == TASK_FAMILY_GENERIC) {
        if (t->type == TASK_SPAN)
            config_fail_key(mk, "task.type|task.format",
                            "task.format %s reads classification or regression tasks; span tasks use "
                            "squad1 or squad2", fmt->name);
        if (!t->text_a || !t->text_a[0])
            config_fail_key(mk, "task.text_a|task.format", "task.text_a (the column of the first text) "
                            "is required for task.format %s", fmt->name);
        if (!t->label_column || !t->label_column[0])
            config_fail_key(mk, "task.label_column|task.format", "task.label_column is required for "
                            "task.format %s", fmt->name);
        if (t->type == TASK_CLASSIFICATION) {
            labels = count_labels(t->labels);
            if (labels < 2 || labels > TASK_MAX_LABELS)
                config_fail_key(mk, "task.labels|task.format",
                                "task.labels: expected 2 to %d comma-separated label strings for a "
                                "%s classification task, found '%s'", TASK_MAX_LABELS, fmt->name,
                                t->labels ? t->labels : "");
        } else {
            labels = 1;
        }
    }
    if (t->labels && t->labels[0] && !(fmt->family == TASK_FAMILY_GENERIC && t->type == TASK_CLASSIFICATION))
        config_fail_key(mk, "task.labels", "task.labels is for generic classification (tsv/jsonl); "
                        "format %s defines its own labels", fmt->name);
    if (t->num_labels != 0 && t->num_labels != labels)
        config_fail_key(mk, "task.num_labels", "task.num_labels is %d, but task.format %s%s has %d",
                        t->num_labels, fmt->name, fmt->family == TASK_FAMILY_GENERIC ? " (task.labels)" : "",
                        labels);
    t->num_labels = labels;
    const char *names[TASK_MAX_METRICS];
    const int n = task_metric_names(t->type, labels, !strcmp(fmt->name, "squad2"), names);
    if (!t->metric || !t->metric[0]) {
        free(t->metric);
        t->metric = mhe_strdup(fmt->default_metric ? fmt->default_metric
                               : t->type == TASK_REGRESSION ? "corr" : "accuracy");
    }
    int known = 0;
    char list[256] = "";
    // The best epoch has the highest primary metric, so an error measure cannot be primary.
    if (!strcmp(t->metric, "mse"))
        config_fail_key(mk, "task.metric", "task.metric: mse cannot choose the best epoch (the highest "
                        "primary metric wins); use pearson, spearman or corr (it is reported anyway)");
    if (!strcmp(t->metric, "best_f1_thresh"))
        config_fail_key(mk, "task.metric", "task.metric: best_f1_thresh is a threshold, not a score; "
                        "use best_f1 (it is reported anyway)");
    for (int i = 0; i < n; i++) {
        if (!strcmp(names[i], "mse") || !strcmp(names[i], "best_f1_thresh")) continue;
        known |= !strcmp(names[i], t->metric);
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", names[i]);
    }
    if (!known)
        config_fail_key(mk, "task.metric", "task.metric: expected one of %s for format %s, found '%s'",
                        list, fmt->name, t->metric);
    if (t->max_seq == 0) t->max_seq = c->data.seq_len;
    if (t->max_seq < 4 || t->max_seq > c->model.max_seq)
        config_fail_key(mk, "task.max_seq|model.max_seq",
                        "task.max_seq (%d) must be in [4, model.max_seq = %d]", t->max_seq, c->model.max_seq);
    if (t->type == TASK_SPAN) {
        const int window = t->max_seq - t->max_query_len - 3;
        if (window < 1)
            config_fail_key(mk, "task.max_query_len|task.max_seq",
                            "task.max_query_len (%d) leaves no room for the context in task.max_seq "
                            "(%d tokens: question, context and 3 special tokens)",
                            t->max_query_len, t->max_seq);
        if (t->doc_stride == 0) t->doc_stride = window / 2 < 128 ? (window / 2 > 0 ? window / 2 : 1) : 128;
        if (t->doc_stride > window)
            config_fail_key(mk, "task.doc_stride|task.max_seq",
                            "task.doc_stride (%d) must be <= the context window max_seq - max_query_len "
                            "- 3 = %d, or context tokens would fall between windows", t->doc_stride, window);
    }
}

// Configs built in code can hold any integer in an enum field; YAML ones cannot.
static void check_enums(const Config *c, const ConfigMarks *mk) {
    for (int i = 0, nf = config_field_count(); i < nf; i++) {
        const ConfigField *f = config_field(i);
        if (f->type != F_ENUM) continue;
        const int value = *(const int *)((const char *)c + f->offset);
        int n = 0;
        while (f->names[n]) n++;
        if (value < 0 || value >= n) {
            char key[64];
            snprintf(key, sizeof key, "%s.%s", f->section, f->key);
            config_fail_key(mk, key, "%s holds %d, not one of its %d values", key, value, n);
        }
    }
}

void config_check(Config *cfg, const ConfigMarks *marks) {
    check_enums(cfg, marks);
    resolve_arch_defaults(cfg);
    check_model(cfg, marks);
    check_attention(cfg, marks);
    check_objective(cfg, marks);
    check_data(cfg, marks);
    check_optim(cfg, marks);
    check_train(cfg, marks);
    check_dist_runtime(cfg, marks);
    check_task(cfg, marks);
}

void config_resolve(Config *cfg, const char *where) {
    ConfigMarks none = {0};
    none.fallback_file = where ? where : "<config>";
    config_check(cfg, &none);
}
