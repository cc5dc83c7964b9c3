// mhetrain export against Hugging Face transformers (the oracle nobody here wrote).
//
// For each case (bert/gpt x every attention type, non-default norm placement, activation and
// head size): random non-trivial weights -> checkpoint_save -> `mhetrain export` -> our logits
// from trainer/model/model.h on real book text tokenized by data/tokenizer.h.  One Python run
// (check_export.py, venv transformers 4.41.2) then loads every export with AutoTokenizer and
// AutoModelFor{MaskedLM,CausalLM}.from_pretrained and records, per case: the class it got,
// missing/unexpected keys, whether AutoTokenizer's ids equal ours, and
// rel = ‖ours − theirs‖ / ‖theirs‖ over the full [B, T, V] logits.  The tests assert
// ids equal, no missing/unexpected keys, the expected class, and rel ≤ 1e-5; for CLM also that
// greedy generate() from a 5-token prompt picks the argmax of our logits at its last position.
//
// Bad inputs: a missing checkpoint, a corrupted one, --format hf on a non-mha model and a
// missing --out, --out into the checkpoint itself all exit 2 with a message naming the problem.
#include <cjson/cJSON.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "common/error.h"
#include "common/rng.h"
#include "data/tokenizer.h"
#include "kernels/ops.h"
#include "tests/common/test_util.h"
#include "trainer/io/checkpoint.h"
#include "trainer/model/model.h"
#include "trainer/io/safetensors.h"

#define REL_TOL 1e-5
#define MAX_SEQ 64
#define N_LINES 3

typedef struct {
    const char *name;
    Arch arch;
    AttentionType type;
    int norm;         // -1: arch default
    int activation;   // -1: arch default
    int head_dim;     // 0: D/n
    int groups;
    const char *format;        // NULL: auto
    const char *expect_class;  // the class from_pretrained must build
} ExportCase;

#define BERT_MHE "MheForMaskedLM"
#define GPT_MHE "MheForCausalLM"
// mha's stock-class exports and their fallbacks to the remote code...
static const ExportCase MHA_CASES[] = {
    {"bert_mha", ARCH_BERT, ATTN_MHA, -1, -1, 0, 1, NULL, "BertForMaskedLM"},
    {"bert_mha_tanh", ARCH_BERT, ATTN_MHA, -1, ACT_GELU_TANH, 0, 1, NULL, "BertForMaskedLM"},
    {"bert_mha_as_mhetrain", ARCH_BERT, ATTN_MHA, -1, -1, 0, 1, "mhetrain", BERT_MHE},
    {"bert_mha_pre_ln", ARCH_BERT, ATTN_MHA, NORM_PRE, -1, 0, 1, NULL, BERT_MHE},
    {"bert_mha_head_dim24", ARCH_BERT, ATTN_MHA, -1, -1, 24, 1, NULL, BERT_MHE},
    {"gpt_mha", ARCH_GPT, ATTN_MHA, -1, -1, 0, 1, NULL, "GPT2LMHeadModel"},
    {"gpt_mha_erf", ARCH_GPT, ATTN_MHA, -1, ACT_GELU_ERF, 0, 1, NULL, "GPT2LMHeadModel"},
    {"gpt_mha_as_mhetrain", ARCH_GPT, ATTN_MHA, -1, -1, 0, 1, "mhetrain", GPT_MHE},
    {"gpt_mha_post_ln", ARCH_GPT, ATTN_MHA, NORM_POST, -1, 0, 1, NULL, GPT_MHE},
};
#define N_MHA_CASES ((int)(sizeof MHA_CASES / sizeof MHA_CASES[0]))
// ...then every other registered attention type, both arches, through the remote code
// (its keys at the registry's test values; groups 0 = the test value).
static ExportCase CASES[N_MHA_CASES + 2 * ATTN_TYPE_COUNT];
static char CASE_NAMES[2 * ATTN_TYPE_COUNT][64];
static int N_CASES;

