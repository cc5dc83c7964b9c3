// Checkpoints: bit-exact round trip, the latest pointer, keep-last-K, corrupt and partial
// checkpoints skipped with a message, load errors naming file and tensor (exit 2).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common/error.h"
#include "common/sha256.h"
#include "common/rng.h"
#include "tests/infra/infra_util.h"
#include "trainer/io/checkpoint.h"
#include "trainer/io/safetensors.h"
#include "trainer/train/optim.h"  // optim_state_init: the state the checkpoint holds

typedef struct {
    ParamTable t;
    float *params;
    OptimState opt;
    CheckpointState st;
} Run;

static const char *YAML = "model:\n  arch: bert\n  hidden: 6\noptim:\n  lr: 1.0e-3\n";

static void run_make(Run *r, int64_t step) {
    infra_table(&r->t, 1);
    r->params = mhe_malloc(r->t.total * sizeof(float));
    optim_state_init(&r->opt, &r->t, 0, r->t.total);
    Rng g = rng_stream(77, (uint64_t)step, 0);
    for (size_t i = 0; i < r->t.total; i++) {
        r->params[i] = (float)rng_next_normal(&g);
        r->opt.m[i] = (float)rng_next_normal(&g);
        r->opt.v[i] = (float)rng_next_uniform(&g);
    }
    r->opt.step = step;
    memset(&r->st, 0, sizeof r->st);
    r->st.step = step;
    r->st.consumed_samples = step * 32;
    r->st.rng_seed = 0xfedcba9876543210ULL;  // above 2^53: must survive JSON
    r->st.rng_offset = (uint64_t)step * 1000 + 7;
    r->st.loss_scale = 65536.0;
    r->st.world_size = 2;
    r->st.config_yaml = (char *)YAML;
}

static void run_free(Run *r) {
    free(r->params);
    optim_state_free(&r->opt);
    param_table_free(&r->t);
}

static void save_steps(const char *out, int from, int to, int keep) {
    for (int s = from; s <= to; s++) {
        Run r;
        run_make(&r, s);
        assert_int_equal(checkpoint_save(out, &r.st, &r.t, r.params, &r.opt, keep), 0);
        run_free(&r);
    }
}

static int exists(const char *dir, const char *name) {
    char p[4400];
    if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p) fail();
    return access(p, F_OK) == 0;
}

// find_latest with stderr captured into `err`.
static char *find_latest_capturing(const char *out, char *err, size_t n) {
    char path[4400];
    snprintf(path, sizeof path, "%s/stderr.txt", out);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    char *found = checkpoint_find_latest(out);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t k = fread(err, 1, n - 1, f);
    err[k] = '\0';
    fclose(f);
    return found;
}

static void test_round_trip_is_bit_exact(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_roundtrip");
    save_steps(out, 3, 3, 0);
    Run a, b;
    run_make(&a, 3);
    run_make(&b, 0);
    memset(b.params, 0, b.t.total * sizeof(float));
    char *dir = checkpoint_find_latest(out);
    assert_non_null(dir);
    assert_non_null(strstr(dir, "checkpoints/step_00000003"));
    CheckpointState got;
    checkpoint_load(dir, &b.t, b.params, &b.opt, &got);
    assert_memory_equal(b.params, a.params, a.t.total * sizeof(float));
    assert_memory_equal(b.opt.m, a.opt.m, a.t.total * sizeof(float));
    assert_memory_equal(b.opt.v, a.opt.v, a.t.total * sizeof(float));
    assert_int_equal(b.opt.step, 3);
    assert_int_equal(got.step, 3);
    assert_int_equal(got.consumed_samples, 96);
    assert_true(got.rng_seed == 0xfedcba9876543210ULL);
    assert_true(got.rng_offset == 3007);
    assert_true(got.loss_scale == 65536.0);
    assert_int_equal(got.world_size, 2);
    assert_string_equal(got.config_yaml, YAML);
    // The copy of the config and the latest pointer.
    char p[4400];
    snprintf(p, sizeof p, "%s/config.yaml", dir);
    char *yaml = mhe_read_file(p, NULL);
    assert_string_equal(yaml, YAML);
    snprintf(p, sizeof p, "%s/checkpoints/latest", out);
    char *latest = mhe_read_file(p, NULL);
    assert_string_equal(latest, "step_00000003\n");
    // Weights-only loading fills the parameters and nothing else.
    memset(b.params, 0, b.t.total * sizeof(float));
    checkpoint_load_weights(dir, &b.t, b.params);
    assert_memory_equal(b.params, a.params, a.t.total * sizeof(float));
    // checkpoint_resolve accepts the run directory or the checkpoint itself.
    char *r1 = checkpoint_resolve(out), *r2 = checkpoint_resolve(dir);
    assert_string_equal(r1, dir);
    assert_string_equal(r2, dir);
    free(r1); free(r2); free(yaml); free(latest);
    checkpoint_state_free(&got);
    free(dir);
    run_free(&a);
    run_free(&b);
    free(out);
}

