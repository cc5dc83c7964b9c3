// Config loading: round trip through config_write_yaml, base/override precedence, arch defaults.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "trainer/config/config.h"
#include "trainer/config/config_internal.h"

typedef struct {
    char dir[256];
} Scratch;

static void write_file(const Scratch *s, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int scratch_setup(void **state) {
    Scratch *s = calloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "/tmp/mhe_config_test_XXXXXX");
    if (!mkdtemp(s->dir)) return -1;
    *state = s;
    return 0;
}

static int scratch_teardown(void **state) {
    Scratch *s = *state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", s->dir);
    if (system(cmd) != 0) return -1;
    free(s);
    return 0;
}

static void assert_paths_equal(int na, char *const *a, int nb, char *const *b) {
    assert_int_equal(na, nb);
    for (int i = 0; i < na; i++) assert_string_equal(a[i], b[i]);
}

// Field-by-field: the sections without pointers compare as bytes (config_defaults zeroes
// padding), the others field by field.
static void assert_config_equal(const Config *a, const Config *b) {
    assert_memory_equal(&a->model, &b->model, sizeof a->model);
    assert_memory_equal(&a->attention, &b->attention, sizeof a->attention);
    assert_memory_equal(&a->objective, &b->objective, sizeof a->objective);
    assert_memory_equal(&a->optim, &b->optim, sizeof a->optim);
    assert_memory_equal(&a->dist, &b->dist, sizeof a->dist);
    assert_int_equal(a->runtime.device, b->runtime.device);
    assert_int_equal(a->runtime.threads, b->runtime.threads);
    assert_int_equal(a->runtime.precision, b->runtime.precision);
    assert_string_equal(a->runtime.attention_core, b->runtime.attention_core);
    assert_paths_equal(a->data.n_train, a->data.train, b->data.n_train, b->data.train);
    assert_paths_equal(a->data.n_valid, a->data.valid, b->data.n_valid, b->data.valid);
    assert_string_equal(a->data.tokenizer, b->data.tokenizer);
    assert_int_equal(a->data.tokenizer_kind, b->data.tokenizer_kind);
    assert_int_equal(a->data.seq_len, b->data.seq_len);
    assert_int_equal(a->data.shuffle_seed, b->data.shuffle_seed);
    const TrainConfig *x = &a->train, *y = &b->train;
    assert_int_equal(x->global_batch, y->global_batch);
    assert_int_equal(x->micro_batch, y->micro_batch);
    assert_int_equal(x->steps, y->steps);
    assert_int_equal(x->tokens, y->tokens);
    assert_int_equal(x->seed, y->seed);
    assert_int_equal(x->log_every, y->log_every);
    assert_int_equal(x->eval_every, y->eval_every);
    assert_int_equal(x->eval_batches, y->eval_batches);
    assert_int_equal(x->final_eval_batches, y->final_eval_batches);
    assert_int_equal(x->checkpoint_every, y->checkpoint_every);
    assert_int_equal(x->keep_last, y->keep_last);
    assert_string_equal(x->out_dir, y->out_dir);
    assert_int_equal(x->on_nonfinite, y->on_nonfinite);
    assert_string_equal(x->init_from, y->init_from);
    const TaskConfig *ta = &a->task, *tb = &b->task;
    assert_int_equal(ta->type, tb->type);
    assert_string_equal(ta->format, tb->format);
    assert_string_equal(ta->train_file, tb->train_file);
    assert_string_equal(ta->dev_file, tb->dev_file);
    assert_string_equal(ta->text_a, tb->text_a);
    assert_string_equal(ta->text_b, tb->text_b);
    assert_string_equal(ta->label_column, tb->label_column);
    assert_string_equal(ta->labels, tb->labels);
    assert_string_equal(ta->metric, tb->metric);
    assert_int_equal(ta->num_labels, tb->num_labels);
    assert_int_equal(ta->max_seq, tb->max_seq);
    assert_int_equal(ta->doc_stride, tb->doc_stride);
    assert_int_equal(ta->max_query_len, tb->max_query_len);
    assert_int_equal(ta->max_answer_len, tb->max_answer_len);
    assert_memory_equal(&ta->null_threshold, &tb->null_threshold, sizeof ta->null_threshold);
    assert_int_equal(ta->epochs, tb->epochs);
    assert_memory_equal(&ta->classifier_dropout, &tb->classifier_dropout, sizeof ta->classifier_dropout);
    assert_int_equal(a->explicit_fields, b->explicit_fields);
}

