// runtime.precision: auto (issue 49): the choice from measured rates and its one-line reason, the
// per-machine cache (read, write, replace, corrupt), the choice a resume finds in a checkpoint,
// and the nominal-peak arithmetic MFU is counted against (cores x FLOP/cycle x clock).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
// cmocka after the standard headers it needs
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/comm.h"
#include "trainer/train/peak.h"
#include "trainer/train/peak_track.h"
#include "trainer/train/peak_nominal.h"
#include "trainer/train/precision_auto.h"

static char dir[256];

static int make_dir(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mhe-precision-XXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}

static int remove_dir(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_choice_follows_the_faster_rate(void **state) {
    (void)state;
    char why[512];
    // Emerald Rapids without AMX (issue 49): bf16 153 against fp32 242.
    PrecisionRates slow = {242, 153, 1};
    assert_int_equal(precision_choose(&slow, why, sizeof why), PREC_FP32);
    assert_string_equal(why, "bf16 matmuls 153 GFLOP/s against fp32's 242 on the model's products (0.63x)");
    // AMX: several times faster.
    PrecisionRates amx = {300, 2100, 1};
    assert_int_equal(precision_choose(&amx, why, sizeof why), PREC_BF16);
    assert_string_equal(why, "bf16 matmuls 2100 GFLOP/s against fp32's 300 on the model's products (7.00x)");
    // Within the 5% margin fp32 stays (noise must not decide); emulation is named.
    PrecisionRates tie = {100, 104.9, 0};
    assert_int_equal(precision_choose(&tie, why, sizeof why), PREC_FP32);
    assert_non_null(strstr(why, "(1.05x, bf16 emulated on this CPU, within the 5% bf16 must win by)"));
    PrecisionRates above = {100, 105, 1};
    assert_int_equal(precision_choose(&above, why, sizeof why), PREC_BF16);
}

static void test_a_precision_that_cannot_run_gives_the_other(void **state) {
    (void)state;
    char why[512];
    PrecisionRates no_bf16 = {200, 0, 0};
    assert_int_equal(precision_choose(&no_bf16, why, sizeof why), PREC_FP32);
    assert_string_equal(why, "bf16 matmuls cannot run on this build or machine");
    PrecisionRates no_fp32 = {0, 90, 1};
    assert_int_equal(precision_choose(&no_fp32, why, sizeof why), PREC_BF16);
    assert_string_equal(why, "fp32 matmuls cannot run on this build or machine");
    PrecisionRates none = {0, 0, 0};
    assert_int_equal(precision_choose(&none, why, sizeof why), PREC_FP32);
}

static void test_cache_round_trip_and_replace(void **state) {
    (void)state;
    char path[300], why[512];
    snprintf(path, sizeof path, "%s/sub/precision.tsv", dir);  // the folder is created
    PrecisionRates r = {0};
    assert_int_equal(precision_cache_read(path, "k1", &r, why, sizeof why), 0);  // no file
    PrecisionRates a = {242.5, 153.25, 1}, b = {61, 120, 0};
    assert_int_equal(precision_cache_write(path, "k1", &a), 0);
    assert_int_equal(precision_cache_write(path, "k2", &b), 0);
    assert_int_equal(precision_cache_read(path, "k1", &r, why, sizeof why), 1);
    assert_true(fabs(r.fp32_gflops - 242.5) < 0.05 && fabs(r.bf16_gflops - 153.2) < 0.1 && r.bf16_native == 1);
    assert_int_equal(precision_cache_read(path, "k2", &r, why, sizeof why), 1);
    assert_true(r.fp32_gflops == 61 && r.bf16_gflops == 120 && r.bf16_native == 0);
    assert_int_equal(precision_cache_read(path, "k3", &r, why, sizeof why), 0);  // another machine
    // Rewriting a key replaces its line and keeps the other.
    PrecisionRates c = {10, 20, 1};
    assert_int_equal(precision_cache_write(path, "k1", &c), 0);
    assert_int_equal(precision_cache_read(path, "k1", &r, why, sizeof why), 1);
    assert_true(r.fp32_gflops == 10 && r.bf16_gflops == 20);
    assert_int_equal(precision_cache_read(path, "k2", &r, why, sizeof why), 1);
    size_t lines = 0;
    FILE *f = fopen(path, "r");
    for (int ch; (ch = fgetc(f)) != EOF;) lines += ch == '\n';
    fclose(f);
    assert_int_equal(lines, 3);  // the comment and two keys
}

static void test_corrupt_cache_is_named_and_rewritten(void **state) {
    (void)state;
    char path[300], why[512];
    snprintf(path, sizeof path, "%s/precision.tsv", dir);
    const char *bad[] = {"k1\t242\n", "k1\tfast\t153\t1\n", "k1\t242\t153\t2\n", "\t242\t153\t1\n", "k1\t-3\t153\t1\n",
                         "k1\t242\t153\t1 trailing\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[200];
        snprintf(text, sizeof text, "# comment\nk0\t1\t2\t1\n%s", bad[i]);
        write_text(path, text);
        PrecisionRates r;
        why[0] = 0;
        assert_int_equal(precision_cache_read(path, "k0", &r, why, sizeof why), -1);
        char want[400];
        snprintf(want, sizeof want, "%s:3: expected KEY<tab>fp32 GFLOP/s<tab>bf16 GFLOP/s<tab>0|1", path);
        assert_string_equal(why, want);
        // Writing drops the line that does not parse and keeps the good one.
        PrecisionRates w = {5, 6, 1};
        assert_int_equal(precision_cache_write(path, "k1", &w), 0);
        assert_int_equal(precision_cache_read(path, "k1", &r, why, sizeof why), 1);
        assert_true(r.fp32_gflops == 5 && r.bf16_gflops == 6);
        assert_int_equal(precision_cache_read(path, "k0", &r, why, sizeof why), 1);
    }
    // Bytes that are not text at all.
    write_text(path, "\x01\x02\x03\xff\n");
    PrecisionRates r;
    assert_int_equal(precision_cache_read(path, "k0", &r, why, sizeof why), -1);
}

static void test_cache_path_and_key(void **state) {
    (void)state;
    char buf[512], key[1024];
    setenv("MHE_CACHE_DIR", "/x/y", 1);
    assert_string_equal(precision_cache_path(buf, sizeof buf), "/x/y/precision.tsv");
    unsetenv("MHE_CACHE_DIR");
    setenv("XDG_CACHE_HOME", "/c", 1);
    assert_string_equal(precision_cache_path(buf, sizeof buf), "/c/mhetrain/precision.tsv");
    unsetenv("XDG_CACHE_HOME");
    setenv("HOME", "/h", 1);
    assert_string_equal(precision_cache_path(buf, sizeof buf), "/h/.cache/mhetrain/precision.tsv");
    unsetenv("HOME");
    assert_null(precision_cache_path(buf, sizeof buf));
    // A tab in the CPU's name cannot split the key's column.
    precision_machine_key("Intel\tXeon", "avx512", "oneDNN 2.6.3 avx512_core_bf16", 2, "rows 64", key, sizeof key);
    assert_string_equal(key, "Intel Xeon | isa avx512 | oneDNN 2.6.3 avx512_core_bf16 | threads 2 | rows 64");
}

static void test_saved_choice_of_a_resume(void **state) {
    (void)state;
    char run[300], ck[400], path[500], got[4096];
    snprintf(run, sizeof run, "%s/run", dir);
    assert_int_equal(precision_saved(run, got, sizeof got), -1);  // nothing there
    snprintf(ck, sizeof ck, "%s/checkpoints/step_00000004", run);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", ck);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/config.yaml", ck);
    write_text(path, "model:\n  arch: bert\nruntime:\n  device: cpu\n  threads: 0\n  precision: bf16\ntask:\n  type: none\n");
    assert_int_equal(precision_saved(run, got, sizeof got), PREC_BF16);  // the run's newest checkpoint
    assert_string_equal(got, ck);
    assert_int_equal(precision_saved(ck, got, sizeof got), PREC_BF16);  // the checkpoint itself
    write_text(path, "runtime:\n  precision: fp32\n");
    assert_int_equal(precision_saved(ck, got, sizeof got), PREC_FP32);
    write_text(path, "runtime:\n  precision: auto\n");  // a config never resolved names no choice
    assert_int_equal(precision_saved(ck, got, sizeof got), -1);
    write_text(path, "runtime:\n  device: cpu\ntask:\n  precision: bf16\n");  // another section's key
    assert_int_equal(precision_saved(ck, got, sizeof got), -1);
}