static void test_keep_last_deletes_only_older(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_keep");
    save_steps(out, 1, 5, 2);
    char ck[4400];
    snprintf(ck, sizeof ck, "%s/checkpoints", out);
    assert_false(exists(ck, "step_00000001"));
    assert_false(exists(ck, "step_00000003"));
    assert_true(exists(ck, "step_00000004"));
    assert_true(exists(ck, "step_00000005"));
    // Saving the same step again swaps the directory in place.
    save_steps(out, 5, 5, 2);
    assert_true(exists(ck, "step_00000004"));
    char *dir = checkpoint_find_latest(out);
    assert_non_null(strstr(dir, "step_00000005"));
    free(dir);
    free(out);
}

static void corrupt_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

static void test_corrupt_and_partial_checkpoints_are_skipped(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_corrupt");
    save_steps(out, 1, 4, 0);
    char p[4400], err[8192];
    // step 4: one flipped bit deep in the weights.
    snprintf(p, sizeof p, "%s/checkpoints/step_00000004/model.safetensors", out);
    corrupt_byte(p, 600);
    // step 3: optimizer file missing.
    snprintf(p, sizeof p, "%s/checkpoints/step_00000003/optimizer.safetensors", out);
    assert_int_equal(unlink(p), 0);
    // step 2: truncated state.json.
    snprintf(p, sizeof p, "%s/checkpoints/step_00000002/state.json", out);
    assert_int_equal(truncate(p, 40), 0);
    char *dir = find_latest_capturing(out, err, sizeof err);
    printf("%s", err);
    assert_non_null(dir);
    assert_non_null(strstr(dir, "step_00000001"));
    assert_non_null(strstr(err, "step_00000004/model.safetensors: sha256 checksum mismatch"));
    assert_non_null(strstr(err, "step_00000003/optimizer.safetensors: missing"));
    assert_non_null(strstr(err, "step_00000002/state.json: not a valid"));
    free(dir);
    // Nothing valid at all: NULL, every one reported.
    snprintf(p, sizeof p, "%s/checkpoints/step_00000001/config.yaml", out);
    FILE *f = fopen(p, "a");
    fputs("extra: 1\n", f);
    fclose(f);
    dir = find_latest_capturing(out, err, sizeof err);
    assert_null(dir);
    assert_non_null(strstr(err, "step_00000001/config.yaml:"));
    free(out);
}

// Runs `fn` in a child with stderr captured; returns its exit status, message in `err`.
static int child_status(void (*fn)(const char *), const char *arg, char *err, size_t n) {
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn(arg);
        _exit(0);
    }
    close(pipefd[1]);
    size_t k = 0;
    ssize_t got;
    while (k < n - 1 && (got = read(pipefd[0], err + k, n - 1 - k)) > 0) k += (size_t)got;
    err[k] = '\0';
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void load_with_extra_tensor(const char *dir) {
    Run r;
    run_make(&r, 0);
    // A model with one more tensor than the checkpoint.
    ParamTable t = r.t;
    t.tensors = mhe_malloc((size_t)(t.count + 1) * sizeof *t.tensors);
    memcpy(t.tensors, r.t.tensors, (size_t)t.count * sizeof *t.tensors);
    ParamTensor *x = &t.tensors[t.count++];
    *x = t.tensors[0];
    snprintf(x->name, sizeof x->name, "layers.1.attn.q.weight");
    x->offset = 0;
    checkpoint_load(dir, &t, r.params, &r.opt, NULL);
}

