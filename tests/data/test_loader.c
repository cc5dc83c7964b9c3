// The loader against an oracle built in the test: shards written from known documents, the
// expected token stream assembled here, and the packing / ordering / masking rules of
// loader.h checked sample by sample.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/rng.h"
#include "data/loader.h"
#include "data/shard.h"

#define VOCAB 1000
#define PAD 0
#define UNK 1
#define CLS 2
#define SEP 3
#define MASK 4
#define EOS 5
#define N_SHARDS 3
#define DOCS_PER_SHARD 40

typedef struct {
    char dir[64];
    char stem[128];
    int32_t *stream_mlm, *stream_clm;  // documents + separator, as the loader must see them
    int64_t stream_len;
} Fixture;

static Fixture fx;

static int setup(void **state) {
    (void)state;
    snprintf(fx.dir, sizeof fx.dir, "/tmp/mhe_loaderXXXXXX");
    assert_non_null(mkdtemp(fx.dir));
    snprintf(fx.stem, sizeof fx.stem, "%s/train", fx.dir);
    fx.stream_mlm = malloc(sizeof(int32_t) * N_SHARDS * DOCS_PER_SHARD * 200);
    fx.stream_clm = malloc(sizeof(int32_t) * N_SHARDS * DOCS_PER_SHARD * 200);
    fx.stream_len = 0;
    Rng r = rng_stream(99, 1, 2);
    int32_t doc[200];
    for (int s = 0; s < N_SHARDS; s++) {
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%s_%05d", fx.stem, s);
        ShardWriter *w = shard_writer_open(prefix, VOCAB);
        for (int d = 0; d < DOCS_PER_SHARD; d++) {
            int n = 1 + (int)(rng_next(&r) % 190);
            for (int i = 0; i < n; i++) {
                // Ordinary tokens, plus an occasional [UNK] (special: never masked).
                doc[i] = rng_next(&r) % 50 == 0 ? UNK : 10 + (int32_t)(rng_next(&r) % (VOCAB - 10));
                fx.stream_mlm[fx.stream_len + i] = fx.stream_clm[fx.stream_len + i] = doc[i];
            }
            fx.stream_len += n;
            fx.stream_mlm[fx.stream_len] = SEP;
            fx.stream_clm[fx.stream_len] = EOS;
            fx.stream_len++;
            shard_writer_add(w, doc, (size_t)n);
        }
        shard_writer_close(w);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", fx.dir);
    assert_int_equal(system(cmd), 0);
    free(fx.stream_mlm);
    free(fx.stream_clm);
    return 0;
}

static LoaderOptions options(Objective obj, int T, int G, int B, float mask_prob) {
    LoaderOptions o = {.objective = obj, .seq_len = T, .global_batch = G, .micro_batch = B,
                       .shuffle_seed = 7, .mask_seed = 11, .mask_prob = mask_prob,
                       .mask_token_frac = 0.8f, .random_token_frac = 0.1f, .vocab_size = VOCAB,
                       .special = {.cls = CLS, .sep = SEP, .mask = MASK, .pad = PAD, .unk = UNK,
                                   .eos = obj == OBJ_CLM ? EOS : -1}};
    return o;
}

static Loader *open_stem(const LoaderOptions *o) {
    char *p[1] = {fx.stem};
    return loader_open(1, p, o);
}

static void test_mlm_samples_pack_the_stream(void **state) {
    (void)state;
    const int T = 64, C = T - 2;
    LoaderOptions o = options(OBJ_MLM, T, 4, 2, 0.0f);
    Loader *l = open_stem(&o);
    assert_int_equal(loader_stream_tokens(l), fx.stream_len);
    int64_t N = loader_samples_per_epoch(l);
    assert_int_equal(N, (fx.stream_len + C - 1) / C);
    int32_t ids[64], attn[64], labels[64];
    for (int64_t i = 0; i < N; i++) {
        loader_sample(l, 0, i, ids, attn, labels);
        int64_t n = fx.stream_len - i * C < C ? fx.stream_len - i * C : C;
        assert_int_equal(ids[0], CLS);
        assert_memory_equal(ids + 1, fx.stream_mlm + i * C, (size_t)n * sizeof(int32_t));
        assert_int_equal(ids[n + 1], SEP);
        for (int t = 0; t < T; t++) {
            assert_int_equal(attn[t], t < n + 2);
            assert_int_equal(labels[t], LOADER_IGNORE_LABEL);
            if (t >= n + 2) assert_int_equal(ids[t], PAD);
        }
    }
    loader_close(l);
}

static void test_one_epoch_covers_every_token_once(void **state) {
    (void)state;
    LoaderOptions o = options(OBJ_MLM, 32, 8, 2, 0.15f);
    Loader *l = open_stem(&o);
    int64_t N = loader_samples_per_epoch(l);
    // The order is a permutation of the samples in every epoch, and differs between epochs.
    char *seen = calloc((size_t)N, 1);
    int64_t same = 0;
    for (int64_t e = 0; e < 3; e++) {
        memset(seen, 0, (size_t)N);
        for (int64_t g = e * N; g < (e + 1) * N; g++) {
            int64_t epoch, s, s0;
            loader_global_sample(l, g, &epoch, &s);
            assert_int_equal(epoch, e);
            assert_true(s >= 0 && s < N);
            assert_false(seen[s]);
            seen[s] = 1;
            if (e == 1) {
                loader_global_sample(l, g - N, &epoch, &s0);
                same += s0 == s;
            }
        }
    }
    assert_true(same < N / 10);  // a reshuffle, not the same order
    // Samples are disjoint windows of the stream (checked above), so a permutation of them
    // covers every token exactly once: here, the multiset of content tokens over one epoch.
    int64_t *count = calloc(VOCAB, sizeof *count), *want = calloc(VOCAB, sizeof *want);
    for (int64_t i = 0; i < fx.stream_len; i++) want[fx.stream_mlm[i]]++;
    o.mask_prob = 0;
    Loader *plain = open_stem(&o);
    LoaderBatch b = loader_batch_alloc(plain);
    int64_t steps = (N + 7) / 8, rows = 0;
    for (int64_t st = 0; st < steps; st++)
        for (int m = 0; m < 4; m++) {
            loader_batch(plain, st, 0, 1, m, &b);
            for (int r = 0; r < 2 && rows < N; r++, rows++) {
                const int32_t *x = b.input_ids + r * 32, *a = b.attention_mask + r * 32;
                int n = 0;
                while (n < 32 && a[n]) n++;
                for (int t = 1; t < n - 1; t++) count[x[t]]++;  // between [CLS] and [SEP]
            }
        }
    assert_memory_equal(count, want, VOCAB * sizeof *count);
    loader_batch_free(&b);
    loader_close(plain);
    free(count);
    free(want);
    free(seen);
    loader_close(l);
}

// The global batch of a step as world ranks see it, concatenated in rank order.
static void global_batch(Loader *l, int64_t step, int world, int G, int T, int32_t *ids,
                         int32_t *labels, int32_t *attn) {
    LoaderBatch b = loader_batch_alloc(l);
    int M = loader_micro_batches(l, world), B = b.batch, row = 0;
    for (int r = 0; r < world; r++)
        for (int m = 0; m < M; m++, row += B) {
            loader_batch(l, step, r, world, m, &b);
            memcpy(ids + row * T, b.input_ids, sizeof(int32_t) * B * T);
            memcpy(labels + row * T, b.labels, sizeof(int32_t) * B * T);
            memcpy(attn + row * T, b.attention_mask, sizeof(int32_t) * B * T);
            for (int i = 0; i < B * T; i++) assert_int_equal(b.token_type_ids[i], 0);
        }
    assert_int_equal(row, G);
    loader_batch_free(&b);
}

static void test_world_sizes_see_same_global_batch(void **state) {
    (void)state;
    const int T = 48, G = 8;
    LoaderOptions o = options(OBJ_MLM, T, G, 2, 0.15f);
    Loader *l = open_stem(&o);
    int64_t steps = 2 * loader_samples_per_epoch(l) / G + 3;  // crosses two epoch boundaries
    size_t n = (size_t)G * T;
    int32_t *ref[3], *cur[3];
    for (int k = 0; k < 3; k++) ref[k] = malloc(n * 4), cur[k] = malloc(n * 4);
    int64_t masked = 0;
    for (int64_t s = 0; s < steps; s++) {
        global_batch(l, s, 1, G, T, ref[0], ref[1], ref[2]);
        for (int world = 2; world <= 4; world *= 2) {
            global_batch(l, s, world, G, T, cur[0], cur[1], cur[2]);
            for (int k = 0; k < 3; k++) assert_memory_equal(ref[k], cur[k], n * 4);
        }
        for (size_t i = 0; i < n; i++) masked += ref[1][i] != LOADER_IGNORE_LABEL;
    }
    assert_true(masked > 0);  // the masks that agree are real masks
    for (int k = 0; k < 3; k++) free(ref[k]), free(cur[k]);
    loader_close(l);
}

static void test_resume_at_step_k_reproduces_the_run(void **state) {
    (void)state;
    const int T = 40, G = 8, K = 7, AFTER = 6;
    LoaderOptions o = options(OBJ_MLM, T, G, 4, 0.15f);
    Loader *l = open_stem(&o);
    size_t n = (size_t)G * T;
    int32_t *run = malloc(n * 4 * (K + AFTER)), *lab = malloc(n * 4 * (K + AFTER)), *at = malloc(n * 4);
    for (int s = 0; s < K + AFTER; s++) global_batch(l, s, 1, G, T, run + s * n, lab + s * n, at);
    loader_close(l);
    // A new process, on 2 workers, resuming from the step number alone.
    o.micro_batch = 2;
    Loader *r = open_stem(&o);
    int32_t *ids = malloc(n * 4), *labels = malloc(n * 4);
    for (int s = K; s < K + AFTER; s++) {
        global_batch(r, s, 2, G, T, ids, labels, at);
        assert_memory_equal(ids, run + s * n, n * 4);
        assert_memory_equal(labels, lab + s * n, n * 4);
    }
    loader_close(r);
    free(run), free(lab), free(at), free(ids), free(labels);
}

static void check_mask_statistics(float prob, float fmask, float frand) {
    const int T = 128;
    LoaderOptions o = options(OBJ_MLM, T, 8, 8, prob);
    o.mask_token_frac = fmask;
    o.random_token_frac = frand;
    Loader *l = open_stem(&o);
    LoaderOptions p = o;
    p.mask_prob = 0;
    Loader *plain = open_stem(&p);
    int64_t N = loader_samples_per_epoch(l), eligible = 0, selected = 0, to_mask = 0, to_random = 0,
            unchanged = 0;
    int32_t ids[128], attn[128], labels[128], orig[128], oattn[128], olab[128];
    for (int64_t e = 0; e < 8; e++)
        for (int64_t i = 0; i < N; i++) {
            loader_sample(l, e, i, ids, attn, labels);
            loader_sample(plain, e, i, orig, oattn, olab);
            for (int t = 0; t < T; t++) {
                bool special = orig[t] < 10;  // PAD UNK CLS SEP MASK
                if (!attn[t] || special) {
                    assert_int_equal(labels[t], LOADER_IGNORE_LABEL);
                    assert_int_equal(ids[t], orig[t]);
                    continue;
                }
                eligible++;
                if (labels[t] == LOADER_IGNORE_LABEL) {
                    assert_int_equal(ids[t], orig[t]);
                    continue;
                }
                selected++;
                assert_int_equal(labels[t], orig[t]);
                if (ids[t] == MASK) to_mask++;
                else if (ids[t] == orig[t]) unchanged++;
                else {
                    to_random++;
                    assert_true(ids[t] > MASK && ids[t] < VOCAB);  // never a special token
                }
            }
        }
    double fs = (double)selected / (double)eligible, fm = (double)to_mask / (double)selected,
           fr = (double)to_random / (double)selected, fu = (double)unchanged / (double)selected;
    print_message("mask_prob %.2f: selected %.4f of %lld, [MASK] %.4f random %.4f unchanged %.4f\n",
                  prob, fs, (long long)eligible, fm, fr, fu);
    // Binomial standard deviations here: about 0.0012 (selection) and 0.0035 (split); the
    // tolerances are over 4 of them.
    assert_true(fabs(fs - prob) < 0.005);
    assert_true(fabs(fm - fmask) < 0.015);
    assert_true(fabs(fr - frand) < 0.015);
    assert_true(fabs(fu - (1 - fmask - frand)) < 0.015);
    loader_close(l);
    loader_close(plain);
}

static void test_masking_statistics_match_config(void **state) {
    (void)state;
    check_mask_statistics(0.15f, 0.8f, 0.1f);
    check_mask_statistics(0.30f, 0.5f, 0.25f);
}

static void test_masks_depend_on_epoch_and_sample_only(void **state) {
    (void)state;
    const int T = 64;
    LoaderOptions o = options(OBJ_MLM, T, 8, 2, 0.15f);
    Loader *l = open_stem(&o);
    int32_t a[64], b[64], c[64], la[64], lb[64], lc[64], m[64];
    loader_sample(l, 0, 5, a, m, la);
    loader_sample(l, 0, 5, b, m, lb);
    loader_sample(l, 1, 5, c, m, lc);
    assert_memory_equal(la, lb, sizeof la);
    assert_memory_equal(a, b, sizeof a);
    assert_true(memcmp(la, lc, sizeof la) != 0);  // a new epoch draws new masks
    loader_close(l);
}

static void test_clm_labels_are_next_tokens(void **state) {
    (void)state;
    const int T = 50;
    LoaderOptions o = options(OBJ_CLM, T, 4, 2, 0.15f);
    Loader *l = open_stem(&o);
    int64_t N = loader_samples_per_epoch(l);
    assert_int_equal(N, (fx.stream_len + T - 1) / T);
    int32_t ids[50], attn[50], labels[50];
    for (int64_t i = 0; i < N; i++) {
        loader_sample(l, 0, i, ids, attn, labels);
        for (int t = 0; t < T; t++) {
            int64_t p = i * T + t;
            assert_int_equal(attn[t], p < fx.stream_len);
            if (p < fx.stream_len) assert_int_equal(ids[t], fx.stream_clm[p]);
            assert_int_equal(labels[t], p + 1 < fx.stream_len ? fx.stream_clm[p + 1] : LOADER_IGNORE_LABEL);
        }
    }
    loader_close(l);
}

static void test_whole_word_masking_masks_whole_words(void **state) {
    (void)state;
    const int T = 128;
    uint8_t cont[VOCAB] = {0};
    for (int i = 500; i < VOCAB; i++) cont[i] = 1;  // "##" pieces
    LoaderOptions o = options(OBJ_MLM, T, 8, 8, 0.15f);
    o.whole_word = true;
    o.continuation = cont;
    Loader *l = open_stem(&o);
    LoaderOptions p = o;
    p.mask_prob = 0;
    Loader *plain = open_stem(&p);
    int64_t pieces = 0, selected = 0, eligible = 0;
    int32_t ids[128], attn[128], labels[128], orig[128], olab[128];
    for (int64_t i = 0; i < loader_samples_per_epoch(l); i++) {
        loader_sample(l, 0, i, ids, attn, labels);
        loader_sample(plain, 0, i, orig, attn, olab);
        for (int t = 1; t < T; t++) {
            if (!attn[t] || orig[t] < 10) continue;
            eligible++;
            selected += labels[t] != LOADER_IGNORE_LABEL;
            if (cont[orig[t]] && orig[t - 1] >= 10) {
                pieces++;
                assert_int_equal(labels[t] != LOADER_IGNORE_LABEL, labels[t - 1] != LOADER_IGNORE_LABEL);
            }
        }
    }
    assert_true(pieces > 1000);
    // Words average two pieces here, so the token share stays near mask_prob.
    double fs = (double)selected / (double)eligible;
    assert_true(fs > 0.12 && fs < 0.18);
    loader_close(l);
    loader_close(plain);
}

static void test_prefix_forms_name_the_same_shards(void **state) {
    (void)state;
    LoaderOptions o = options(OBJ_MLM, 32, 4, 2, 0.0f);
    char p0[256], p1[256], p2[256], glob_pat[256];
    snprintf(p0, sizeof p0, "%s_00000", fx.stem);
    snprintf(p1, sizeof p1, "%s_00001", fx.stem);
    snprintf(p2, sizeof p2, "%s_00002", fx.stem);
    snprintf(glob_pat, sizeof glob_pat, "%s/*.idx", fx.dir);
    char prefix_glob[256];
    snprintf(prefix_glob, sizeof prefix_glob, "%s_0000[0-2]", fx.stem);
    char *explicit_list[3] = {p0, p1, p2}, *g[2] = {glob_pat, prefix_glob};
    Loader *a = open_stem(&o), *b = loader_open(3, explicit_list, &o), *c = loader_open(1, g, &o);
    Loader *d = loader_open(1, g + 1, &o);
    assert_int_equal(loader_stream_tokens(d), fx.stream_len);
    loader_close(d);
    assert_int_equal(loader_stream_tokens(a), fx.stream_len);
    assert_int_equal(loader_stream_tokens(b), fx.stream_len);
    assert_int_equal(loader_stream_tokens(c), fx.stream_len);
    int32_t x[32], y[32], z[32], m[32], lab[32];
    for (int64_t i = 0; i < loader_samples_per_epoch(a); i++) {
        loader_sample(a, 0, i, x, m, lab);
        loader_sample(b, 0, i, y, m, lab);
        loader_sample(c, 0, i, z, m, lab);
        assert_memory_equal(x, y, sizeof x);
        assert_memory_equal(x, z, sizeof x);
    }
    loader_close(a), loader_close(b), loader_close(c);
}

static void put_le(FILE *f, uint64_t v, int n) {
    for (int i = 0; i < n; i++) fputc((int)((v >> (8 * i)) & 0xff), f);
}

static void test_documents_of_several_sequences_get_one_separator(void **state) {
    (void)state;
    // A Megatron shard with sentence-level sequences: doc 0 = seqs {0, 1, 2(empty)},
    // doc 1 = {3}, doc 2 = {4 (empty)}, doc 3 = {5}.
    const int32_t lens[6] = {3, 2, 0, 4, 0, 1};
    const int64_t doc_idx[5] = {0, 3, 4, 5, 6};
    char prefix[256], path[300];
    snprintf(prefix, sizeof prefix, "%s/sentences", fx.dir);
    snprintf(path, sizeof path, "%s.idx", prefix);
    FILE *f = fopen(path, "wb");
    fwrite("MMIDIDX\0\0", 1, 9, f);
    put_le(f, 1, 8);
    fputc(4, f);  // int32 ids
    put_le(f, 6, 8);
    put_le(f, 5, 8);
    for (int i = 0; i < 6; i++) put_le(f, (uint32_t)lens[i], 4);
    int64_t ptr = 0;
    for (int i = 0; i < 6; i++) put_le(f, (uint64_t)ptr, 8), ptr += 4 * lens[i];
    for (int i = 0; i < 5; i++) put_le(f, (uint64_t)doc_idx[i], 8);
    fclose(f);
    snprintf(path, sizeof path, "%s.bin", prefix);
    f = fopen(path, "wb");
    for (int t = 0; t < 10; t++) put_le(f, (uint64_t)(100 + t), 4);
    fclose(f);
    LoaderOptions o = options(OBJ_CLM, 4, 4, 1, 0.0f);
    char *p[1] = {prefix};
    Loader *l = loader_open(1, p, &o);
    const int32_t want[13] = {100, 101, 102, 103, 104, EOS, 105, 106, 107, 108, EOS, 109, EOS};
    assert_int_equal(loader_stream_tokens(l), 13);
    int32_t ids[4], attn[4], labels[4];
    for (int64_t i = 0; i < loader_samples_per_epoch(l); i++) {
        loader_sample(l, 0, i, ids, attn, labels);
        for (int t = 0; t < 4 && i * 4 + t < 13; t++) assert_int_equal(ids[t], want[i * 4 + t]);
    }
    loader_close(l);
    unlink(path);  // keep the directory to the train_* shards the other tests glob
    snprintf(path, sizeof path, "%s.idx", prefix);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mlm_samples_pack_the_stream),
        cmocka_unit_test(test_one_epoch_covers_every_token_once),
        cmocka_unit_test(test_world_sizes_see_same_global_batch),
        cmocka_unit_test(test_resume_at_step_k_reproduces_the_run),
        cmocka_unit_test(test_masking_statistics_match_config),
        cmocka_unit_test(test_masks_depend_on_epoch_and_sample_only),
        cmocka_unit_test(test_clm_labels_are_next_tokens),
        cmocka_unit_test(test_whole_word_masking_masks_whole_words),
        cmocka_unit_test(test_prefix_forms_name_the_same_shards),
        cmocka_unit_test(test_documents_of_several_sequences_get_one_separator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