static const char *const ZEN4 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                                "model name\t: AMD EPYC 9454P\ncpu MHz\t\t: 2596.128\n\nprocessor\t: 1\n"
                                "vendor_id\t: AuthenticAMD\ncpu MHz\t\t: 9999\n";
static const char *const EMR = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                               "model name\t: INTEL(R) XEON(R) PLATINUM 8581C CPU @ 2.10GHz\ncpu MHz\t\t: 2100.000\n";

static void test_nominal_peak_arithmetic(void **state) {
    (void)state;
    CpuDesc z, e;
    char basis[96];
    assert_int_equal(cpu_desc_parse(ZEN4, &z), 0);
    assert_string_equal(z.vendor, "AuthenticAMD");
    assert_int_equal(z.family, 25);
    assert_string_equal(z.model, "AMD EPYC 9454P");
    assert_true(z.mhz == 2596.128);  // the first processor's, not the second's
    assert_int_equal(cpu_desc_parse(EMR, &e), 0);
    // Zen 4: 512-bit FMAs as two 256-bit halves: 16 fp32 lanes x 2 FLOP a cycle; its bf16 dot
    // product twice that.  2 cores at 2.596128 GHz: 2 x 32 x 2.596128 = 166.152192 GFLOP/s.
    assert_true(cpu_flops_per_cycle(&z, "oneDNN 2.6.3 avx512_core_bf16", 0, basis, sizeof basis) == 32);
    assert_true(cpu_flops_per_cycle(&z, "oneDNN 2.6.3 avx512_core_bf16", 1, basis, sizeof basis) == 64);
    assert_true(fabs(peak_nominal_gflops(2, 32, z.mhz) - 166.152192) < 1e-9);
    // Intel with two 512-bit FMA ports: 64 FLOP/cycle in fp32 and in AVX-512 bf16 (one port);
    // AMX tiles 1024.  2 cores at 2.1 GHz: 268.8 and 4300.8 GFLOP/s.
    assert_true(cpu_flops_per_cycle(&e, "oneDNN 2.6.3 avx512_core_bf16", 0, basis, sizeof basis) == 64);
    assert_true(cpu_flops_per_cycle(&e, "oneDNN 2.6.3 avx512_core_bf16", 1, basis, sizeof basis) == 64);
    assert_true(cpu_flops_per_cycle(&e, "oneDNN 2.6.3 avx512_core_amx", 1, basis, sizeof basis) == 1024);
    assert_string_equal(basis, "AMX tiles");
    assert_true(fabs(peak_nominal_gflops(2, 64, e.mhz) - 268.8) < 1e-9);
    assert_true(fabs(peak_nominal_gflops(2, 1024, e.mhz) - 4300.8) < 1e-9);
    // AVX2 (a laptop, or ONEDNN_MAX_CPU_ISA=AVX2): 2 x 8 lanes x 2; bf16 emulated at fp32's rate.
    assert_true(cpu_flops_per_cycle(&e, "oneDNN 2.6.3 avx2", 0, basis, sizeof basis) == 32);
    assert_true(cpu_flops_per_cycle(&z, "oneDNN 2.6.3 avx2", 1, basis, sizeof basis) == 32);
    assert_string_equal(basis, "2 x 256-bit FMA, bf16 emulated");
    // Unknown: 0, and MFU then falls back (never a made-up figure).
    assert_true(cpu_flops_per_cycle(&e, "oneDNN 2.6.3 isa 0x1234", 0, basis, sizeof basis) == 0);
    assert_true(peak_nominal_gflops(0, 64, 2100) == 0 && peak_nominal_gflops(2, 64, 0) == 0);
    // A measured ceiling above the nominal figure raises it (the clock is above the reported one).
    double nominal = 166.152192;
    char desc[192] = "2 cores";
    peak_nominal_floor(&nominal, 150, desc, sizeof desc);
    assert_true(nominal == 166.152192);
    assert_string_equal(desc, "2 cores");
    peak_nominal_floor(&nominal, 224.4, desc, sizeof desc);
    assert_true(nominal == 224.4);
    assert_string_equal(desc, "2 cores; raised to the measured ceiling 224.4: the cores outrun the reported clock");
    double unknown_nominal = 0;
    peak_nominal_floor(&unknown_nominal, 224.4, desc, sizeof desc);
    assert_true(unknown_nominal == 0);
    CpuDesc none;
    assert_int_equal(cpu_desc_parse("vendor_id\t: X\n", &none), -1);  // no clock
}