// The same tensors in another order (as an older mhetrain's q.weight, q.bias, k.weight, ... is to
// today's q.weight, k.weight, v.weight, q.bias, ...): the weights load by name, but the flat
// moments would land on other parameters, so the optimizer state must be refused.
static void load_with_other_order(const char *dir) {
    Run r;
    run_make(&r, 0);
    int i = 0;
    while (i + 1 < r.t.count && strcmp(r.t.tensors[i].name, "layers.0.attn.q.bias") != 0) i++;
    if (i + 1 >= r.t.count) _exit(3);
    ParamTensor a = r.t.tensors[i], b = r.t.tensors[i + 1];
    b.offset = a.offset;
    a.offset = b.offset + b.numel;
    r.t.tensors[i] = b;
    r.t.tensors[i + 1] = a;
    checkpoint_load(dir, &r.t, r.params, &r.opt, NULL);
}

static void load_directly(const char *dir);

// Rewrites dir's optimizer file as mhetrain wrote it before the layout fingerprint (m, v, step,
// range) and re-signs state.json (the file's sha256 and size, then the state's own checksum), so
// the checkpoint validates as such an older one does.
static void write_unfingerprinted_optimizer(const char *dir) {
    Run r;
    run_make(&r, 1);
    char opt[4500], sp[4500];
    snprintf(opt, sizeof opt, "%s/optimizer.safetensors", dir);
    snprintf(sp, sizeof sp, "%s/state.json", dir);
    const int64_t n = (int64_t)r.t.total, one = 1, three = 3, range[3] = {0, n, n};
    StFile f;
    st_init(&f);
    st_add(&f, "m", ST_F32, 1, &n, r.opt.m);
    st_add(&f, "v", ST_F32, 1, &n, r.opt.v);
    st_add(&f, "step", ST_I64, 1, &one, &r.opt.step);
    st_add(&f, "range", ST_I64, 1, &three, range);
    assert_int_equal(st_write(&f, opt), 0);
    st_free(&f);
    char hex[SHA256_HEX_LEN], zeros[SHA256_HEX_LEN];
    assert_int_equal(sha256_file_hex(opt, hex), 0);
    struct stat st;
    assert_int_equal(stat(opt, &st), 0);
    FILE *in = fopen(sp, "r");
    assert_non_null(in);
    char text[65536];
    size_t k = fread(text, 1, sizeof text - 1, in);
    text[k] = '\0';
    fclose(in);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    cJSON *e = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "files"), "optimizer.safetensors");
    assert_non_null(e);
    cJSON_ReplaceItemInObject(e, "sha256", cJSON_CreateString(hex));
    cJSON_ReplaceItemInObject(e, "bytes", cJSON_CreateNumber((double)st.st_size));
    memset(zeros, '0', SHA256_HEX_LEN - 1);
    zeros[SHA256_HEX_LEN - 1] = '\0';
    cJSON_ReplaceItemInObject(root, "state_sha256", cJSON_CreateString(zeros));
    char *out = cJSON_Print(root);
    char *at = strstr(out, zeros);
    assert_non_null(at);
    sha256_hex(out, strlen(out), hex);
    memcpy(at, hex, SHA256_HEX_LEN - 1);
    FILE *w = fopen(sp, "w");
    assert_non_null(w);
    fputs(out, w);
    fclose(w);
    free(out);
    cJSON_Delete(root);
    run_free(&r);
}

// An optimizer state without the fingerprint (an older checkpoint) cannot be placed: refused.
static void test_optimizer_state_without_layout_is_refused(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_old_optim");
    save_steps(out, 1, 1, 0);
    char dir[4400], err[8192];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_00000001", out);
    write_unfingerprinted_optimizer(dir);
    char why[8192];
    assert_int_equal(checkpoint_validate(dir, why, sizeof why), 0);  // a valid checkpoint otherwise
    assert_int_equal(child_status(load_directly, dir, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "step_00000001/optimizer.safetensors: optimizer state has no param_layout fingerprint"));
    Run r;  // the weights alone still load
    run_make(&r, 0);
    checkpoint_load_weights(dir, &r.t, r.params);
    run_free(&r);
    free(out);
}

