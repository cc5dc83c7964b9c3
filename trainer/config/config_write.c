// config_write_yaml: the resolved config as YAML that config_load reads back unchanged.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

// The shortest decimal that reads back to the same float, so the round trip is exact.
static void put_float(FILE *out, const char *key, float v) {
    char buf[64];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    // A bare integer would still load as a float; the dot only helps human readers.
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    fprintf(out, "  %s: %s\n", key, buf);
}

static void put_string_value(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", out);
        else if (*p == '\t') fputs("\\t", out);
        else if (*p < 0x20) fprintf(out, "\\x%02x", *p);
        else fputc(*p, out);
    }
    fputc('"', out);
}

static void put_string(FILE *out, const char *key, const char *s) {
    fprintf(out, "  %s: ", key);
    put_string_value(out, s ? s : "");
    fputc('\n', out);
}

static void put_list(FILE *out, const char *key, int n, char *const *items) {
    fprintf(out, "  %s: [", key);
    for (int i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        put_string_value(out, items[i]);
    }
    fputs("]\n", out);
}

#define PUT_INT(key, v) fprintf(out, "  %s: %lld\n", key, (long long)(v))
#define PUT_U64(key, v) fprintf(out, "  %s: %llu\n", key, (unsigned long long)(v))
#define PUT_BOOL(key, v) fprintf(out, "  %s: %s\n", key, (v) ? "true" : "false")
#define PUT_ENUM(key, names, v) fprintf(out, "  %s: %s\n", key, names[v])

void config_write_yaml(const Config *c, FILE *out) {
    fprintf(out, "# mhetrain resolved config%s%s\n", c->source ? " of " : "",
            c->source ? c->source : "");
    const ModelConfig *m = &c->model;
    fputs("model:\n", out);
    PUT_ENUM("arch", CONFIG_ARCH_NAMES, m->arch);
    PUT_INT("layers", m->layers);
    PUT_INT("hidden", m->hidden);
    PUT_INT("heads", m->heads);
    PUT_INT("head_dim", m->head_dim);
    PUT_INT("ffn", m->ffn);
    PUT_INT("vocab_size", m->vocab_size);
    PUT_INT("max_seq", m->max_seq);
    PUT_INT("type_vocab", m->type_vocab);
    PUT_ENUM("norm", CONFIG_NORM_NAMES, m->norm);
    PUT_ENUM("activation", CONFIG_ACTIVATION_NAMES, m->activation);
    put_float(out, "ln_eps", m->ln_eps);
    put_float(out, "dropout", m->dropout);
    put_float(out, "attn_dropout", m->attn_dropout);
    put_float(out, "init_std", m->init_std);

    const AttentionConfig *a = &c->attention;
    fputs("attention:\n", out);
    PUT_ENUM("type", CONFIG_ATTENTION_NAMES, a->type);
    PUT_INT("groups", a->groups);
    PUT_INT("collab_dim", a->collab_dim);
    PUT_INT("latent_dim", a->latent_dim);
    PUT_INT("q_latent_dim", a->q_latent_dim);
    put_float(out, "embed_std", a->embed_std);
    PUT_BOOL("fast_path", a->fast_path);

    const ObjectiveConfig *o = &c->objective;
    fputs("objective:\n", out);
    PUT_ENUM("type", CONFIG_OBJECTIVE_NAMES, o->type);
    put_float(out, "mask_prob", o->mask_prob);
    put_float(out, "mask_token_frac", o->mask_token_frac);
    put_float(out, "random_token_frac", o->random_token_frac);
    PUT_BOOL("whole_word", o->whole_word);

    const DataConfig *d = &c->data;
    fputs("data:\n", out);
    put_list(out, "train", d->n_train, d->train);
    put_list(out, "valid", d->n_valid, d->valid);
    put_string(out, "tokenizer", d->tokenizer);
    PUT_ENUM("tokenizer_kind", CONFIG_TOKENIZER_NAMES, d->tokenizer_kind);
    PUT_INT("seq_len", d->seq_len);
    PUT_U64("shuffle_seed", d->shuffle_seed);

    const OptimConfig *op = &c->optim;
    fputs("optim:\n", out);
    PUT_ENUM("name", CONFIG_OPTIMIZER_NAMES, op->name);
    put_float(out, "lr", op->lr);
    put_float(out, "beta1", op->beta1);
    put_float(out, "beta2", op->beta2);
    put_float(out, "eps", op->eps);
    put_float(out, "weight_decay", op->weight_decay);
    PUT_BOOL("decay_all", op->decay_all);
    put_float(out, "clip_norm", op->clip_norm);
    PUT_ENUM("schedule", CONFIG_SCHEDULE_NAMES, op->schedule);
    PUT_INT("warmup_steps", op->warmup_steps);
    put_float(out, "min_lr", op->min_lr);

    const TrainConfig *t = &c->train;
    fputs("train:\n", out);
    PUT_INT("global_batch", t->global_batch);
    PUT_INT("micro_batch", t->micro_batch);
    PUT_INT("steps", t->steps);
    PUT_INT("tokens", t->tokens);
    PUT_U64("seed", t->seed);
    PUT_INT("log_every", t->log_every);
    PUT_INT("eval_every", t->eval_every);
    PUT_INT("eval_batches", t->eval_batches);
    PUT_INT("checkpoint_every", t->checkpoint_every);
    PUT_INT("keep_last", t->keep_last);
    put_string(out, "out_dir", t->out_dir);
    PUT_ENUM("on_nonfinite", CONFIG_NONFINITE_NAMES, t->on_nonfinite);
    put_string(out, "init_from", t->init_from);

    fputs("dist:\n", out);
    PUT_ENUM("backend", CONFIG_BACKEND_NAMES, c->dist.backend);
    put_float(out, "bucket_mb", c->dist.bucket_mb);
    PUT_INT("zero", c->dist.zero);
    put_float(out, "timeout_s", c->dist.timeout_s);

    fputs("runtime:\n", out);
    PUT_ENUM("device", CONFIG_DEVICE_NAMES, c->runtime.device);
    PUT_INT("threads", c->runtime.threads);
    PUT_ENUM("precision", CONFIG_PRECISION_NAMES, c->runtime.precision);
}