static void test_mfu_never_above_one(void **state) {
    (void)state;
    double peak = 166.15;
    assert_true(fabs(peak_mfu(&peak, 83.075) - 0.5) < 1e-12);
    assert_true(peak == 166.15);
    // A step above the nominal figure (a clock above the one the CPU reports) raises it: 100%.
    assert_true(peak_mfu(&peak, 200) == 1.0);
    assert_true(peak == 200);
    assert_true(fabs(peak_mfu(&peak, 100) - 0.5) < 1e-12);
    double unknown = 0;
    assert_true(peak_mfu(&unknown, 100) == -1);
}

// The ceiling's re-measurement takes at most 1% of a run: an evaluation measures only once 100
// times the last measurement's time has passed (a 2-core run spent 6 s measuring at every
// evaluation, a tiny test run 25 s for 0.03 s of steps), and the start-up ladder stays within 1 s
// plus one measurement.  An MPI singleton: one rank.
static void test_remeasure_at_most_one_percent(void **state) {
    (void)state;
    Comm *comm = comm_init(NULL, NULL, 60);
    Backend *be = backend_cpu_create(1);
    PeakTrack p;
    peak_track_start(&p, be, comm, 0);
    print_message("ceiling %.1f GFLOP/s at %d^3, measured in %.2f s\n", p.ceiling, p.size, p.measure_s);
    assert_true(p.ceiling > 0 && p.size >= 1024 && p.measure_s > 0);
    const double at = p.measured_at, ceiling = p.ceiling;
    peak_track_remeasure(&p, be, comm);  // just measured: not due
    assert_true(p.measured_at == at && p.ceiling == ceiling);
    p.measured_at -= 100.0 * p.measure_s + 0.01;  // as if 100 times its time had passed
    peak_track_remeasure(&p, be, comm);
    assert_true(p.measured_at > at);  // measured, the best kept
    assert_true(p.ceiling >= ceiling);
    const double again = p.measured_at;
    peak_track_remeasure(&p, be, comm);  // due again only 100 measurements later
    assert_true(p.measured_at == again);
    be->destroy(be);
    comm_finalize(comm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice_follows_the_faster_rate),
        cmocka_unit_test(test_a_precision_that_cannot_run_gives_the_other),
        cmocka_unit_test_setup_teardown(test_cache_round_trip_and_replace, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(test_corrupt_cache_is_named_and_rewritten, make_dir, remove_dir),
        cmocka_unit_test(test_cache_path_and_key),
        cmocka_unit_test_setup_teardown(test_saved_choice_of_a_resume, make_dir, remove_dir),
        cmocka_unit_test(test_nominal_peak_arithmetic),
        cmocka_unit_test(test_mfu_never_above_one),
        cmocka_unit_test(test_remeasure_at_most_one_percent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
