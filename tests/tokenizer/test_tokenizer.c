// Unit tests of the tokenizer API on the real BERT and GPT-2 files: special ids, lookups,
// continuation flags, concurrent encoding, invalid UTF-8 handling and a save/load round trip.
// Expected ids come from Hugging Face tokenizers 0.19.1 (bert-base-uncased, GPT-2).
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "data/tokenizer.h"

static char *data_path(const char *name) {
    const char *src = getenv("MHE_SOURCE_DIR");
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/../shared/data/tokenizers/%s", src ? src : ".", name);
    return buf;
}

static Tokenizer *bert(void) { return tokenizer_load(data_path("bert-base-uncased-vocab.txt")); }
static Tokenizer *gpt2(void) { return tokenizer_load(data_path("gpt2-vocab.json")); }

static void expect_ids(const Tokenizer *t, const char *text, const int *want, size_t n) {
    IdBuf b = {0};
    tokenizer_encode(t, text, strlen(text), &b);
    assert_int_equal(b.len, n);
    for (size_t i = 0; i < n; i++) assert_int_equal(b.ids[i], want[i]);
    idbuf_free(&b);
}

static void test_bert_basics(void **state) {
    (void)state;
    Tokenizer *t = bert();
    assert_int_equal(tokenizer_kind(t), TOK_WORDPIECE);
    assert_int_equal(tokenizer_vocab_size(t), 30522);
    SpecialIds s = tokenizer_special_ids(t);
    assert_int_equal(s.pad, 0);
    assert_int_equal(s.unk, 100);
    assert_int_equal(s.cls, 101);
    assert_int_equal(s.sep, 102);
    assert_int_equal(s.mask, 103);
    assert_int_equal(s.eos, -1);
    assert_string_equal(tokenizer_id_to_token(t, 7592), "hello");
    assert_int_equal(tokenizer_token_to_id(t, "##ing"), 2075);
    assert_int_equal(tokenizer_token_to_id(t, "no-such-token"), -1);
    assert_null(tokenizer_id_to_token(t, 30522));
    assert_true(tokenizer_is_continuation(t, 2075));
    assert_false(tokenizer_is_continuation(t, 7592));
    assert_false(tokenizer_is_continuation(t, 101));
    // HF: BertWordPieceTokenizer(vocab, lowercase=True).encode(text, add_special_tokens=False)
    const int want[] = {7592, 1010, 2088, 999, 27260, 7668, 15743, 100, 100, 102, 1060};
    expect_ids(t, "Hello, world! \xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 caf\xc3\xa9 na\xc3\xafve "
               "\xe4\xbd\xa0\xe5\xa5\xbd [SEP] x", want, 11);
    tokenizer_free(t);
}

static void test_gpt2_basics(void **state) {
    (void)state;
    Tokenizer *t = gpt2();
    assert_int_equal(tokenizer_kind(t), TOK_BPE);
    assert_int_equal(tokenizer_vocab_size(t), 50257);
    SpecialIds s = tokenizer_special_ids(t);
    assert_int_equal(s.eos, 50256);
    assert_int_equal(s.cls, -1);
    assert_int_equal(s.mask, -1);
    assert_int_equal(tokenizer_token_to_id(t, "\xc4\xa0the"), 262);  // "Ġthe"
    assert_false(tokenizer_is_continuation(t, 262));
    assert_true(tokenizer_is_continuation(t, tokenizer_token_to_id(t, "ing")));
    assert_false(tokenizer_is_continuation(t, 50256));
    // HF: BPE(gpt2) + ByteLevel(add_prefix_space=False) + special <|endoftext|>
    const int want[] = {1026, 338, 1105, 22514, 220, 220, 290, 220, 220, 197, 22524, 50256, 886};
    expect_ids(t, "It's 12 apples   and  \t tabs<|endoftext|> end", want, 13);
    tokenizer_free(t);
}

