// Multistream bz2: a cutter thread splits the file at stream starts, workers decode the pieces,
// the reader takes them back in order.
#include "data/bz2_parallel.h"

#include <bzlib.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"

// A job holds whole streams of at least this many compressed bytes (the last may be smaller).
#define JOB_TARGET (512 * 1024)
#define READ_CHUNK (1 << 20)

typedef enum { JOB_OK, JOB_TRUNCATED, JOB_CORRUPT } JobStatus;

typedef struct {
    unsigned char *in;
    size_t in_len;
    long long base;        // offset of in[0] in the file
    bool last;
    char *out;
    size_t out_len, out_cap;
    JobStatus status;
    long long bad_at;      // file offset where decoding failed
    int state;             // 0 empty, 1 queued, 2 decoding, 3 done
} Job;

struct Bz2Parallel {
    FILE *f;
    char *path;
    int threads, n_slots;
    Job *slots;            // job k lives in slots[k % n_slots]
    long long produced, next_decode, next_take;
    bool cut_done, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t cutter;
    pthread_t *workers;
};

bool bz2_is_stream_start(const unsigned char *b, size_t n, size_t i) {
    static const unsigned char BLOCK[6] = {0x31, 0x41, 0x59, 0x26, 0x53, 0x59};
    static const unsigned char END[6] = {0x17, 0x72, 0x45, 0x38, 0x50, 0x90};
    if (i + 10 > n) return false;
    if (b[i] != 'B' || b[i + 1] != 'Z' || b[i + 2] != 'h' || b[i + 3] < '1' || b[i + 3] > '9')
        return false;
    return memcmp(b + i + 4, BLOCK, 6) == 0 || memcmp(b + i + 4, END, 6) == 0;
}

static void push_job(Bz2Parallel *p, unsigned char *in, size_t len, long long base, bool last) {
    pthread_mutex_lock(&p->mu);
    // The job handed out last is still being read: its slot counts as taken.
    while (p->produced - p->next_take + (p->next_take > 0) >= p->n_slots && !p->stop)
        pthread_cond_wait(&p->cv, &p->mu);
    if (p->stop) {
        pthread_mutex_unlock(&p->mu);
        free(in);
        return;
    }
    Job *j = &p->slots[p->produced % p->n_slots];
    memset(j, 0, sizeof *j);
    j->in = in;
    j->in_len = len;
    j->base = base;
    j->last = last;
    j->state = 1;
    p->produced++;
    if (last) p->cut_done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void *cutter_main(void *arg) {
    Bz2Parallel *p = arg;
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0, searched = 0;
    long long base = 0;
    bool eof = false;
    for (;;) {
        // Cut at the first stream start at or after JOB_TARGET.
        size_t from = searched > JOB_TARGET ? searched : JOB_TARGET;
        size_t cut = 0;
        for (size_t i = from; i + 10 <= len; i++)
            if (bz2_is_stream_start(buf, len, i)) {
                cut = i;
                break;
            }
        if (cut) {
            unsigned char *job = mhe_malloc(cut);
            memcpy(job, buf, cut);
            push_job(p, job, cut, base, false);
            memmove(buf, buf + cut, len - cut);
            len -= cut;
            base += (long long)cut;
            searched = 0;
            continue;
        }
        searched = len > 9 ? len - 9 : 0;
        if (eof) {
            push_job(p, buf, len, base, true);  // the rest, possibly empty
            return NULL;
        }
        if (len + READ_CHUNK > cap) {
            cap = (len + READ_CHUNK) * 2;
            buf = mhe_realloc(buf, cap);
        }
        size_t n = fread(buf + len, 1, READ_CHUNK, p->f);
        len += n;
        if (n < READ_CHUNK) eof = true;
    }
}

static void decode_job(Job *j) {
    bz_stream bz;
    size_t pos = 0;
    while (pos < j->in_len) {
        memset(&bz, 0, sizeof bz);
        if (BZ2_bzDecompressInit(&bz, 0, 0) != BZ_OK) mhe_fatal("cannot initialise bz2 decoder");
        bz.next_in = (char *)j->in + pos;
        bz.avail_in = (unsigned)(j->in_len - pos);
        int rc;
        do {
            if (j->out_cap - j->out_len < 65536) {
                j->out_cap = j->out_cap ? 2 * j->out_cap : 4 * j->in_len + 65536;
                j->out = mhe_realloc(j->out, j->out_cap);
            }
            bz.next_out = j->out + j->out_len;
            bz.avail_out = (unsigned)(j->out_cap - j->out_len > 1u << 30 ? 1u << 30 : j->out_cap - j->out_len);
            unsigned before = bz.avail_out;
            rc = BZ2_bzDecompress(&bz);
            j->out_len += before - bz.avail_out;
            if (rc == BZ_OK && bz.avail_in == 0 && before == bz.avail_out) break;  // input ran out
        } while (rc == BZ_OK);
        size_t used = (j->in_len - pos) - bz.avail_in;
        BZ2_bzDecompressEnd(&bz);
        if (rc == BZ_STREAM_END) {
            pos += used;
            continue;
        }
        j->bad_at = j->base + (long long)(pos + used);
        j->status = rc == BZ_OK && j->last ? JOB_TRUNCATED : JOB_CORRUPT;
        return;
    }
}

static void *worker_main(void *arg) {
    Bz2Parallel *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next_decode == p->produced && !p->cut_done)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop || (p->cut_done && p->next_decode == p->produced)) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        Job *j = &p->slots[p->next_decode++ % p->n_slots];
        j->state = 2;
        pthread_mutex_unlock(&p->mu);
        decode_job(j);
        pthread_mutex_lock(&p->mu);
        j->state = 3;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