static void make_cases(void) {
    for (int i = 0; i < N_MHA_CASES; i++) CASES[N_CASES++] = MHA_CASES[i];
    for (int a = 0; a < 2; a++)
        for (int t = 0; t < ATTN_TYPE_COUNT; t++) {
            if (t == ATTN_MHA) continue;
            const Arch arch = a ? ARCH_GPT : ARCH_BERT;
            char *name = CASE_NAMES[a * ATTN_TYPE_COUNT + t];
            snprintf(name, 64, "%s_%s", arch_name(arch), attention_type_name((AttentionType)t));
            CASES[N_CASES++] = (ExportCase){name, arch, (AttentionType)t, -1, -1, 0, 0, NULL, a ? GPT_MHE : BERT_MHE};
        }
}
#define N_BAD 5  // bad-input tests after the cases

// Real text: pairs of consecutive lines (joined by a space) from the books of ../shared/data,
// of different lengths so the batch is padded, with accents and quotes.
static const struct {
    const char *book;
    int line;  // 1-based
} LINES[N_LINES] = {
    {"doyle-adventures-of-sherlock-holmes.txt", 1374},
    {"doyle-adventures-of-sherlock-holmes.txt", 306},
    {"newton-opticks.txt", 421},
};

typedef struct {
    char work[1024];
    char *text[N_LINES];
    cJSON *results;  // from check_export.py: {case: {...}}
    char python_log[1100];
    int passed;      // tests that reached their end: all of them -> the work dir is removed
} Fixture;

static Fixture g_fx;

static const char *env_or(const char *key, const char *dflt) {
    const char *v = getenv(key);
    return v && *v ? v : dflt;
}

static void shared_path(char *out, size_t n, const char *rel) {
    snprintf(out, n, "%s/../shared/data/%s", env_or("MHE_SOURCE_DIR", "."), rel);
}

static char *read_line_pair(const char *book, int line) {
    char path[1024];
    char rel[256];
    snprintf(rel, sizeof rel, "books/%s", book);
    shared_path(path, sizeof path, rel);
    size_t len;
    char *all = mhe_read_file(path, &len);
    char *out = mhe_calloc(len + 2, 1);
    size_t k = 0;
    int cur = 1;
    for (size_t i = 0; i < len && cur < line + 2; i++) {
        if (all[i] == '\n') {
            if (cur == line) out[k++] = ' ';
            cur++;
        } else if (cur >= line && all[i] != '\r') {
            out[k++] = all[i];
        }
    }
    free(all);
    assert_true(k > 20);
    return out;
}

static void make_config(const ExportCase *c, Config *cfg) {
    // The real tokenizers' vocabularies around a 64-wide model (ffn 0 = 4D).
    const int vocab = c->arch == ARCH_BERT ? 30522 : 50257;
    tiny_config(cfg, c->arch, c->type, (TinyShape){2, 64, 4, c->head_dim, 0, vocab, MAX_SEQ, 0.15f});
    ModelConfig *m = &cfg->model;
    if (c->norm >= 0) {
        m->norm = (NormPlacement)c->norm;
        cfg->explicit_fields |= CONFIG_SET_NORM;
    }
    if (c->activation >= 0) {
        m->activation = (Activation)c->activation;
        cfg->explicit_fields |= CONFIG_SET_ACTIVATION;
    }
    if (c->groups) cfg->attention.groups = c->groups;  // else tiny_config's test value
    cfg->attention.collab_dim = c->type == ATTN_COLLAB ? 48 : 0;
    char tok[1024];
    shared_path(tok, sizeof tok, c->arch == ARCH_BERT ? "tokenizers/bert-base-uncased-vocab.txt" : "tokenizers/gpt2-vocab.json");
    free(cfg->data.tokenizer);
    cfg->data.tokenizer = mhe_strdup(tok);
    cfg->data.seq_len = MAX_SEQ;
    config_resolve(cfg, "test_export");
}

static int run(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void write_ids_file(const char *path, const IdBuf *ids, int n) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int b = 0; b < n; b++) {
        for (size_t i = 0; i < ids[b].len; i++) fprintf(f, i ? " %d" : "%d", ids[b].ids[i]);
        fputc('\n', f);
    }
    fclose(f);
}

