// The event file read back by TensorBoard's own reader (tb_check.py): the scalars it sees equal
// what we wrote and the JSON-lines values.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "tests/infra/infra_util.h"
#include "trainer/io/metrics.h"
#include "trainer/io/tensorboard.h"

#define STEPS 25
#define BIG_STEP 5000000000LL  // beyond 32 bits: exercises the int64 varint

static float loss_at(int s) { return 10.0f / (1.0f + 0.37f * (float)s); }
static float lr_at(int s) { return 1e-4f * (float)s / 3.0f; }
static float gnorm_at(int s) { return 1.0f + 0.001f * (float)(s * s); }

// The dumped [step, value, wall] list of `tag` must hold exactly `want` at `step`.
static void expect(cJSON *scalars, const char *tag, int64_t step, float want, double wall) {
    cJSON *list = cJSON_GetObjectItemCaseSensitive(scalars, tag);
    assert_non_null(list);
    int found = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, list) {
        if ((int64_t)cJSON_GetArrayItem(e, 0)->valuedouble != step) continue;
        found++;
        const double got = cJSON_GetArrayItem(e, 1)->valuedouble;
        if ((float)got != want) fail_msg("%s step %lld: tensorboard read %.9g, wrote %.9g", tag, (long long)step, got, want);
        assert_true(fabs(cJSON_GetArrayItem(e, 2)->valuedouble - wall) < 1e-6);
    }
    assert_int_equal(found, 1);
}

static void test_tensorboard_reads_our_scalars(void **state) {
    (void)state;
    char *dir = infra_scratch_dir("tensorboard");
    char jsonl[4200], dump[4200], cmd[13000];
    snprintf(jsonl, sizeof jsonl, "%s/metrics.jsonl", dir);
    snprintf(dump, sizeof dump, "%s/dump.json", dir);
    const double t0 = 1700000000.25;
    TbWriter tb;
    MetricsLog ml;
    assert_int_equal(tb_open(&tb, dir, t0), 0);
    assert_non_null(strstr(tb.path, "/events.out.tfevents.1700000000."));
    char tb_first_path[4400];
    snprintf(tb_first_path, sizeof tb_first_path, "%s", tb.path);
    assert_int_equal(metrics_open(&ml, jsonl), 0);
    const char *tags[3] = {"train/loss", "train/lr", "train/grad_norm"};
    for (int s = 1; s <= STEPS; s++) {
        const float v[3] = {loss_at(s), lr_at(s), gnorm_at(s)};
        assert_int_equal(tb_write_scalars(&tb, s, t0 + s, 3, tags, v), 0);
        const MetricValue mv[4] = {{"loss", v[0], NULL}, {"lr", v[1], NULL}, {"grad_norm", v[2], NULL}, {"tokens_per_s", 1234.5, NULL}};
        assert_int_equal(metrics_write(&ml, s, 4, mv), 0);
        if (s % 10 == 0) assert_int_equal(tb_write_scalar(&tb, s, t0 + s + 0.5, "eval/loss", 2.0f * v[0]), 0);
    }
    assert_int_equal(tb_write_scalar(&tb, BIG_STEP, t0 + 1e6, "big/step", -3.5e-7f), 0);
    tb_close(&tb);
    metrics_close(&ml);

    // A second writer in the same second (a quick resume) gets its own file; the first is
    // untouched.  Removed again so TensorBoard reads one file below.
    TbWriter again;
    assert_int_equal(tb_open(&again, dir, t0), 0);
    assert_string_not_equal(again.path, tb_first_path);
    assert_non_null(strstr(again.path, ".1"));
    remove(again.path);
    tb_close(&again);
    char *py = infra_python();
    snprintf(cmd, sizeof cmd, "'%s' '%s/tests/infra/tb_check.py' '%s' '%s' '%s'", py, getenv("MHE_SOURCE_DIR"), dir, jsonl, dump);
    assert_int_equal(system(cmd), 0);
    char *text = mhe_read_file(dump, NULL);
    cJSON *root = cJSON_Parse(text);
    assert_non_null(root);
    // file_version + one event per scalar batch.
    assert_int_equal((int)cJSON_GetObjectItemCaseSensitive(root, "records")->valuedouble, 1 + STEPS + STEPS / 10 + 1);
    cJSON *scalars = cJSON_GetObjectItemCaseSensitive(root, "scalars");
    assert_int_equal(cJSON_GetArraySize(scalars), 5);
    for (int s = 1; s <= STEPS; s++) {
        expect(scalars, "train/loss", s, loss_at(s), t0 + s);
        expect(scalars, "train/lr", s, lr_at(s), t0 + s);
        expect(scalars, "train/grad_norm", s, gnorm_at(s), t0 + s);
        if (s % 10 == 0) expect(scalars, "eval/loss", s, 2.0f * loss_at(s), t0 + s + 0.5);
    }
    expect(scalars, "big/step", BIG_STEP, -3.5e-7f, t0 + 1e6);
    cJSON_Delete(root);
    free(text);
    free(py);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tensorboard_reads_our_scalars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
