// JSON-lines metrics (exact lines, parsed back) and the progress line / h:mm:ss formatting.
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

static void test_jsonl_lines_are_exact_and_parse(void **state) {
    (void)state;
    char *dir = infra_scratch_dir("metrics");
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    MetricsLog m;
    assert_int_equal(metrics_open(&m, path), 0);
    const MetricValue a[3] = {{"loss", 0.1, NULL}, {"lr", 1e-4, NULL}, {"phase", 0, "train \"warm\"\n"}};
    assert_int_equal(metrics_write(&m, 7, 3, a), 0);
    // Flushed per line: readable before close.
    char *text = mhe_read_file(path, NULL);
    assert_string_equal(text, "{\"step\": 7, \"loss\": 0.10000000000000001, \"lr\": 0.0001, \"phase\": \"train \\\"warm\\\"\\u000a\"}\n");
    free(text);
    const MetricValue b[2] = {{"loss", NAN, NULL}, {"grad_norm", INFINITY, NULL}};
    assert_int_equal(metrics_write(&m, 8, 2, b), 0);
    metrics_close(&m);
    // Appending (a resumed run) keeps earlier lines.
    assert_int_equal(metrics_open(&m, path), 0);
    const MetricValue c[1] = {{"tokens_per_s", 12345.678901234567, NULL}};
    assert_int_equal(metrics_write(&m, 9, 1, c), 0);
    metrics_close(&m);

    text = mhe_read_file(path, NULL);
    char *save = NULL, *line = strtok_r(text, "\n", &save);
    int lines = 0;
    for (; line; line = strtok_r(NULL, "\n", &save), lines++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int step = (int)cJSON_GetObjectItem(o, "step")->valuedouble;
        if (step == 7) {
            assert_true(cJSON_GetObjectItem(o, "loss")->valuedouble == 0.1);  // 17 digits round-trip
            assert_string_equal(cJSON_GetObjectItem(o, "phase")->valuestring, "train \"warm\"\n");
        } else if (step == 8) {
            assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "loss")));
            assert_true(cJSON_IsNull(cJSON_GetObjectItem(o, "grad_norm")));
        } else {
            assert_int_equal(step, 9);
            assert_true(cJSON_GetObjectItem(o, "tokens_per_s")->valuedouble == 12345.678901234567);
        }
        cJSON_Delete(o);
    }
    assert_int_equal(lines, 3);
    free(text);
    free(dir);
}

static void test_hms_formatting(void **state) {
    (void)state;
    char b[32];
    const struct { double s; const char *want; } cases[] = {
        {0, "0:00:00"}, {59.4, "0:00:59"}, {59.6, "0:01:00"}, {3600, "1:00:00"},
        {36061, "10:01:01"}, {360000 + 59 * 60 + 7, "100:59:07"}, {-1, "--:--:--"}, {NAN, "--:--:--"}, {INFINITY, "--:--:--"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        format_hms(b, sizeof b, cases[i].s);
        assert_string_equal(b, cases[i].want);
    }
}

static void test_progress_line(void **state) {
    (void)state;
    char b[256];
    // 100 steps since resuming at 20 took 62 s: 0.62 s/step, 880 left -> 545.6 s = 0:09:06.
    Progress p = {.step = 120, .total_steps = 1000, .start_step = 20, .elapsed_s = 62.0, .loss = 7.123449,
                  .lr = 1e-4, .grad_norm = 1.2345, .tokens_per_s = 12345.4, .mfu = 0.1234};
    progress_format(b, sizeof b, &p);
    assert_string_equal(b, "step 120/1000 | loss 7.1234 | lr 1.00e-04 | gnorm 1.234 | 12345 tok/s | MFU 12.3% | "
                           "elapsed 0:01:02 | ETA 0:09:06");
    // Before the first step: no rate, no ETA; MFU unknown.
    Progress q = {.step = 20, .total_steps = 1000, .start_step = 20, .elapsed_s = 0.2, .loss = NAN, .lr = 0,
                  .grad_norm = INFINITY, .tokens_per_s = 0, .mfu = -1};
    progress_format(b, sizeof b, &q);
    assert_string_equal(b, "step 20/1000 | loss nan | lr 0.00e+00 | gnorm inf | 0 tok/s | MFU n/a | elapsed 0:00:00 | ETA --:--:--");
    // Done.
    p.step = 1000;
    p.elapsed_s = 3725;
    progress_format(b, sizeof b, &p);
    assert_non_null(strstr(b, "step 1000/1000"));
    assert_non_null(strstr(b, "elapsed 1:02:05 | ETA 0:00:00"));
    // The measured matmul ceiling beside MFU (issue 49), when known.
    p.ceiling_gflops = 151.6;
    progress_format(b, sizeof b, &p);
    assert_non_null(strstr(b, "| MFU 12.3% | ceiling 152 GFLOP/s | elapsed"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jsonl_lines_are_exact_and_parse),
        cmocka_unit_test(test_hms_formatting),
        cmocka_unit_test(test_progress_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
