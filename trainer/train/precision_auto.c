#include "trainer/train/precision_auto.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "kernels/ops.h"
#include "trainer/io/checkpoint.h"
#include "trainer/train/peak.h"

Precision precision_choose(const PrecisionRates *r, char *why, size_t len) {
    const char *emu = r->bf16_native ? "" : ", bf16 emulated on this CPU";
    if (r->bf16_gflops <= 0 && r->fp32_gflops <= 0) {
        snprintf(why, len, "neither precision's matmul ran here; fp32, the reference");
        return PREC_FP32;
    }
    if (r->bf16_gflops <= 0) {
        snprintf(why, len, "bf16 matmuls cannot run on this build or machine");
        return PREC_FP32;
    }
    if (r->fp32_gflops <= 0) {
        snprintf(why, len, "fp32 matmuls cannot run on this build or machine");
        return PREC_BF16;
    }
    const double ratio = r->bf16_gflops / r->fp32_gflops;
    const int close = ratio > 1 && ratio < PRECISION_BF16_MARGIN;
    snprintf(why, len, "bf16 matmuls %.0f GFLOP/s against fp32's %.0f on the model's products (%.2fx%s%s)",
             r->bf16_gflops, r->fp32_gflops, ratio, emu, close ? ", within the 5% bf16 must win by" : "");
    return r->bf16_gflops >= PRECISION_BF16_MARGIN * r->fp32_gflops ? PREC_BF16 : PREC_FP32;
}

// ---- the cache ----

// A line: KEY \t fp32 \t bf16 \t native.  1 parsed, 0 not.
static int parse_line(char *line, char **key, PrecisionRates *r) {
    char *t1 = strchr(line, '\t');
    if (!t1 || t1 == line) return 0;
    *t1 = 0;
    char *end;
    errno = 0;
    r->fp32_gflops = strtod(t1 + 1, &end);
    if (*end != '\t' || errno || !(r->fp32_gflops >= 0) || r->fp32_gflops > 1e9) return 0;
    r->bf16_gflops = strtod(end + 1, &end);
    if (*end != '\t' || errno || !(r->bf16_gflops >= 0) || r->bf16_gflops > 1e9) return 0;
    long native = strtol(end + 1, &end, 10);
    if (*end || errno || (native != 0 && native != 1)) return 0;
    r->bf16_native = (int)native;
    *key = line;
    return 1;
}

// The file's lines, each a malloc'd string without its newline; NULL when it cannot be read.
static char **read_lines(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    *n = 0;
    if (!f) return NULL;
    char **lines = NULL, *buf = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&buf, &cap, f)) >= 0) {
        if (got > 0 && buf[got - 1] == '\n') buf[--got] = 0;
        lines = mhe_realloc(lines, (size_t)(*n + 1) * sizeof *lines);
        lines[(*n)++] = mhe_strdup(buf);
    }
    free(buf);
    fclose(f);
    return lines ? lines : mhe_calloc(1, sizeof *lines);
}

static void free_lines(char **lines, int n) {
    for (int i = 0; i < n; i++) free(lines[i]);
    free(lines);
}

int precision_cache_read(const char *path, const char *key, PrecisionRates *r, char *why, size_t len) {
    int n;
    char **lines = read_lines(path, &n);
    if (!lines) return 0;
    int found = 0, bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        if (!lines[i][0] || lines[i][0] == '#') continue;
        char *k;
        PrecisionRates got;
        if (!parse_line(lines[i], &k, &got)) {
            snprintf(why, len, "%s:%d: expected KEY<tab>fp32 GFLOP/s<tab>bf16 GFLOP/s<tab>0|1", path, i + 1);
            bad = 1;
        } else if (strcmp(k, key) == 0) {
            *r = got;
            found = 1;
        }
    }
    free_lines(lines, n);
    return bad ? -1 : found;
}

