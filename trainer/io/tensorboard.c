#include "trainer/io/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/error.h"

// Protobuf wire types.
enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

typedef struct {
    unsigned char *p;
    size_t len;
} Out;

static void put_byte(Out *o, unsigned char b) { o->p[o->len++] = b; }

static void put_varint(Out *o, uint64_t v) {
    while (v >= 0x80) {
        put_byte(o, (unsigned char)(v | 0x80));
        v >>= 7;
    }
    put_byte(o, (unsigned char)v);
}

static void put_tag(Out *o, int field, int wire) { put_varint(o, (uint64_t)field << 3 | (uint64_t)wire); }

static void put_le(Out *o, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) put_byte(o, (unsigned char)(v >> (8 * i)));
}

static void put_double(Out *o, int field, double d) {
    uint64_t bits;
    memcpy(&bits, &d, 8);
    put_tag(o, field, WIRE_I64);
    put_le(o, bits, 8);
}

static void put_float(Out *o, int field, float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    put_tag(o, field, WIRE_I32);
    put_le(o, bits, 4);
}

static void put_bytes(Out *o, int field, const void *s, size_t n) {
    put_tag(o, field, WIRE_LEN);
    put_varint(o, n);
    memcpy(o->p + o->len, s, n);
    o->len += n;
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

// Sizes of the nested messages, needed before writing their length prefixes.
static size_t value_size(const char *tag) {
    size_t t = strlen(tag);
    return 1 + varint_size(t) + t + 1 + 4;
}

static size_t summary_size(int n, const char *const *tags) {
    size_t s = 0;
    for (int i = 0; i < n; i++) {
        size_t v = value_size(tags[i]);
        s += 1 + varint_size(v) + v;
    }
    return s;
}

static int ensure(TbWriter *w, size_t need) {
    if (need <= w->cap) return 0;
    w->cap = need * 2;
    w->buf = mhe_realloc(w->buf, w->cap);
    return 0;
}

// Frames the event in w->buf[16 ..] as a TFRecord and writes it.
static int write_record(TbWriter *w, size_t len) {
    unsigned char *rec = w->buf + 4;  // 12-byte header right before the data at offset 16
    Out h = {rec, 0};
    put_le(&h, len, 8);
    put_le(&h, crc32c_mask(crc32c(rec, 8)), 4);
    Out t = {w->buf + 16 + len, 0};
    put_le(&t, crc32c_mask(crc32c(w->buf + 16, len)), 4);
    if (fwrite(rec, 1, 12 + len + 4, w->f) != 12 + len + 4) return -1;
    return fflush(w->f) == 0 ? 0 : -1;
}

double tb_wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int tb_open(TbWriter *w, const char *dir, double wall_time) {
    memset(w, 0, sizeof *w);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    size_t n = strlen(dir) + strlen(host) + 64;
    w->path = mhe_malloc(n);
    // A run resumed within the same second must not truncate the previous process's file:
    // create exclusively, adding .1, .2, ... when the name is taken.
    int fd = -1;
    for (int k = 0; fd < 0 && k < 1000; k++) {
        if (k == 0) snprintf(w->path, n, "%s/events.out.tfevents.%lld.%s", dir, (long long)wall_time, host);
        else snprintf(w->path, n, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)wall_time, host, k);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 && errno != EEXIST) break;
    }
    w->f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!w->f) {
        int saved = errno;
        if (fd >= 0) close(fd);
        free(w->path);
        w->path = NULL;
        errno = saved;
        return -1;
    }
    ensure(w, 256);
    static const char version[] = "brain.Event:2";
    Out o = {w->buf + 16, 0};
    put_double(&o, 1, wall_time);
    put_tag(&o, 2, WIRE_VARINT);
    put_varint(&o, 0);
    put_bytes(&o, 3, version, sizeof version - 1);
    return write_record(w, o.len);
}

int tb_write_scalars(TbWriter *w, int64_t step, double wall_time, int n, const char *const *tags,
                     const float *values) {
    const size_t sum = summary_size(n, tags);
    ensure(w, 16 + 9 + 11 + 1 + 10 + sum + 4);
    Out o = {w->buf + 16, 0};
    put_double(&o, 1, wall_time);
    put_tag(&o, 2, WIRE_VARINT);
    put_varint(&o, (uint64_t)step);  // int64 negative values would take 10 bytes; steps are >= 0
    put_tag(&o, 5, WIRE_LEN);
    put_varint(&o, sum);
    for (int i = 0; i < n; i++) {
        put_tag(&o, 1, WIRE_LEN);
        put_varint(&o, value_size(tags[i]));
        put_bytes(&o, 1, tags[i], strlen(tags[i]));
        put_float(&o, 2, values[i]);
    }
    return write_record(w, o.len);
}

int tb_write_scalar(TbWriter *w, int64_t step, double wall_time, const char *tag, float value) {
    return tb_write_scalars(w, step, wall_time, 1, &tag, &value);
}

void tb_close(TbWriter *w) {
    if (w->f) fclose(w->f);
    free(w->path);
    free(w->buf);
    memset(w, 0, sizeof *w);
}