static void load_with_wrong_shape(const char *dir) {
    Run r;
    run_make(&r, 0);
    r.t.tensors[3].shape[0] = 6;  // layers.0.attn.q.weight [7, 6] -> [6, 7]
    r.t.tensors[3].shape[1] = 7;
    checkpoint_load_weights(dir, &r.t, r.params);
}

static void load_directly(const char *dir) {
    Run r;
    run_make(&r, 0);
    checkpoint_load(dir, &r.t, r.params, &r.opt, NULL);
}

static void test_shard_reads_its_slice_of_a_whole_state(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_shard");
    save_steps(out, 2, 2, 0);
    Run a, b;
    run_make(&a, 2);
    run_make(&b, 0);
    const size_t begin = 50, end = a.t.total - 17;  // cuts through two tensors
    optim_state_free(&b.opt);
    optim_state_init(&b.opt, &b.t, begin, end);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_00000002", out);
    checkpoint_load(dir, &b.t, b.params, &b.opt, NULL);
    assert_memory_equal(b.opt.m, a.opt.m + begin, (end - begin) * sizeof(float));
    assert_memory_equal(b.opt.v, a.opt.v + begin, (end - begin) * sizeof(float));
    assert_int_equal(b.opt.step, 2);
    run_free(&a);
    run_free(&b);
    free(out);
}

// A shard's own state saved, then a whole-buffer run tries to resume from it.
static void load_whole_from_shard(const char *out) {
    Run r;
    run_make(&r, 0);
    OptimState shard;
    optim_state_init(&shard, &r.t, 10, 20);
    r.st.step = 9;
    if (checkpoint_save(out, &r.st, &r.t, r.params, &shard, 0) != 0) _exit(1);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_00000009", out);
    checkpoint_load(dir, &r.t, r.params, &r.opt, NULL);
}

static void test_load_errors_name_file_and_tensor(void **state) {
    (void)state;
    char *out = infra_scratch_dir("ckpt_errors");
    save_steps(out, 1, 1, 0);
    char dir[4400], err[8192], p[4500];
    snprintf(dir, sizeof dir, "%s/checkpoints/step_00000001", out);
    assert_int_equal(child_status(load_with_extra_tensor, dir, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "step_00000001/model.safetensors: tensor 'layers.1.attn.q.weight' is missing"));
    assert_int_equal(child_status(load_with_wrong_shape, dir, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "model.safetensors: tensor 'layers.0.attn.q.weight' has F32 [7, 6], the model expects F32 [6, 7]"));
    assert_int_equal(child_status(load_with_other_order, dir, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "step_00000001/optimizer.safetensors: optimizer state was written for parameter layout "));
    assert_non_null(strstr(err, "its flat moments cannot be matched to the parameters"));
    snprintf(p, sizeof p, "%s/optimizer.safetensors", dir);
    corrupt_byte(p, 300);
    assert_int_equal(child_status(load_directly, dir, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "step_00000001/optimizer.safetensors: sha256 checksum mismatch"));
    assert_int_equal(child_status(load_whole_from_shard, out, err, sizeof err), 2);
    printf("%s", err);
    assert_non_null(strstr(err, "step_00000009/optimizer.safetensors: optimizer state covers [10, 20) of 226 parameters; this run needs [0, 226) of 226"));
    assert_int_equal(child_status(load_directly, "/nonexistent/ckpt", err, sizeof err), 2);
    assert_non_null(strstr(err, "/nonexistent/ckpt/state.json: missing"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_is_bit_exact),
        cmocka_unit_test(test_keep_last_deletes_only_older),
        cmocka_unit_test(test_corrupt_and_partial_checkpoints_are_skipped),
        cmocka_unit_test(test_shard_reads_its_slice_of_a_whole_state),
        cmocka_unit_test(test_load_errors_name_file_and_tensor),
        cmocka_unit_test(test_optimizer_state_without_layout_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
