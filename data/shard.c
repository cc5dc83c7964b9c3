// Megatron indexed dataset: writer and memory-mapped, validating reader.
#include "data/shard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"

int shard_dtype_for_vocab(int vocab_size) {
    return vocab_size < SHARD_U16_VOCAB_LIMIT ? SHARD_DTYPE_U16 : SHARD_DTYPE_I32;
}

int shard_dtype_size(int code) {
    switch (code) {
    case SHARD_DTYPE_U8: case SHARD_DTYPE_I8: return 1;
    case SHARD_DTYPE_I16: case SHARD_DTYPE_U16: return 2;
    case SHARD_DTYPE_I32: return 4;
    case SHARD_DTYPE_I64: return 8;
    default: return 0;  // 6 f64, 7 f32: not token ids
    }
}

// Little-endian encoding independent of the host's byte order.
static void put_le(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

struct ShardWriter {
    char *prefix, *idx_path;
    FILE *bin;
    int dtype, elem_size;
    int32_t *lengths;
    int64_t n, cap, bytes;
    unsigned char *scratch;
    size_t scratch_cap;
};

static char *with_ext(const char *prefix, const char *ext) {
    size_t n = strlen(prefix) + strlen(ext) + 1;
    char *p = mhe_malloc(n);
    snprintf(p, n, "%s%s", prefix, ext);
    return p;
}

ShardWriter *shard_writer_open(const char *prefix, int vocab_size) {
    ShardWriter *w = mhe_calloc(1, sizeof *w);
    w->prefix = mhe_strdup(prefix);
    w->idx_path = with_ext(prefix, ".idx");
    char *bin_path = with_ext(prefix, ".bin");
    w->bin = fopen(bin_path, "wb");
    if (!w->bin) mhe_fatal("%s: cannot create: %s", bin_path, strerror(errno));
    free(bin_path);
    w->dtype = shard_dtype_for_vocab(vocab_size);
    w->elem_size = shard_dtype_size(w->dtype);
    return w;
}

void shard_writer_add(ShardWriter *w, const int32_t *ids, size_t n) {
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 1024;
        w->lengths = mhe_realloc(w->lengths, (size_t)w->cap * sizeof *w->lengths);
    }
    assert(n <= INT32_MAX);
    w->lengths[w->n++] = (int32_t)n;
    size_t need = n * (size_t)w->elem_size;
    if (need > w->scratch_cap) {
        w->scratch = mhe_realloc(w->scratch, need);
        w->scratch_cap = need;
    }
    for (size_t i = 0; i < n; i++)
        put_le(w->scratch + i * (size_t)w->elem_size, (uint64_t)(uint32_t)ids[i], w->elem_size);
    if (need && fwrite(w->scratch, 1, need, w->bin) != need)
        mhe_fatal("%s.bin: write failed: %s", w->prefix, strerror(errno));
    w->bytes += (int64_t)need;
}

int64_t shard_writer_bin_bytes(const ShardWriter *w) { return w->bytes; }
int64_t shard_writer_sequences(const ShardWriter *w) { return w->n; }

void shard_writer_close(ShardWriter *w) {
    if (fclose(w->bin) != 0) mhe_fatal("%s.bin: write failed: %s", w->prefix, strerror(errno));
    int64_t S = w->n, D = S + 1;
    size_t size = SHARD_HEADER_LEN + (size_t)S * 12 + (size_t)D * 8;
    unsigned char *b = mhe_malloc(size), *p = b;
    memcpy(p, SHARD_MAGIC, SHARD_MAGIC_LEN);
    p += SHARD_MAGIC_LEN;
    put_le(p, 1, 8), p += 8;
    *p++ = (unsigned char)w->dtype;
    put_le(p, (uint64_t)S, 8), p += 8;
    put_le(p, (uint64_t)D, 8), p += 8;
    for (int64_t i = 0; i < S; i++) put_le(p, (uint32_t)w->lengths[i], 4), p += 4;
    int64_t ptr = 0;
    for (int64_t i = 0; i < S; i++) {
        put_le(p, (uint64_t)ptr, 8), p += 8;
        ptr += (int64_t)w->lengths[i] * w->elem_size;
    }
    for (int64_t i = 0; i < D; i++) put_le(p, (uint64_t)i, 8), p += 8;
    FILE *f = fopen(w->idx_path, "wb");
    if (!f || fwrite(b, 1, size, f) != size || fclose(f) != 0)
        mhe_fatal("%s: write failed: %s", w->idx_path, strerror(errno));
    free(b);
    free(w->lengths);
    free(w->scratch);
    free(w->prefix);
    free(w->idx_path);
    free(w);
}

// Truncation while mapped: another job re-preparing the corpus shrinks a .bin under a running
// trainer, and touching the vanished pages raises SIGBUS.  Mapped .bin ranges are registered
// here so the handler can name the file in one line before exiting.  The table is written only
// at open/close (never concurrently with a fault in the same mapping), read by the handler.
#define MAX_MAPPED 256
static struct {
    const unsigned char *volatile start;
    size_t size;
    const char *path;
} mapped[MAX_MAPPED];