// mkdir -p, quietly: a cache that cannot be written is measured again next time, not an error.
static int make_dirs(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int precision_cache_write(const char *path, const char *key, const PrecisionRates *r) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        if (make_dirs(dir) != 0) return -1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "# mhetrain runtime.precision: auto -- matmul GFLOP/s per machine and model (safe to delete)\n");
    int n;
    char **lines = read_lines(path, &n);
    for (int i = 0; lines && i < n; i++) {
        if (!lines[i][0] || lines[i][0] == '#') continue;
        char *copy = mhe_strdup(lines[i]), *k;
        PrecisionRates got;
        if (parse_line(copy, &k, &got) && strcmp(k, key) != 0) fprintf(f, "%s\n", lines[i]);
        free(copy);
    }
    if (lines) free_lines(lines, n);
    fprintf(f, "%s\t%.1f\t%.1f\t%d\n", key, r->fp32_gflops, r->bf16_gflops, r->bf16_native ? 1 : 0);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

const char *precision_cache_path(char *buf, size_t len) {
    const char *d = getenv("MHE_CACHE_DIR");
    if (d && *d) snprintf(buf, len, "%s/precision.tsv", d);
    else if ((d = getenv("XDG_CACHE_HOME")) && *d) snprintf(buf, len, "%s/mhetrain/precision.tsv", d);
    else if ((d = getenv("HOME")) && *d) snprintf(buf, len, "%s/.cache/mhetrain/precision.tsv", d);
    else return NULL;
    return buf;
}

void precision_machine_key(const char *cpu_model, const char *isa, const char *library, int threads,
                           const char *shapes, char *buf, size_t len) {
    snprintf(buf, len, "%s | isa %s | %s | threads %d | %s", cpu_model, isa, library, threads, shapes);
    for (char *c = buf; *c; c++)
        if (*c == '\t' || *c == '\n' || *c == '\r') *c = ' ';
}

// ---- the saved choice ----

static int precision_in_yaml(const char *yaml) {
    const char *rt = strstr(yaml, "\nruntime:");
    if (!rt) return -1;
    for (const char *line = strchr(rt + 1, '\n'); line && line[1] == ' '; line = strchr(line + 1, '\n')) {
        const char *k = line + 1 + strspn(line + 1, " ");
        if (strncmp(k, "precision:", 10) != 0) continue;
        k += 10 + strspn(k + 10, " ");
        if (strncmp(k, "fp32", 4) == 0) return PREC_FP32;
        if (strncmp(k, "bf16", 4) == 0) return PREC_BF16;
        return -1;
    }
    return -1;
}

int precision_saved(const char *from, char *ckpt, size_t len) {
    char path[4200], names[8192] = "";
    snprintf(path, sizeof path, "%s/config.yaml", from);
    if (access(path, R_OK) == 0) {
        snprintf(ckpt, len, "%s", from);
    } else {
        // A run directory: its newest checkpoint (the one --resume auto takes when it is valid).
        struct stat st;
        snprintf(path, sizeof path, "%s/checkpoints", from);
        if (stat(path, &st) != 0 || checkpoint_list(from, names, sizeof names) <= 0) return -1;
        char *comma = strchr(names, ',');
        if (comma) *comma = 0;
        snprintf(ckpt, len, "%s", names);
        snprintf(path, sizeof path, "%s/config.yaml", names);
        if (access(path, R_OK) != 0) return -1;
    }
    char *yaml = mhe_read_file(path, NULL);
    char *text = mhe_malloc(strlen(yaml) + 2);
    text[0] = '\n';  // so "runtime:" on the first line is found like any other
    strcpy(text + 1, yaml);
    int p = precision_in_yaml(text);
    free(text);
    free(yaml);
    return p;
}

// ---- measuring ----