static void round_trip(const Scratch *s, const char *path, int n_over, char **over) {
    Config a, b;
    config_load(&a, path, n_over, over);
    char out[512];
    snprintf(out, sizeof out, "%s/resolved.yaml", s->dir);
    FILE *f = fopen(out, "w");
    assert_non_null(f);
    config_write_yaml(&a, f);
    fclose(f);
    config_load(&b, out, 0, NULL);
    assert_config_equal(&a, &b);
    config_free(&a);
    config_free(&b);
}

static void config_path(char *out, size_t cap, const char *name) {
    const char *src = getenv("MHE_SOURCE_DIR");
    snprintf(out, cap, "%s/configs/%s", src ? src : MHE_SOURCE_DIR, name);
}

static void test_written_yaml_loads_back_to_the_same_struct(void **state) {
    const char *names[] = {"quickstart.yaml", "bert-base-gqa.yaml", "bert-base-collab.yaml",
                           "gpt2-small-mhe-mul.yaml", "tiny-gpt-mha.yaml"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        config_path(path, sizeof path, names[i]);
        round_trip(*state, path, 0, NULL);
    }
    // Awkward values: odd floats, quotes and spaces in strings, a token budget, many paths.
    char *over[] = {"optim.lr=3.3e-4", "model.ln_eps=1e-7", "train.out_dir=out dir/\"q\"",
                    "data.train=[a, 'b c', d]", "train.tokens=1e6", "train.steps=0",
                    "attention.embed_std=0.1", "optim.min_lr=1e-5"};
    config_path(path, sizeof path, "tiny-bert.yaml");
    round_trip(*state, path, sizeof over / sizeof *over, over);
    // A fine-tuning task section: resolved num_labels, metric, max_seq and doc_stride load back.
    char *span[] = {"task.type=span", "task.format=squad2", "task.train_file=t.json",
                    "task.dev_file=d 'q'.json", "task.max_query_len=20", "task.classifier_dropout=0.05"};
    round_trip(*state, path, sizeof span / sizeof *span, span);
    char *generic[] = {"task.type=classification", "task.format=tsv", "task.train_file=t.tsv",
                       "task.dev_file=d.tsv", "task.text_a=s1", "task.text_b=s2",
                       "task.label_column=y", "task.labels=no,maybe,yes", "task.metric=mcc"};
    round_trip(*state, path, sizeof generic / sizeof *generic, generic);
}

