#include "trainer/train/peak_nominal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

// The value after "key<spaces/tabs>:" on the line starting with key, or NULL.
static const char *field(const char *text, const char *key, char *out, size_t len) {
    const size_t k = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, k) != 0 || (line[k] != ' ' && line[k] != '\t' && line[k] != ':')) continue;
        const char *colon = strchr(line, ':'), *nl = strchr(line, '\n');
        if (!colon || (nl && colon > nl)) continue;
        colon += 1 + strspn(colon + 1, " \t");
        snprintf(out, len, "%.*s", (int)(nl ? (size_t)(nl - colon) : strlen(colon)), colon);
        return out;
    }
    return NULL;
}

int cpu_desc_parse(const char *cpuinfo, CpuDesc *d) {
    memset(d, 0, sizeof *d);
    // The first processor only: a blank line ends it.
    const char *end = strstr(cpuinfo, "\n\n");
    char *first = end ? mhe_malloc((size_t)(end - cpuinfo) + 2) : mhe_strdup(cpuinfo);
    if (end) {
        memcpy(first, cpuinfo, (size_t)(end - cpuinfo) + 1);
        first[end - cpuinfo + 1] = 0;
    }
    char v[256];
    if (field(first, "vendor_id", v, sizeof v)) snprintf(d->vendor, sizeof d->vendor, "%.31s", v);
    if (field(first, "cpu family", v, sizeof v)) d->family = atoi(v);
    if (field(first, "model name", v, sizeof v)) snprintf(d->model, sizeof d->model, "%.127s", v);
    if (field(first, "cpu MHz", v, sizeof v)) d->mhz = atof(v);
    free(first);
    return d->mhz > 0 ? 0 : -1;
}

double cpu_flops_per_cycle(const CpuDesc *d, const char *isa, int bf16, char *basis, size_t len) {
    const int amd = strcmp(d->vendor, "AuthenticAMD") == 0;
    double fp32;
    int ports, lanes;
    if (strstr(isa, "avx512")) {
        ports = amd && d->family < 26 ? 1 : 2;
        lanes = 16;
    } else if (strstr(isa, "avx2")) {
        ports = 2;
        lanes = 8;
    } else if (strstr(isa, "sse") || strstr(isa, "avx")) {
        ports = 2;
        lanes = 4;
    } else {
        snprintf(basis, len, "unknown instruction set %s", isa);
        return 0;
    }
    fp32 = 2.0 * ports * lanes;
    if (!bf16 || (!strstr(isa, "bf16") && !strstr(isa, "amx"))) {
        snprintf(basis, len, "%d x %d-bit FMA%s", ports, lanes * 32, bf16 ? ", bf16 emulated" : "");
        return fp32;
    }
    if (strstr(isa, "amx")) {
        snprintf(basis, len, "AMX tiles");
        return 1024;
    }
    snprintf(basis, len, "%d x %d-bit bf16 dot product, 2 multiply-adds a lane", amd ? ports : 1, lanes * 32);
    return amd ? 2 * fp32 : fp32;
}

double peak_nominal_gflops(int cores, double flops_per_cycle, double mhz) {
    return cores > 0 && flops_per_cycle > 0 && mhz > 0 ? cores * flops_per_cycle * mhz / 1e3 : 0;
}

double peak_nominal_cpu(int threads, const char *isa, int bf16, char *desc, size_t len) {
    snprintf(desc, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return 0;
    // The first processor's block is all that is read.
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    CpuDesc d;
    if (cpu_desc_parse(text, &d) != 0) return 0;
    // cpufreq's maximum (turbo) where the kernel shows it: the nominal figure should not be one the
    // cores outrun; a virtual machine shows only cpuinfo's clock.
    f = fopen("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "r");
    long khz = 0;
    if (f) {
        if (fscanf(f, "%ld", &khz) != 1) khz = 0;
        fclose(f);
    }
    if (khz > 0 && khz / 1e3 > d.mhz) d.mhz = khz / 1e3;
    char basis[96];
    const double per = cpu_flops_per_cycle(&d, isa, bf16, basis, sizeof basis);
    const double g = peak_nominal_gflops(threads, per, d.mhz);
    if (g > 0)
        snprintf(desc, len, "%d core%s x %.0f FLOP/cycle (%s) x %.2f GHz", threads, threads == 1 ? "" : "s", per, basis,
                 d.mhz / 1e3);
    return g;
}

void peak_nominal_floor(double *nominal, double measured, char *desc, size_t len) {
    if (*nominal <= 0 || measured <= *nominal) return;
    const size_t at = strlen(desc);
    if (at + 1 < len)
        snprintf(desc + at, len - at, "; raised to the measured ceiling %.1f: the cores outrun the reported clock",
                 measured);
    *nominal = measured;
}