static void cpu_model(char *buf, size_t len) {
    snprintf(buf, len, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v += 1 + strspn(v + 1, " \t");
        snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}

// The model's linear-layer products, rows cut (to multiples of 64, at least 256) so that one pass
// costs at most about 1.5 GFLOP: the rate no longer depends on the row count well before that,
// and the measurement of both precisions stays near a tenth of a second.
enum { PRODUCTS = 5 };
static void model_products(const Config *cfg, PeakProduct *p, char *shapes, size_t len) {
    const ModelConfig *m = &cfg->model;
    const int D = m->hidden, F = m->ffn, A = m->heads * m->head_dim, V = m->vocab_size;
    const double per_row = 4.0 * (3.0 * D * A + (double)A * D + 2.0 * D * F);
    long M = (long)cfg->train.micro_batch * cfg->data.seq_len;
    if (M * per_row > 1.5e9) M = (long)(1.5e9 / per_row) / 64 * 64;
    if (M < 256) M = 256;
    // The LM head: on the scored rows (MLM's masked fraction, every row for CLM).
    long H = cfg->objective.type == OBJ_CLM ? M : (long)(M * cfg->objective.mask_prob) / 16 * 16;
    if (H < 64) H = 64;
    p[0] = (PeakProduct){(int)M, A, D, 3};
    p[1] = (PeakProduct){(int)M, D, A, 1};
    p[2] = (PeakProduct){(int)M, F, D, 1};
    p[3] = (PeakProduct){(int)M, D, F, 1};
    p[4] = (PeakProduct){(int)H, V, D, 1};
    snprintf(shapes, len, "rows %ld/%ld D %d A %d F %d V %d", M, H, D, A, F, V);
}

static double measure(const Config *cfg, int bf16, const PeakProduct *p, int *native) {
    Backend *be = backend_cpu_create_for(cfg->runtime.threads, bf16);
    if (native) *native = backend_cpu_native_bf16(be);
    const double g = peak_products_gflops(be, p, PRODUCTS, 2);
    be->destroy(be);
    return g;
}

// This machine's rates for the model: from the cache, else measured (and cached).  *how says
// which, for the one line.
static PrecisionRates machine_rates(const Config *cfg, char *how, size_t how_len) {
    PeakProduct p[PRODUCTS];
    char shapes[256], model[256], lib[128], key[1024], path[4096], why[4400] = "";
    model_products(cfg, p, shapes, sizeof shapes);
    cpu_model(model, sizeof model);
    backend_cpu_library(lib, sizeof lib);
    // The backend sets the thread count it runs with; its ISA level is what it chose.
    Backend *probe = backend_cpu_create_for(cfg->runtime.threads, 0);
    const char *isa = backend_cpu_isa(probe);
    precision_machine_key(model, isa, lib, omp_get_max_threads(), shapes, key, sizeof key);
    probe->destroy(probe);
    PrecisionRates r = {0};
    const char *cache = precision_cache_path(path, sizeof path);
    const int got = cache ? precision_cache_read(cache, key, &r, why, sizeof why) : 0;
    if (got == 1) {
        snprintf(how, how_len, "cached in %s", cache);
        return r;
    }
    if (got < 0) fprintf(stderr, "mhetrain: %s; measuring again and rewriting the cache\n", why);
    const double t0 = omp_get_wtime();
    // Alternating, twice, the best of each: another job's slice then lands on both precisions.
    for (int round = 0; round < 2; round++) {
        const double f = measure(cfg, 0, p, NULL), b = measure(cfg, 1, p, &r.bf16_native);
        if (f > r.fp32_gflops) r.fp32_gflops = f;
        if (b > r.bf16_gflops) r.bf16_gflops = b;
    }
    const double took = omp_get_wtime() - t0;
    // A machine busy with other jobs (more runnable threads than CPUs) gives rates that say
    // little about it: used for this run, not remembered.  On a 2-core machine with a load of
    // 750, one such measurement chose fp32 for shapes where bf16 ran 2x faster when quiet.
    // MHE_LOADAVG stands in for /proc/loadavg's first figure (tests take either branch with it).
    double load = 0;
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *fake = getenv("MHE_LOADAVG");
    FILE *f = fake && *fake ? NULL : fopen("/proc/loadavg", "r");
    if (fake && *fake) load = atof(fake);
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = 0;
        fclose(f);
    }
    if (cpus > 0 && load > 1.5 * (double)cpus)
        snprintf(how, how_len, "measured in %.2f s on a busy machine (load %.1f on %ld CPUs): not cached", took,
                 load, cpus);
    else if (cache && precision_cache_write(cache, key, &r) == 0)
        snprintf(how, how_len, "measured in %.2f s, cached in %s", took, cache);
    else
        snprintf(how, how_len, "measured in %.2f s; %s", took,
                 cache ? "the cache could not be written" : "no cache (set MHE_CACHE_DIR or HOME)");
    return r;
}