static void put_str(const char *s) {
    ssize_t ignored = write(STDERR_FILENO, s, strlen(s));  // async-signal-safe, unlike stdio
    (void)ignored;
}

static void on_sigbus(int signo, siginfo_t *info, void *ctx) {
    (void)ctx;
    const unsigned char *a = info->si_addr;
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped[i].start && a >= mapped[i].start && a < mapped[i].start + mapped[i].size) {
            put_str("mhetrain: ");
            put_str(mapped[i].path);
            put_str(": the shard shrank while it was being read (truncated or rewritten by another "
                    "process?); stopping -- restore the data and resume from the last checkpoint\n");
            _exit(1);
        }
    signal(signo, SIG_DFL);  // not ours: the default action (a core dump) is the right report
    raise(signo);
}

static void register_mapping(const unsigned char *p, size_t size, const char *path) {
    static int installed;
    if (!installed) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, NULL);
        installed = 1;
    }
    for (int i = 0; i < MAX_MAPPED; i++)
        if (!mapped[i].start) {
            mapped[i].size = size;
            mapped[i].path = path;
            mapped[i].start = p;
            return;
        }
}

static void unregister_mapping(const unsigned char *p) {
    for (int i = 0; i < MAX_MAPPED; i++)
        if (mapped[i].start == p) mapped[i].start = NULL;
}

static const unsigned char *map_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) mhe_fail("%s: cannot open shard: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) mhe_fail("%s: %s", path, strerror(errno));
    *size = (size_t)st.st_size;
    const unsigned char *p = NULL;
    if (*size) {
        p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) mhe_fatal("%s: mmap failed: %s", path, strerror(errno));
    }
    close(fd);
    return p;
}

ShardReader *shard_reader_open(const char *prefix) {
    ShardReader *r = mhe_calloc(1, sizeof *r);
    r->prefix = mhe_strdup(prefix);
    r->idx_path = with_ext(prefix, ".idx");
    r->bin_path = with_ext(prefix, ".bin");
    size_t isz;
    const unsigned char *idx = map_file(r->idx_path, &isz);
    const char *ip = r->idx_path;
    if (isz < SHARD_MAGIC_LEN || memcmp(idx, SHARD_MAGIC, SHARD_MAGIC_LEN) != 0)
        mhe_fail_byte(ip, 0, "bad magic: expected \"MMIDIDX\\0\\0\" (a Megatron indexed dataset index)");
    if (isz < SHARD_HEADER_LEN)
        mhe_fail_byte(ip, (long long)isz, "truncated header: expected %d bytes", SHARD_HEADER_LEN);
    uint64_t version = get_le(idx + 9, 8);
    if (version != 1) mhe_fail_byte(ip, 9, "unsupported version %llu (expected 1)",
                                    (unsigned long long)version);
    r->dtype = idx[17];
    r->elem_size = shard_dtype_size(r->dtype);
    if (!r->elem_size)
        mhe_fail_byte(ip, 17, "dtype code %d is not an integer token type (expected 1-5 or 8)",
                      r->dtype);
    uint64_t S = get_le(idx + 18, 8), D = get_le(idx + 26, 8);
    if (S > (uint64_t)1 << 40 || D > (uint64_t)1 << 40 || D < 1)
        mhe_fail_byte(ip, 18, "implausible counts: %llu sequences, %llu document indices",
                      (unsigned long long)S, (unsigned long long)D);
    uint64_t want = SHARD_HEADER_LEN + S * 12 + D * 8;
    if (want != isz)
        mhe_fail_byte(ip, (long long)(isz < want ? isz : want),
                      "size %zu does not match the header (%llu sequences and %llu document "
                      "indices need %llu bytes)", isz, (unsigned long long)S,
                      (unsigned long long)D, (unsigned long long)want);
    r->n_seq = (int64_t)S;
    r->n_doc = (int64_t)D;
    r->lengths = mhe_malloc((S ? S : 1) * sizeof *r->lengths);
    r->pointers = mhe_malloc((S ? S : 1) * sizeof *r->pointers);
    r->doc_idx = mhe_malloc(D * sizeof *r->doc_idx);
    const unsigned char *pl = idx + SHARD_HEADER_LEN, *pp = pl + S * 4, *pd = pp + S * 8;
    r->bin = map_file(r->bin_path, &r->bin_size);
    if (r->bin) register_mapping(r->bin, r->bin_size, r->bin_path);
    int64_t expect = 0;
    for (uint64_t i = 0; i < S; i++) {
        r->lengths[i] = (int32_t)(uint32_t)get_le(pl + 4 * i, 4);
        r->pointers[i] = (int64_t)get_le(pp + 8 * i, 8);
        if (r->lengths[i] < 0)
            mhe_fail_byte(ip, (long long)(SHARD_HEADER_LEN + 4 * i), "negative sequence length");
        if (r->pointers[i] != expect)
            mhe_fail_byte(ip, (long long)(pp - idx + 8 * i),
                          "pointer of sequence %llu is %lld, expected %lld (sum of the lengths "
                          "before it)", (unsigned long long)i, (long long)r->pointers[i],
                          (long long)expect);
        expect += (int64_t)r->lengths[i] * r->elem_size;
        r->n_tokens += r->lengths[i];
    }
    if ((int64_t)r->bin_size < expect)
        mhe_fail_byte(r->bin_path, (long long)r->bin_size,
                      "truncated: %s describes %lld bytes of tokens", r->idx_path, (long long)expect);
    if ((int64_t)r->bin_size > expect)
        mhe_fail_byte(r->bin_path, (long long)expect,
                      "%zu bytes but %s describes only %lld", r->bin_size, r->idx_path, (long long)expect);
    for (uint64_t i = 0; i < D; i++) {
        r->doc_idx[i] = (int64_t)get_le(pd + 8 * i, 8);
        bool bad = (i == 0 && r->doc_idx[i] != 0) || (i > 0 && r->doc_idx[i] < r->doc_idx[i - 1]) ||
                   r->doc_idx[i] > (int64_t)S || (i == D - 1 && r->doc_idx[i] != (int64_t)S);
        if (bad)
            mhe_fail_byte(ip, (long long)(pd - idx + 8 * i),
                          "document index %lld out of order (must rise from 0 to %llu)",
                          (long long)r->doc_idx[i], (unsigned long long)S);
    }
    munmap((void *)idx, isz);
    return r;
}