static void test_file_overrides_base_and_arguments_override_file(void **state) {
    const Scratch *s = *state;
    char sub[300];
    snprintf(sub, sizeof sub, "%s/sub", s->dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    write_file(s, "root.yaml",
               "model:\n  layers: 3\n  hidden: 64\n  heads: 4\n  dropout: 0.2\n"
               "train:\n  out_dir: out/root\n  seed: 7\n");
    // The base path is relative to the including file, not to the working directory.
    write_file(s, "sub/mid.yaml", "base: ../root.yaml\nmodel:\n  layers: 5\n  heads: 8\n");
    write_file(s, "sub/leaf.yaml",
               "base: mid.yaml\nmodel:\n  heads: 2\nattention:\n  type: mhe_add\n");
    char path[512];
    snprintf(path, sizeof path, "%s/sub/leaf.yaml", s->dir);
    char *over[] = {"model.layers=7", "train.seed=11", "train.seed=12"};
    Config c;
    config_load(&c, path, 3, over);
    assert_int_equal(c.model.layers, 7);      // argument beats mid.yaml and root.yaml
    assert_int_equal(c.model.heads, 2);       // leaf beats mid
    assert_int_equal(c.model.hidden, 64);     // only in root: sections merge, not replace
    assert_int_equal(c.model.head_dim, 32);   // D/n from the merged values
    assert_float_equal(c.model.dropout, 0.2f, 0.0f);
    assert_int_equal(c.attention.type, ATTN_MHE_ADD);
    assert_int_equal(c.train.seed, 12);       // the last argument wins
    assert_string_equal(c.train.out_dir, "out/root");
    assert_string_equal(c.source, path);
    config_free(&c);

    config_load(&c, path, 0, NULL);
    assert_int_equal(c.model.layers, 5);
    assert_int_equal(c.train.seed, 7);
    config_free(&c);
}

static void test_arch_defaults_resolve_in_code(void **state) {
    (void)state;
    Config c;
    config_defaults(&c);
    c.model.arch = ARCH_GPT;
    c.model.hidden = 96;
    c.model.heads = 3;
    c.attention.type = ATTN_COLLAB;
    config_resolve(&c, "test");
    assert_int_equal(c.model.norm, NORM_PRE);
    assert_int_equal(c.model.activation, ACT_GELU_TANH);
    assert_float_equal(c.model.ln_eps, 1e-5f, 0.0f);
    assert_int_equal(c.model.type_vocab, 0);
    assert_int_equal(c.objective.type, OBJ_CLM);
    assert_int_equal(c.data.tokenizer_kind, TOK_BPE);
    assert_int_equal(c.model.head_dim, 32);
    assert_int_equal(c.model.ffn, 384);
    assert_int_equal(c.attention.collab_dim, 96);
    assert_int_equal(c.data.seq_len, c.model.max_seq);
    // Resolving again changes nothing.
    Config again = c;
    config_resolve(&again, "test");
    assert_memory_equal(&again, &c, sizeof c);
    config_free(&c);

    config_defaults(&c);
    config_resolve(&c, "test");
    assert_int_equal(c.model.arch, ARCH_BERT);
    assert_int_equal(c.model.norm, NORM_POST);
    assert_int_equal(c.model.activation, ACT_GELU_ERF);
    assert_float_equal(c.model.ln_eps, 1e-12f, 0.0f);
    assert_int_equal(c.model.type_vocab, 2);
    assert_int_equal(c.objective.type, OBJ_MLM);
    config_free(&c);
}

static void test_explicit_values_beat_arch_defaults(void **state) {
    const Scratch *s = *state;
    write_file(s, "gpt_post.yaml",
               "model:\n  arch: gpt\n  norm: post\n  activation: gelu\n  ln_eps: 1e-6\n"
               "data:\n  tokenizer_kind: wordpiece\n  train: corpus/one\n");
    char path[512];
    snprintf(path, sizeof path, "%s/gpt_post.yaml", s->dir);
    Config c;
    config_load(&c, path, 0, NULL);
    assert_int_equal(c.model.norm, NORM_POST);
    assert_int_equal(c.model.activation, ACT_GELU_ERF);
    assert_float_equal(c.model.ln_eps, 1e-6f, 0.0f);
    assert_int_equal(c.data.tokenizer_kind, TOK_WORDPIECE);
    assert_int_equal(c.model.type_vocab, 0);  // not given: the gpt default
    assert_int_equal(c.objective.type, OBJ_CLM);
    assert_int_equal(c.data.n_train, 1);      // a single string is a one-element list
    assert_string_equal(c.data.train[0], "corpus/one");
    config_free(&c);
}

static void test_token_budget_sets_steps(void **state) {
    const Scratch *s = *state;
    write_file(s, "budget.yaml",
               "model:\n  max_seq: 64\ndata:\n  seq_len: 50\ntrain:\n  global_batch: 8\n"
               "  micro_batch: 4\n  tokens: 1e4\n");
    char path[512];
    snprintf(path, sizeof path, "%s/budget.yaml", s->dir);
    Config c;
    config_load(&c, path, 0, NULL);
    assert_int_equal(c.train.tokens, 10000);
    assert_int_equal(c.train.steps, 25);  // ceil(10000 / (8 * 50))
    config_free(&c);
}

static void test_more_derived_budget_wins(void **state) {
    const Scratch *s = *state;
    write_file(s, "steps_base.yaml",
               "data:\n  seq_len: 100\ntrain:\n  global_batch: 10\n  micro_batch: 5\n  steps: 300\n");
    write_file(s, "tokens_child.yaml", "base: steps_base.yaml\ntrain:\n  tokens: 5e3\n");
    char path[512];
    snprintf(path, sizeof path, "%s/tokens_child.yaml", s->dir);
    Config c;
    config_load(&c, path, 0, NULL);  // the child's token budget beats the base's steps
    assert_int_equal(c.train.steps, 5);
    assert_int_equal(c.train.tokens, 5000);
    config_free(&c);

    char *steps_arg[] = {"train.steps=7"};
    config_load(&c, path, 1, steps_arg);  // an argument's steps beat the file's tokens
    assert_int_equal(c.train.steps, 7);
    assert_int_equal(c.train.tokens, 0);
    config_free(&c);

    snprintf(path, sizeof path, "%s/steps_base.yaml", s->dir);
    char *tokens_arg[] = {"train.tokens=2001"};
    config_load(&c, path, 1, tokens_arg);
    assert_int_equal(c.train.steps, 3);  // ceil(2001 / 1000)
    config_free(&c);
}

static void test_names_match_yaml_spellings(void **state) {
    (void)state;
    assert_string_equal(attention_type_name(ATTN_MHE_MUL), "mhe_mul");
    assert_string_equal(attention_type_name(ATTN_EL_ATT), "el_att");
    assert_string_equal(attention_type_name(ATTN_COLLAB), "collab");
    assert_string_equal(arch_name(ARCH_GPT), "gpt");
    assert_string_equal(objective_name(OBJ_MLM), "mlm");
}

// The field table is the only declaration of a key, so its shape is what the parser, the
// writer and the README rely on: every section known, each section's keys contiguous (the
// writer prints a section header when the section changes), no key or member twice, and the
// defaults the historic code set.
static void test_field_table_is_consistent(void **state) {
    (void)state;
    const int n = config_field_count();
    assert_true(n >= 60);
    int section_seen[16] = {0}, last = -1;
    for (int i = 0; i < n; i++) {
        const ConfigField *f = config_field(i);
        int s = 0;
        while (CONFIG_SECTIONS[s].name && strcmp(CONFIG_SECTIONS[s].name, f->section)) s++;
        assert_non_null(CONFIG_SECTIONS[s].name);
        if (s != last) {
            assert_false(section_seen[s]);
            assert_true(s > last);
            section_seen[s] = 1;
            last = s;
        }
        assert_ptr_equal(config_field_find(f->section, f->key), f);
        for (int j = 0; j < i; j++) assert_int_not_equal(config_field(j)->offset, f->offset);
        assert_non_null(f->def);
        assert_true(f->doc && f->doc[0]);
        assert_true(f->type != F_ENUM || f->names);
    }
    Config c;
    config_defaults(&c);
    assert_int_equal(c.model.arch, ARCH_BERT);
    assert_int_equal(c.model.layers, 2);
    assert_int_equal(c.model.hidden, 128);
    assert_true(c.model.ln_eps == 1e-12f && c.model.init_std == 0.02f);
    assert_int_equal(c.attention.type, ATTN_MHA);
    assert_true(c.attention.fast_path && c.attention.embed_std == 0.02f);
    assert_true(c.objective.mask_prob == 0.15f && !c.objective.whole_word);
    assert_string_equal(c.data.tokenizer, "");
    assert_int_equal(c.data.n_train, 0);
    assert_int_equal(c.data.shuffle_seed, 1234);
    assert_true(c.optim.lr == 1e-3f && c.optim.beta2 == 0.999f && c.optim.eps == 1e-8f);
    assert_int_equal(c.train.steps, 200);
    assert_int_equal(c.train.seed, 42);
    assert_string_equal(c.train.out_dir, "out/run");
    assert_true(c.dist.bucket_mb == 25.0f && c.dist.timeout_s == 300.0f);
    assert_int_equal(c.runtime.precision, PREC_AUTO);
    config_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_written_yaml_loads_back_to_the_same_struct,
                                        scratch_setup, scratch_teardown),
        cmocka_unit_test_setup_teardown(test_file_overrides_base_and_arguments_override_file,
                                        scratch_setup, scratch_teardown),
        cmocka_unit_test(test_arch_defaults_resolve_in_code),
        cmocka_unit_test_setup_teardown(test_explicit_values_beat_arch_defaults, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_token_budget_sets_steps, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test_setup_teardown(test_more_derived_budget_wins, scratch_setup,
                                        scratch_teardown),
        cmocka_unit_test(test_names_match_yaml_spellings),
        cmocka_unit_test(test_field_table_is_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