// Checkpoint, export, and our side of the comparison for one case; returns its cases.json entry.
static cJSON *prepare_case(const ExportCase *c, Backend *be, const Tokenizer *tok, int seed) {
    Config cfg;
    make_config(c, &cfg);
    ParamTable t;
    param_table_build(&t, &cfg);
    float *params = mhe_malloc(t.total * sizeof(float));
    test_fill_params(&t, params, 1000u + (uint64_t)seed, 0xE4);

    char run_dir[1200], exp_dir[1200], path[1400];
    snprintf(run_dir, sizeof run_dir, "%s/runs/%s", g_fx.work, c->name);
    snprintf(exp_dir, sizeof exp_dir, "%s/%s", g_fx.work, c->name);
    CheckpointState st = {.step = 7, .world_size = 1, .loss_scale = 1.0, .config_yaml = config_yaml_text(&cfg)};
    assert_int_equal(checkpoint_save(run_dir, &st, &t, params, NULL, 0), 0);
    free(st.config_yaml);
    // The run directory (its newest checkpoint) rather than the step dir: both are accepted.
    assert_int_equal(run("\"%s\" export \"%s\" --out \"%s\" %s%s > \"%s.log\" 2>&1", getenv("MHETRAIN"), run_dir, exp_dir,
                         c->format ? "--format " : "", c->format ? c->format : "", exp_dir),
                     0);

    // Our ids: tokenizer_encode, with [CLS] … [SEP] for BERT; padded batch for the model.
    const SpecialIds sp = tokenizer_special_ids(tok);
    IdBuf ids[N_LINES] = {{0}};
    int T = 0;
    for (int b = 0; b < N_LINES; b++) {
        if (c->arch == ARCH_BERT) idbuf_push(&ids[b], sp.cls);
        tokenizer_encode(tok, g_fx.text[b], strlen(g_fx.text[b]), &ids[b]);
        if (c->arch == ARCH_BERT) idbuf_push(&ids[b], sp.sep);
        assert_true(ids[b].len <= MAX_SEQ);
        if ((int)ids[b].len > T) T = (int)ids[b].len;
    }
    const int pad = c->arch == ARCH_BERT ? sp.pad : sp.eos;
    int32_t *batch = mhe_malloc((size_t)N_LINES * T * sizeof(int32_t));
    int32_t *mask = mhe_malloc((size_t)N_LINES * T * sizeof(int32_t));
    // BERT token types: 0 for the first half of each sequence, 1 after, so both rows of
    // embed.type matter (AutoTokenizer gives all 0 for one sentence; the ids are passed as is).
    int32_t *types = mhe_malloc((size_t)N_LINES * T * sizeof(int32_t));
    for (int b = 0; b < N_LINES; b++)
        for (int i = 0; i < T; i++) {
            const int real = i < (int)ids[b].len;
            batch[b * T + i] = real ? ids[b].ids[i] : pad;
            mask[b * T + i] = real;
            types[b * T + i] = 2 * i >= (int)ids[b].len;
        }
    Model *m = model_create(&cfg, be, N_LINES, T);
    model_set_params(m, params);
    model_forward(m, batch, c->arch == ARCH_BERT ? types : NULL, mask, NULL, N_LINES, T, 0);
    const size_t V = (size_t)cfg.model.vocab_size;
    float *logits = mhe_malloc((size_t)N_LINES * T * V * sizeof(float));
    model_download_logits(m, logits);

    StFile f;
    st_init(&f);
    const int64_t bt[2] = {N_LINES, T}, btv[3] = {N_LINES, T, (int64_t)V};
    st_add(&f, "input_ids", ST_I32, 2, bt, batch);
    st_add(&f, "attention_mask", ST_I32, 2, bt, mask);
    st_add(&f, "logits", ST_F32, 3, btv, logits);
    if (c->arch == ARCH_BERT) st_add(&f, "token_type_ids", ST_I32, 2, bt, types);
    snprintf(path, sizeof path, "%s.ours.safetensors", exp_dir);
    assert_int_equal(st_write(&f, path), 0);
    st_free(&f);
    snprintf(path, sizeof path, "%s.ids.txt", exp_dir);
    write_ids_file(path, ids, N_LINES);

    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", c->name);
    cJSON_AddStringToObject(e, "dir", exp_dir);
    cJSON_AddStringToObject(e, "arch", arch_name(c->arch));
    cJSON_AddBoolToObject(e, "remote", strncmp(c->expect_class, "Mhe", 3) == 0);

    for (int b = 0; b < N_LINES; b++) idbuf_free(&ids[b]);
    free(logits);
    model_free(m);
    free(batch);
    free(mask);
    free(types);
    free(params);
    param_table_free(&t);
    config_free(&cfg);
    return e;
}