static const char *name_of(int p) { return p == PREC_BF16 ? "bf16" : "fp32"; }

// Rank 0's decision; -1 leaves the config as it is.
static int decide(Config *cfg, const char *resume_from) {
    char why[512], ckpt[4096] = "", how[4400] = "";
    const int saved = resume_from ? precision_saved(resume_from, ckpt, sizeof ckpt) : -1;
    if (cfg->runtime.device == DEVICE_CUDA) {
        if (cfg->runtime.precision != PREC_AUTO) return -1;
        if (saved >= 0 && saved != PREC_BF16)
            fprintf(stderr, "precision: auto keeps %s, the choice of the checkpoint %s (on cuda auto would choose bf16 now)\n",
                    name_of(saved), ckpt);
        else
            fprintf(stderr, "precision: auto chose bf16 (runtime.device: cuda: bf16 tensor-core products)\n");
        return saved >= 0 ? saved : PREC_BF16;
    }
    if (cfg->runtime.precision == PREC_FP32) return -1;
    if (cfg->runtime.precision == PREC_BF16) {
        Backend *be = backend_cpu_create_for(cfg->runtime.threads, 1);  // says once that it emulates
        const int native = backend_cpu_native_bf16(be);
        be->destroy(be);
        if (native) return -1;
        PrecisionRates r = machine_rates(cfg, how, sizeof how);
        if (r.fp32_gflops > 0 && r.bf16_gflops > 0)
            fprintf(stderr, "note: runtime.precision: bf16 is emulated here: its matmuls ran at %.2fx fp32's rate on "
                            "this model's products (%.0f against %.0f GFLOP/s, %s)%s\n", r.bf16_gflops / r.fp32_gflops,
                    r.bf16_gflops, r.fp32_gflops, how,
                    r.bf16_gflops < r.fp32_gflops ? "; runtime.precision: auto or fp32 avoids the slowdown" : "");
        return -1;
    }
    PrecisionRates r = machine_rates(cfg, how, sizeof how);
    const Precision now = precision_choose(&r, why, sizeof why);
    if (saved >= 0 && saved != (int)now)
        fprintf(stderr, "precision: auto keeps %s, the choice of the checkpoint %s; this machine would choose %s now (%s)\n",
                name_of(saved), ckpt, name_of(now), why);
    else if (saved >= 0)
        fprintf(stderr, "precision: auto keeps %s, the checkpoint's choice, as this machine would (%s)\n", name_of(saved), why);
    else
        fprintf(stderr, "precision: auto chose %s: %s [%s]\n", name_of(now), why, how);
    return saved >= 0 ? saved : (int)now;
}

void precision_resolve(Config *cfg, Comm *comm, const char *resume_from) {
    const int rank = comm ? comm_rank(comm) : 0;
    int choice = rank == 0 ? decide(cfg, resume_from) : -1;
    if (comm && comm_world(comm) > 1) comm_broadcast(comm, &choice, sizeof choice, 0);
    if (choice >= 0) cfg->runtime.precision = (Precision)choice;
    else if (cfg->runtime.precision == PREC_AUTO) cfg->runtime.precision = PREC_FP32;
}
