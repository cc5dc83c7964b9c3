// Config defaults, resolution of arch-dependent values and validation (ranges and shapes).
// Parsing lives in config_yaml.c / config_load.c, printing in config_write.c.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

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
const char *const CONFIG_BACKEND_NAMES[] = {"auto", "mpi", "nccl", NULL};
const char *const CONFIG_DEVICE_NAMES[] = {"cpu", "cuda", NULL};
const char *const CONFIG_PRECISION_NAMES[] = {"fp32", "bf16", NULL};
const char *const CONFIG_TOKENIZER_NAMES[] = {"wordpiece", "bpe", NULL};

const char *attention_type_name(AttentionType t) {
    return (unsigned)t < ATTN_TYPE_COUNT ? CONFIG_ATTENTION_NAMES[t] : "?";
}

const char *arch_name(Arch a) { return (unsigned)a <= ARCH_GPT ? CONFIG_ARCH_NAMES[a] : "?"; }

const char *objective_name(Objective o) {
    return (unsigned)o <= OBJ_CLM ? CONFIG_OBJECTIVE_NAMES[o] : "?";
}

// Defaults are sized for a laptop CPU: a 2-layer, 128-wide BERT trains in minutes.
// configs/README.md documents every one of them; keep the two in step.
void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    ModelConfig *m = &cfg->model;
    m->arch = ARCH_BERT;
    m->layers = 2;
    m->hidden = 128;
    m->heads = 4;
    m->head_dim = 0;
    m->ffn = 0;
    m->vocab_size = 8192;
    m->max_seq = 128;
    m->type_vocab = 2;
    m->norm = NORM_POST;
    m->activation = ACT_GELU_ERF;
    m->ln_eps = 1e-12f;
    m->dropout = 0.1f;
    m->attn_dropout = 0.1f;
    m->init_std = 0.02f;

    AttentionConfig *a = &cfg->attention;
    a->type = ATTN_MHA;
    a->groups = 0;
    a->collab_dim = 0;
    a->latent_dim = 0;
    a->q_latent_dim = 0;
    a->embed_std = 0.02f;
    a->fast_path = true;

    ObjectiveConfig *o = &cfg->objective;
    o->type = OBJ_MLM;
    o->mask_prob = 0.15f;
    o->mask_token_frac = 0.8f;
    o->random_token_frac = 0.1f;
    o->whole_word = false;

    DataConfig *d = &cfg->data;
    d->tokenizer = mhe_strdup("");
    d->tokenizer_kind = TOK_WORDPIECE;
    d->seq_len = 0;
    d->shuffle_seed = 1234;

    OptimConfig *op = &cfg->optim;
    op->name = OPT_ADAMW;
    op->lr = 1e-3f;
    op->beta1 = 0.9f;
    op->beta2 = 0.999f;
    op->eps = 1e-8f;
    op->weight_decay = 0.01f;
    op->decay_all = false;
    op->clip_norm = 1.0f;
    op->schedule = SCHED_LINEAR;
    op->warmup_steps = 20;
    op->min_lr = 0.0f;

    TrainConfig *t = &cfg->train;
    t->global_batch = 32;
    t->micro_batch = 8;
    t->steps = 200;
    t->tokens = 0;
    t->seed = 42;
    t->log_every = 10;
    t->eval_every = 100;
    t->eval_batches = 20;
    t->checkpoint_every = 100;
    t->keep_last = 3;
    t->out_dir = mhe_strdup("out/run");
    t->on_nonfinite = NONFINITE_SKIP;
    t->init_from = mhe_strdup("");

    DistConfig *ds = &cfg->dist;
    ds->backend = DIST_AUTO;
    ds->bucket_mb = 25.0f;
    ds->zero = 0;
    ds->timeout_s = 300.0f;

    RuntimeConfig *r = &cfg->runtime;
    r->device = DEVICE_CPU;
    r->threads = 0;
    r->precision = PREC_FP32;
}