int32_t shard_reader_token(const ShardReader *r, int64_t s, int64_t j) {
    assert(s >= 0 && s < r->n_seq && j >= 0 && j < r->lengths[s]);
    const unsigned char *p = r->bin + r->pointers[s] + j * r->elem_size;
    switch (r->dtype) {
    case SHARD_DTYPE_U16: return (int32_t)(p[0] | (p[1] << 8));
    case SHARD_DTYPE_I32: return (int32_t)(uint32_t)get_le(p, 4);
    case SHARD_DTYPE_U8: return p[0];
    case SHARD_DTYPE_I8: return (int8_t)p[0];
    case SHARD_DTYPE_I16: return (int16_t)(uint16_t)(p[0] | (p[1] << 8));
    default: return (int32_t)(int64_t)get_le(p, 8);
    }
}

void shard_reader_tokens(const ShardReader *r, int64_t s, int64_t start, int64_t count,
                         int32_t *out) {
    assert(start >= 0 && start + count <= r->lengths[s]);
    if (r->dtype == SHARD_DTYPE_U16) {
        const unsigned char *p = r->bin + r->pointers[s] + start * 2;
        for (int64_t i = 0; i < count; i++) out[i] = (int32_t)(p[2 * i] | (p[2 * i + 1] << 8));
        return;
    }
    for (int64_t i = 0; i < count; i++) out[i] = shard_reader_token(r, s, start + i);
}

// Largest id in the whole .bin (every byte of it belongs to a sequence: checked on open), in
// one tight pass over the mapping; the slow per-token walk below runs only to name a bad id.
static bool all_ids_below(const ShardReader *r, int vocab_size) {
    size_t n = r->bin_size / (size_t)r->elem_size;
    if (r->dtype == SHARD_DTYPE_U16) {
        unsigned max = 0;
        for (size_t i = 0; i < n; i++) {
            unsigned v = r->bin[2 * i] | ((unsigned)r->bin[2 * i + 1] << 8);
            max = v > max ? v : max;
        }
        return n == 0 || (int64_t)max < vocab_size;
    }
    if (r->dtype == SHARD_DTYPE_I32) {
        uint32_t max = 0;  // negative ids show up as huge unsigned values
        for (size_t i = 0; i < n; i++) {
            uint32_t v = (uint32_t)get_le(r->bin + 4 * i, 4);
            max = v > max ? v : max;
        }
        return n == 0 || (int64_t)max < vocab_size;
    }
    return false;
}

void shard_reader_check_ids(const ShardReader *r, int vocab_size) {
    if (all_ids_below(r, vocab_size)) return;
    for (int64_t s = 0; s < r->n_seq; s++) {
        for (int64_t j = 0; j < r->lengths[s]; j++) {
            int64_t v;
            const unsigned char *p = r->bin + r->pointers[s] + j * r->elem_size;
            if (r->dtype == SHARD_DTYPE_I64) v = (int64_t)get_le(p, 8);
            else v = shard_reader_token(r, s, j);
            if (v < 0 || v >= vocab_size)
                mhe_fail_byte(r->bin_path, (long long)(p - r->bin),
                              "token id %lld of sequence %lld is outside the vocabulary: ids "
                              "must be in [0, %d) (model.vocab_size)", (long long)v, (long long)s,
                              vocab_size);
        }
    }
}

void shard_reader_close(ShardReader *r) {
    if (!r) return;
    if (r->bin) {
        unregister_mapping(r->bin);
        munmap((void *)r->bin, r->bin_size);
    }
    free(r->lengths);
    free(r->pointers);
    free(r->doc_idx);
    free(r->prefix);
    free(r->idx_path);
    free(r->bin_path);
    free(r);
}
