// The CPU backend's host memory (kernels/cpu/cpu_backend.c cpu_host_alloc): small buffers 64-byte
// aligned, buffers from 2 MiB up aligned to 2 MiB and backed by transparent huge pages where the
// kernel's THP mode gives them to madvise (read back from /proc/self/smaps), all zeroed.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/ops.h"

// The THP mode in brackets ("always", "madvise" or "never"); "" where the file is missing.
static void thp_mode(char *out, size_t n) {
    out[0] = 0;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return;
    char line[256] = {0};
    if (fgets(line, sizeof line, f)) {
        const char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b && (size_t)(b - a - 1) < n) {
            memcpy(out, a + 1, (size_t)(b - a - 1));
            out[b - a - 1] = 0;
        }
    }
    fclose(f);
}

// AnonHugePages (kB) of the mapping holding p, from /proc/self/smaps; -1 when not found.
static long huge_kb_at(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int inside = 0;
    long kb = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (inside) break;
            inside = (uintptr_t)p >= lo && (uintptr_t)p < hi;
        } else if (inside && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void test_host_alloc(void **state) {
    (void)state;
    Backend *be = backend_cpu_create_for(1, 0);
    const size_t small = 1000, large = 5 * CPU_HUGE_PAGE + 3;
    unsigned char *a = be->alloc(be, small), *b = be->alloc(be, large);
    assert_int_equal((uintptr_t)a % 64, 0);
    assert_int_equal((uintptr_t)b % CPU_HUGE_PAGE, 0);
    assert_true(all_zero(a, small));
    assert_true(all_zero(b, large));
    memset(b, 0x5a, large);  // every page written: still the same mapping
    char mode[32];
    thp_mode(mode, sizeof mode);
    const long kb = huge_kb_at(b);
    print_message("THP mode [%s]; the 10 MiB buffer's mapping holds %ld kB of huge pages\n", mode, kb);
    if (!strcmp(mode, "always") || !strcmp(mode, "madvise")) assert_true(kb >= 2048);
    be->free(be, a);
    be->free(be, b);
    be->destroy(be);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_host_alloc)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