Bz2Parallel *bz2_parallel_open(FILE *f, const char *path, int threads) {
    Bz2Parallel *p = mhe_calloc(1, sizeof *p);
    p->f = f;
    p->path = mhe_strdup(path);
    p->threads = threads;
    p->n_slots = 2 * threads + 1;
    p->slots = mhe_calloc((size_t)p->n_slots, sizeof *p->slots);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->next_take = 0;
    p->workers = mhe_calloc((size_t)threads, sizeof *p->workers);
    if (pthread_create(&p->cutter, NULL, cutter_main, p) != 0) mhe_fatal("cannot start a thread");
    for (int i = 0; i < threads; i++)
        if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) mhe_fatal("cannot start a thread");
    return p;
}

// The job handed out last stays in its slot until the next call (the caller reads its data).
bool bz2_parallel_next(Bz2Parallel *p, const char **data, size_t *len) {
    pthread_mutex_lock(&p->mu);
    if (p->next_take > 0) {  // release the previous job
        Job *prev = &p->slots[(p->next_take - 1) % p->n_slots];
        if (prev->state == 3) {
            free(prev->in);
            free(prev->out);
            prev->in = NULL;
            prev->out = NULL;
            prev->state = 0;
        }
    }
    for (;;) {
        if (p->cut_done && p->next_take == p->produced) {
            pthread_mutex_unlock(&p->mu);
            return false;
        }
        Job *j = &p->slots[p->next_take % p->n_slots];
        if (p->next_take < p->produced && j->state == 3) break;
        pthread_cond_wait(&p->cv, &p->mu);
    }
    Job *j = &p->slots[p->next_take % p->n_slots];
    p->next_take++;
    pthread_cond_broadcast(&p->cv);  // a slot may be free for the cutter
    pthread_mutex_unlock(&p->mu);
    if (j->status == JOB_TRUNCATED)
        mhe_fail_byte(p->path, j->bad_at, "truncated bz2 stream (file ends before the stream end marker)");
    if (j->status == JOB_CORRUPT)
        mhe_fail_byte(p->path, j->bad_at, "corrupt bz2 data (checksum or block error)");
    *data = j->out;
    *len = j->out_len;
    return true;
}

void bz2_parallel_close(Bz2Parallel *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->cutter, NULL);
    for (int i = 0; i < p->threads; i++) pthread_join(p->workers[i], NULL);
    for (int i = 0; i < p->n_slots; i++) {
        free(p->slots[i].in);
        free(p->slots[i].out);
    }
    fclose(p->f);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->slots);
    free(p->workers);
    free(p->path);
    free(p);
}
