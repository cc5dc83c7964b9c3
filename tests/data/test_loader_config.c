// The loader opened from a Config on shards that `mhetrain prepare` wrote from a real book
// with the real BERT vocabulary: special ids and whole-word pieces come from the tokenizer.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/error.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "trainer/config/config.h"

static char dir[64], vocab[4096];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mhe_loadcfgXXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(vocab, sizeof vocab, "%s/../shared/data/tokenizers/bert-base-uncased-vocab.txt", MHE_SOURCE_DIR);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s prepare --tokenizer %s --out %s/shards --valid-fraction 0.3 --seed 3 "
             "--shard-size-mb 0.2 %s/../shared/data/books 2>/dev/null",
             getenv("MHETRAIN"), vocab, dir, MHE_SOURCE_DIR);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static void make_config(Config *cfg) {
    config_defaults(cfg);
    cfg->model.vocab_size = 30522;
    cfg->model.max_seq = 128;
    free(cfg->data.tokenizer);
    cfg->data.tokenizer = mhe_strdup(vocab);
    char p[128];
    snprintf(p, sizeof p, "%s/shards/train", dir);
    cfg->data.train[cfg->data.n_train++] = mhe_strdup(p);
    snprintf(p, sizeof p, "%s/shards/valid", dir);
    cfg->data.valid[cfg->data.n_valid++] = mhe_strdup(p);
    cfg->data.seq_len = 128;
    cfg->train.global_batch = 8;
    cfg->train.micro_batch = 4;
    cfg->objective.whole_word = true;
}

static void test_config_loader_uses_tokenizer_specials_and_word_pieces(void **state) {
    (void)state;
    Config cfg;
    make_config(&cfg);
    Tokenizer *tok = tokenizer_load(vocab);
    SpecialIds sp = tokenizer_special_ids(tok);
    assert_int_equal(sp.cls, 101);
    assert_int_equal(sp.sep, 102);
    assert_int_equal(sp.mask, 103);
    Loader *l = loader_open_config(&cfg, false);
    Loader *v = loader_open_config(&cfg, true);
    assert_true(loader_samples_per_epoch(l) > 1000);  // four books, ~1.4M tokens
    assert_true(loader_samples_per_epoch(v) > 0);
    LoaderBatch b = loader_batch_alloc(l);
    int64_t pieces = 0, masked = 0, positions = 0;
    for (int64_t step = 0; step < 50; step++) {
        for (int m = 0; m < loader_micro_batches(l, 1); m++) {
            loader_batch(l, step, 0, 1, m, &b);
            for (int r = 0; r < b.batch; r++) {
                const int32_t *x = b.input_ids + r * 128, *y = b.labels + r * 128;
                assert_int_equal(x[0], 101);
                if (b.attention_mask[r * 128 + 127]) assert_int_equal(x[127], 102);
                for (int t = 1; t < 127; t++) {
                    int orig = y[t] != LOADER_IGNORE_LABEL ? y[t] : x[t];
                    int prev = y[t - 1] != LOADER_IGNORE_LABEL ? y[t - 1] : x[t - 1];
                    positions++;
                    masked += y[t] != LOADER_IGNORE_LABEL;
                    if (y[t] != LOADER_IGNORE_LABEL && x[t] != 103 && x[t] != orig)
                        assert_true(x[t] >= 0 && x[t] < 30522);
                    // A "##" piece shares its word's selection (the previous piece's).
                    const char *s = tokenizer_id_to_token(tok, orig);
                    if (s && strncmp(s, "##", 2) == 0 && prev != 0 && (prev < 100 || prev > 103)) {
                        pieces++;
                        assert_int_equal(y[t] != LOADER_IGNORE_LABEL, y[t - 1] != LOADER_IGNORE_LABEL);
                    }
                }
            }
        }
    }
    double f = (double)masked / (double)positions;
    print_message("whole-word masking on a real book: %.4f of %lld positions, %lld ## pieces\n", f,
                  (long long)positions, (long long)pieces);
    assert_true(pieces > 500);
    assert_true(f > 0.13 && f < 0.17);
    loader_batch_free(&b);
    loader_close(l);
    loader_close(v);
    tokenizer_free(tok);
    config_free(&cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_loader_uses_tokenizer_specials_and_word_pieces),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