static int setup(void **state) {
    (void)state;
    snprintf(g_fx.work, sizeof g_fx.work, "%s/export_test", env_or("MHE_BINARY_DIR", "."));
    assert_int_equal(run("rm -rf \"%s\" && mkdir -p \"%s/runs\"", g_fx.work, g_fx.work), 0);
    for (int b = 0; b < N_LINES; b++) g_fx.text[b] = read_line_pair(LINES[b].book, LINES[b].line);
    char text_path[1200];
    snprintf(text_path, sizeof text_path, "%s/lines.txt", g_fx.work);
    FILE *tf = fopen(text_path, "w");
    assert_non_null(tf);
    for (int b = 0; b < N_LINES; b++) fprintf(tf, "%s\n", g_fx.text[b]);
    fclose(tf);

    Backend *be = backend_cpu_create(2);
    char tok_path[1024];
    Tokenizer *toks[2];
    shared_path(tok_path, sizeof tok_path, "tokenizers/bert-base-uncased-vocab.txt");
    toks[ARCH_BERT] = tokenizer_load(tok_path);
    shared_path(tok_path, sizeof tok_path, "tokenizers/gpt2-vocab.json");
    toks[ARCH_GPT] = tokenizer_load(tok_path);
    cJSON *cases = cJSON_CreateArray();
    for (int i = 0; i < N_CASES; i++) cJSON_AddItemToArray(cases, prepare_case(&CASES[i], be, toks[CASES[i].arch], i));
    tokenizer_free(toks[0]);
    tokenizer_free(toks[1]);
    be->destroy(be);

    char path[1200], out[1200];
    snprintf(path, sizeof path, "%s/cases.json", g_fx.work);
    char *js = cJSON_Print(cases);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(js, f);
    fclose(f);
    free(js);
    cJSON_Delete(cases);
    snprintf(out, sizeof out, "%s/results.json", g_fx.work);
    snprintf(g_fx.python_log, sizeof g_fx.python_log, "%s/check_export.log", g_fx.work);
    const char *src = env_or("MHE_SOURCE_DIR", ".");
    int rc = run("HF_HOME=\"%s/hf_home\" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \"%s/.venv/bin/python\" "
                 "\"%s/tests/export/check_export.py\" \"%s\" \"%s\" \"%s\" > \"%s\" 2>&1",
                 g_fx.work, src, src, path, text_path, out, g_fx.python_log);
    if (rc != 0) run("cat \"%s\"", g_fx.python_log);
    assert_int_equal(rc, 0);
    run("cat \"%s\"", g_fx.python_log);
    char *text = mhe_read_file(out, NULL);
    g_fx.results = cJSON_Parse(text);
    free(text);
    assert_non_null(g_fx.results);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(g_fx.results);
    for (int b = 0; b < N_LINES; b++) free(g_fx.text[b]);
    // Exports are 10-30 MB each: keep them only when something failed (or MHE_KEEP_EXPORT_TEST).
    if (g_fx.passed == N_CASES + N_BAD && !getenv("MHE_KEEP_EXPORT_TEST")) run("rm -rf \"%s\"", g_fx.work);
    return 0;
}

static void check_case(void **state) {
    const ExportCase *c = *state;
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(g_fx.results, c->name);
    if (!r) fail_msg("%s: no result from check_export.py (see %s)", c->name, g_fx.python_log);
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(r, "error");
    if (cJSON_IsString(err)) fail_msg("%s: %s", c->name, err->valuestring);
    const cJSON *cls = cJSON_GetObjectItemCaseSensitive(r, "class");
    assert_true(cJSON_IsString(cls));
    assert_string_equal(cls->valuestring, c->expect_class);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "missing_keys")), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "unexpected_keys")), 0);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "mismatched_keys")), 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ids_equal")));
    const double rel = cJSON_GetObjectItemCaseSensitive(r, "rel_err")->valuedouble;
    const double norm = cJSON_GetObjectItemCaseSensitive(r, "ref_norm")->valuedouble;
    printf("  %-24s %-18s rel %.3g (|theirs| %.4g)\n", c->name, cls->valuestring, rel, norm);
    assert_true(norm > 1.0);  // non-trivial logits
    assert_true(rel <= REL_TOL);
    if (c->arch == ARCH_GPT) assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "generate_ok")));
    g_fx.passed++;
}