// Invalid UTF-8 encodes like its U+FFFD replacement (Python's errors="replace").
static void test_invalid_utf8(void **state) {
    (void)state;
    Tokenizer *ts[2] = {bert(), gpt2()};
    for (int k = 0; k < 2; k++) {
        IdBuf a = {0}, b = {0};
        const char bad[] = "ab\xff" "cd\xe2\x82 e\xf0\x9f";
        const char good[] = "ab\xef\xbf\xbd" "cd\xef\xbf\xbd e\xef\xbf\xbd";
        tokenizer_encode(ts[k], bad, sizeof bad - 1, &a);
        tokenizer_encode(ts[k], good, sizeof good - 1, &b);
        assert_true(a.len > 0);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.ids, b.ids, a.len * sizeof *a.ids);
        idbuf_free(&a);
        idbuf_free(&b);
        tokenizer_free(ts[k]);
    }
}

typedef struct {
    const Tokenizer *t;
    const char *text;
    IdBuf out;
} Job;

static void *encode_lines(void *arg) {
    Job *j = arg;
    const char *s = j->text;
    for (int rep = 0; rep < 20; rep++) {
        const char *p = s;
        while (*p) {
            const char *e = strchr(p, '\n');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            tokenizer_encode(j->t, p, n, &j->out);
            p += n + (e != NULL);
        }
    }
    return NULL;
}

// Several threads encoding with one tokenizer give the single-thread ids.
static void test_concurrent_encode(void **state) {
    (void)state;
    const char *text =
        "It was the best of times, it was the worst of times; caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd.\n"
        "Call me Ishmael.  Some years ago -- never mind how long precisely --\n"
        "\"I've heard\", said Holmes, \"that it's 1,000 pounds!\" <|endoftext|> [SEP]\n";
    Tokenizer *ts[2] = {bert(), gpt2()};
    for (int k = 0; k < 2; k++) {
        Job ref = {ts[k], text, {0}};
        encode_lines(&ref);
        Job jobs[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            jobs[i] = (Job){ts[k], text, {0}};
            assert_int_equal(pthread_create(&th[i], NULL, encode_lines, &jobs[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(jobs[i].out.len, ref.out.len);
            assert_memory_equal(jobs[i].out.ids, ref.out.ids, ref.out.len * sizeof *ref.out.ids);
            idbuf_free(&jobs[i].out);
        }
        idbuf_free(&ref.out);
        tokenizer_free(ts[k]);
    }
}

// tokenizer_save then tokenizer_load (tokenizer.json) gives the same vocabulary and ids.
static void test_save_load_round_trip(void **state) {
    (void)state;
    const char *bin = getenv("MHE_BINARY_DIR");
    char dir[4096];
    const char *text = "The Ma\xc3\xaetre d'h\xc3\xb4tel said: \"Don't!\" <|endoftext|> 42 [MASK]";
    Tokenizer *ts[2] = {bert(), gpt2()};
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/tokenizer_round_trip_%d", bin ? bin : "/tmp", k);
        assert_int_equal(tokenizer_save(ts[k], dir), 0);
        Tokenizer *back = tokenizer_load(dir);
        assert_int_equal(tokenizer_vocab_size(back), tokenizer_vocab_size(ts[k]));
        assert_int_equal(tokenizer_kind(back), tokenizer_kind(ts[k]));
        SpecialIds a = tokenizer_special_ids(ts[k]), b = tokenizer_special_ids(back);
        assert_memory_equal(&a, &b, sizeof a);
        for (int id = 0; id < tokenizer_vocab_size(back); id += 97)
            assert_string_equal(tokenizer_id_to_token(back, id), tokenizer_id_to_token(ts[k], id));
        IdBuf x = {0}, y = {0};
        tokenizer_encode(ts[k], text, strlen(text), &x);
        tokenizer_encode(back, text, strlen(text), &y);
        assert_int_equal(x.len, y.len);
        assert_memory_equal(x.ids, y.ids, x.len * sizeof *x.ids);
        idbuf_free(&x);
        idbuf_free(&y);
        tokenizer_free(back);
        tokenizer_free(ts[k]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_basics),
        cmocka_unit_test(test_gpt2_basics),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_concurrent_encode),
        cmocka_unit_test(test_save_load_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