void config_free(Config *cfg) {
    for (int i = 0; i < cfg->data.n_train; i++) free(cfg->data.train[i]);
    for (int i = 0; i < cfg->data.n_valid; i++) free(cfg->data.valid[i]);
    free(cfg->data.tokenizer);
    free(cfg->train.out_dir);
    free(cfg->train.init_from);
    free(cfg->source);
    memset(cfg, 0, sizeof *cfg);
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

// Fails at the first key of the '|'-separated list that the user wrote, else at the fallback.
__attribute__((format(printf, 3, 4))) _Noreturn static void fail_key(const ConfigMarks *m,
                                                                     const char *keys,
                                                                     const char *fmt, ...) {
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

static void check_int(const ConfigMarks *m, const char *key, long long v, long long lo, long long hi) {
    if (v < lo || v > hi) {
        if (hi >= 0x7fffffffLL)
            fail_key(m, key, "%s must be >= %lld, got %lld", key, lo, v);
        fail_key(m, key, "%s must be in [%lld, %lld], got %lld", key, lo, hi, v);
    }
}

#define BIG ((long long)1 << 40)

// Half-open or closed float ranges, spelled out in the message.
static void check_float(const ConfigMarks *m, const char *key, double v, double lo, int lo_open,
                        double hi, int hi_open) {
    int bad = v != v || (lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi);
    if (!bad) return;
    if (hi > 1e30)
        fail_key(m, key, "%s must be %s %g, got %g", key, lo_open ? ">" : ">=", lo, v);
    fail_key(m, key, "%s must be in %c%g, %g%c, got %g", key, lo_open ? '(' : '[', lo, hi,
             hi_open ? ')' : ']', v);
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
    // Upper bounds far beyond any real model keep every derived product (n*d, 4D, V*D) in range.
    check_int(mk, "model.layers", m->layers, 1, 10000);
    check_int(mk, "model.hidden", m->hidden, 1, 1 << 20);
    check_int(mk, "model.heads", m->heads, 1, 1 << 14);
    check_int(mk, "model.head_dim", m->head_dim, 0, 1 << 16);
    check_int(mk, "model.ffn", m->ffn, 0, 1 << 22);
    check_int(mk, "model.vocab_size", m->vocab_size, 2, 1 << 24);
    check_int(mk, "model.max_seq", m->max_seq, 2, 1 << 22);
    if (m->arch == ARCH_BERT)
        check_int(mk, "model.type_vocab", m->type_vocab, 1, 1 << 16);
    else if (m->type_vocab != 0)
        fail_key(mk, "model.type_vocab|model.arch",
                 "model.type_vocab must be 0 for arch gpt (GPT has no token types), got %d",
                 m->type_vocab);
    check_float(mk, "model.ln_eps", m->ln_eps, 0, 1, 1, 1);
    check_float(mk, "model.dropout", m->dropout, 0, 0, 1, 1);
    check_float(mk, "model.attn_dropout", m->attn_dropout, 0, 0, 1, 1);
    check_float(mk, "model.init_std", m->init_std, 0, 1, 1e38, 0);
    if (m->head_dim == 0) {
        if (m->hidden % m->heads != 0)
            fail_key(mk, "model.heads|model.hidden",
                     "model.hidden (%d) must be divisible by model.heads (%d) when model.head_dim "
                     "is 0 (d = D/n); set model.head_dim explicitly otherwise",
                     m->hidden, m->heads);
        m->head_dim = m->hidden / m->heads;
    }
    if ((long long)m->heads * m->head_dim > (1 << 22))
        fail_key(mk, "model.head_dim|model.heads",
                 "model.heads * model.head_dim must be <= %d, got %lld", 1 << 22,
                 (long long)m->heads * m->head_dim);
    if (m->ffn == 0) m->ffn = 4 * m->hidden;
}

static void check_attention(Config *c, const ConfigMarks *mk) {
    AttentionConfig *a = &c->attention;
    check_int(mk, "attention.groups", a->groups, 0, BIG);
    check_int(mk, "attention.collab_dim", a->collab_dim, 0, 1 << 22);
    check_int(mk, "attention.latent_dim", a->latent_dim, 0, 1 << 22);
    check_int(mk, "attention.q_latent_dim", a->q_latent_dim, 0, 1 << 22);
    check_float(mk, "attention.embed_std", a->embed_std, 0, 0, 1e38, 0);
    // The variant's own shape checks, then every variant's derived defaults (registry order).
    const AttnTypeSpec *spec = attention_type_spec(a->type);
    const char *keys = NULL;
    char msg[512];
    if (spec->check && spec->check(c, &keys, msg, sizeof msg)) fail_key(mk, keys, "%s", msg);
    for (int t = 0; t < ATTN_TYPE_COUNT; t++)
        if (attention_type_spec((AttentionType)t)->resolve) attention_type_spec((AttentionType)t)->resolve(c);
}

static void check_objective(Config *c, const ConfigMarks *mk) {
    ObjectiveConfig *o = &c->objective;
    if (o->type == OBJ_MLM && c->model.arch != ARCH_BERT)
        fail_key(mk, "objective.type|model.arch",
                 "objective.type mlm needs model.arch bert (gpt is causal: use clm)");
    if (o->type == OBJ_CLM && c->model.arch != ARCH_GPT)
        fail_key(mk, "objective.type|model.arch",
                 "objective.type clm needs model.arch gpt (bert is bidirectional: use mlm)");
    check_float(mk, "objective.mask_prob", o->mask_prob, 0, 1, 1, 1);
    check_float(mk, "objective.mask_token_frac", o->mask_token_frac, 0, 0, 1, 0);
    check_float(mk, "objective.random_token_frac", o->random_token_frac, 0, 0, 1, 0);
    if (o->mask_token_frac + o->random_token_frac > 1.0f + 1e-6f)
        fail_key(mk, "objective.random_token_frac|objective.mask_token_frac",
                 "objective.mask_token_frac + objective.random_token_frac must be <= 1, got "
                 "%g + %g", o->mask_token_frac, o->random_token_frac);
}

static void check_data(Config *c, const ConfigMarks *mk) {
    DataConfig *d = &c->data;
    check_int(mk, "data.seq_len", d->seq_len, 0, BIG);
    if (d->seq_len == 0) d->seq_len = c->model.max_seq;
    if (d->seq_len < 2) fail_key(mk, "data.seq_len", "data.seq_len must be >= 2, got %d", d->seq_len);
    if (d->seq_len > c->model.max_seq)
        fail_key(mk, "data.seq_len|model.max_seq",
                 "data.seq_len (%d) must be <= model.max_seq (%d), the number of learned "
                 "positions", d->seq_len, c->model.max_seq);
}

static void check_optim(Config *c, const ConfigMarks *mk) {
    OptimConfig *o = &c->optim;
    check_float(mk, "optim.lr", o->lr, 0, 1, 1e38, 0);
    check_float(mk, "optim.beta1", o->beta1, 0, 0, 1, 1);
    check_float(mk, "optim.beta2", o->beta2, 0, 0, 1, 1);
    check_float(mk, "optim.eps", o->eps, 0, 1, 1e38, 0);
    check_float(mk, "optim.weight_decay", o->weight_decay, 0, 0, 1e38, 0);
    check_float(mk, "optim.clip_norm", o->clip_norm, 0, 0, 1e38, 0);
    check_int(mk, "optim.warmup_steps", o->warmup_steps, 0, BIG);
    check_float(mk, "optim.min_lr", o->min_lr, 0, 0, 1e38, 0);
    if (o->min_lr > o->lr)
        fail_key(mk, "optim.min_lr|optim.lr", "optim.min_lr (%g) must be <= optim.lr (%g)",
                 o->min_lr, o->lr);
}

static void check_train(Config *c, const ConfigMarks *mk) {
    TrainConfig *t = &c->train;
    check_int(mk, "train.global_batch", t->global_batch, 1, 1 << 30);
    check_int(mk, "train.micro_batch", t->micro_batch, 1, 1 << 30);
    if (t->global_batch % t->micro_batch != 0)
        fail_key(mk, "train.micro_batch|train.global_batch",
                 "train.micro_batch (%d) must divide train.global_batch (%d)", t->micro_batch,
                 t->global_batch);
    if (t->steps < 0) fail_key(mk, "train.steps", "train.steps must be >= 0, got %lld", (long long)t->steps);
    if (t->tokens < 0) fail_key(mk, "train.tokens", "train.tokens must be >= 0, got %lld", (long long)t->tokens);
    if (t->tokens > 0) {
        // A token budget fixes the step count; an explicit different step count contradicts it.
        const int64_t per_step = (int64_t)t->global_batch * c->data.seq_len;
        const int64_t derived = (t->tokens + per_step - 1) / per_step;
        if ((c->explicit_fields & CONFIG_SET_STEPS) && t->steps != 0 && t->steps != derived)
            fail_key(mk, "train.steps|train.tokens",
                     "train.steps (%lld) contradicts train.tokens (%lld tokens = %lld steps of "
                     "%lld tokens); give one of them, or steps: 0",
                     (long long)t->steps, (long long)t->tokens, (long long)derived,
                     (long long)per_step);
        t->steps = derived;
        c->explicit_fields |= CONFIG_SET_STEPS;
    }
    if (t->steps == 0)
        fail_key(mk, "train.steps|train.tokens",
                 "train.steps or train.tokens must be > 0 (the training budget)");
    check_int(mk, "train.log_every", t->log_every, 1, BIG);
    check_int(mk, "train.eval_every", t->eval_every, 0, BIG);
    check_int(mk, "train.eval_batches", t->eval_batches, 1, BIG);
    check_int(mk, "train.checkpoint_every", t->checkpoint_every, 0, BIG);
    check_int(mk, "train.keep_last", t->keep_last, 0, BIG);
    if (!t->out_dir || !t->out_dir[0])
        fail_key(mk, "train.out_dir", "train.out_dir must be a non-empty directory path");
}

static void check_dist_runtime(Config *c, const ConfigMarks *mk) {
    check_float(mk, "dist.bucket_mb", c->dist.bucket_mb, 0, 1, 1e38, 0);
    check_int(mk, "dist.zero", c->dist.zero, 0, 1);
    check_float(mk, "dist.timeout_s", c->dist.timeout_s, 0, 1, 1e38, 0);
    check_int(mk, "runtime.threads", c->runtime.threads, 0, 4096);
    if (c->runtime.precision == PREC_BF16 && c->runtime.device == DEVICE_CPU)
        fail_key(mk, "runtime.precision|runtime.device",
                 "runtime.precision bf16 needs runtime.device cuda (the CPU backend computes "
                 "in fp32)");
    if (c->dist.backend == DIST_NCCL && c->runtime.device == DEVICE_CPU)
        fail_key(mk, "dist.backend|runtime.device",
                 "dist.backend nccl needs runtime.device cuda (use mpi or auto on the CPU)");
}

// Configs built in code can hold any integer in an enum field; YAML ones cannot.
static void check_enums(const Config *c, const ConfigMarks *mk) {
    struct { const char *key; int value; const char *const *names; } e[] = {
        {"model.arch", (int)c->model.arch, CONFIG_ARCH_NAMES},
        {"model.norm", (int)c->model.norm, CONFIG_NORM_NAMES},
        {"model.activation", (int)c->model.activation, CONFIG_ACTIVATION_NAMES},
        {"attention.type", (int)c->attention.type, CONFIG_ATTENTION_NAMES},
        {"objective.type", (int)c->objective.type, CONFIG_OBJECTIVE_NAMES},
        {"data.tokenizer_kind", (int)c->data.tokenizer_kind, CONFIG_TOKENIZER_NAMES},
        {"optim.name", (int)c->optim.name, CONFIG_OPTIMIZER_NAMES},
        {"optim.schedule", (int)c->optim.schedule, CONFIG_SCHEDULE_NAMES},
        {"train.on_nonfinite", (int)c->train.on_nonfinite, CONFIG_NONFINITE_NAMES},
        {"dist.backend", (int)c->dist.backend, CONFIG_BACKEND_NAMES},
        {"runtime.device", (int)c->runtime.device, CONFIG_DEVICE_NAMES},
        {"runtime.precision", (int)c->runtime.precision, CONFIG_PRECISION_NAMES},
    };
    for (size_t i = 0; i < sizeof e / sizeof *e; i++) {
        int n = 0;
        while (e[i].names[n]) n++;
        if (e[i].value < 0 || e[i].value >= n)
            fail_key(mk, e[i].key, "%s holds %d, not one of its %d values", e[i].key, e[i].value, n);
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
}

void config_resolve(Config *cfg, const char *where) {
    ConfigMarks none = {0};
    none.fallback_file = where ? where : "<config>";
    config_check(cfg, &none);
}