// Exit status and message of `mhetrain export ARGS`.
static int export_status(const char *args, const char *expect_in_message) {
    char log[1200];
    snprintf(log, sizeof log, "%s/bad.log", g_fx.work);
    int rc = run("\"%s\" export %s > \"%s\" 2>&1", getenv("MHETRAIN"), args, log);
    char *text = mhe_read_file(log, NULL);
    if (!strstr(text, expect_in_message)) fail_msg("expected \"%s\" in: %s", expect_in_message, text);
    free(text);
    return rc;
}

static void test_missing_checkpoint_exits_2(void **state) {
    (void)state;
    char args[2600];
    snprintf(args, sizeof args, "\"%s/no/such/ckpt\" --out \"%s/bad_out\"", g_fx.work, g_fx.work);
    assert_int_equal(export_status(args, "not a checkpoint"), 2);
    g_fx.passed++;
}

static void test_corrupt_checkpoint_exits_2(void **state) {
    (void)state;
    char src[1200], dst[1200], args[2600];
    snprintf(src, sizeof src, "%s/runs/bert_sha", g_fx.work);
    snprintf(dst, sizeof dst, "%s/runs/corrupt", g_fx.work);
    assert_int_equal(run("rm -rf \"%s\" && cp -r \"%s\" \"%s\"", dst, src, dst), 0);
    // Flip one byte of the weights inside the data section: only the checksum can notice.
    assert_int_equal(run("f=$(ls -d \"%s\"/checkpoints/step_*/model.safetensors) && "
                         "printf '\\x5a' | dd of=\"$f\" bs=1 seek=5000 conv=notrunc status=none",
                         dst),
                     0);
    snprintf(args, sizeof args, "\"%s\" --out \"%s/bad_out\"", dst, g_fx.work);
    assert_int_equal(export_status(args, "model.safetensors"), 2);
    struct stat st;
    assert_int_not_equal(stat(dst, &st), -1);
    g_fx.passed++;
}

static void test_format_hf_refuses_mhe(void **state) {
    (void)state;
    char args[2600];
    snprintf(args, sizeof args, "\"%s/runs/bert_mhe_mul\" --format hf --out \"%s/bad_out\"", g_fx.work, g_fx.work);
    assert_int_equal(export_status(args, "attention.type mha"), 2);
    g_fx.passed++;
}

static void test_missing_out_exits_2(void **state) {
    (void)state;
    char args[2600];
    snprintf(args, sizeof args, "\"%s/runs/bert_mha\"", g_fx.work);
    assert_int_equal(export_status(args, "missing --out"), 2);
    g_fx.passed++;
}

static void test_out_into_checkpoint_exits_2(void **state) {
    (void)state;
    char args[2600];
    snprintf(args, sizeof args, "\"%s/runs/gpt_sha/checkpoints/step_00000007\" --out \"%s/runs/gpt_sha/checkpoints/step_00000007\"",
             g_fx.work, g_fx.work);
    assert_int_equal(export_status(args, "is or holds the checkpoint"), 2);
    g_fx.passed++;
}

int main(void) {
    if (!getenv("MHETRAIN")) {
        fprintf(stderr, "MHETRAIN is not set (run through ctest)\n");
        return 1;
    }
    make_cases();
    struct CMUnitTest tests[sizeof CASES / sizeof CASES[0] + N_BAD];
    for (int i = 0; i < N_CASES; i++)
        tests[i] = (struct CMUnitTest){CASES[i].name, check_case, NULL, NULL, (void *)&CASES[i]};
    tests[N_CASES + 0] = (struct CMUnitTest)cmocka_unit_test(test_missing_checkpoint_exits_2);
    tests[N_CASES + 1] = (struct CMUnitTest)cmocka_unit_test(test_corrupt_checkpoint_exits_2);
    tests[N_CASES + 2] = (struct CMUnitTest)cmocka_unit_test(test_format_hf_refuses_mhe);
    tests[N_CASES + 3] = (struct CMUnitTest)cmocka_unit_test(test_missing_out_exits_2);
    tests[N_CASES + 4] = (struct CMUnitTest)cmocka_unit_test(test_out_into_checkpoint_exits_2);
    return _cmocka_run_group_tests("export", tests, N_CASES + N_BAD, setup, teardown);
}
