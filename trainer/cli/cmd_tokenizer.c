// mhetrain tokenizer: train a WordPiece or byte-level BPE tokenizer from text files, and
// encode text line by line (used by the parity tests and the throughput measurement).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/fs.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "trainer/cli/commands.h"

static const char *USAGE =
    "usage: mhetrain tokenizer train --type wordpiece|bpe --vocab-size N [--lowercase]\n"
    "                                [--min-frequency N] [--threads N] --out DIR INPUTS...\n"
    "       mhetrain tokenizer encode [--cased] [--bench] TOKENIZER FILE\n"
    "\n"
    "train   learns a vocabulary from INPUTS (books .txt, MediaWiki dumps .xml[.bz2],\n"
    "        WikiExtractor output, JSON lines, or folders of them, read by the corpus readers of\n"
    "        mhetrain prepare; every paragraph line is one text) and writes DIR/tokenizer.json\n"
    "        (Hugging Face format) plus vocab.txt (wordpiece) or vocab.json + merges.txt (bpe).\n"
    "        --threads N counting threads (default 2; the output is the same for any N).\n"
    "encode  prints the ids of every line of FILE, one line of space-separated ids per input\n"
    "        line.  TOKENIZER is a vocab.txt (uncased unless --cased), tokenizer.json,\n"
    "        vocab.json (with merges.txt beside it) or a directory.  --bench prints only the\n"
    "        single-thread throughput.\n";

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int parse_int(const char *flag, const char *v) {
    return (int)cli_int_option("tokenizer train", flag, v, 0, 100000000);
}

static int tok_cmd_encode(int argc, char **argv) {
    bool cased = false, bench = false;
    const char *pos[2];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--cased") == 0) cased = true;
        else if (strcmp(argv[i], "--bench") == 0) bench = true;
        else if (argv[i][0] == '-' && argv[i][1]) mhe_fail("tokenizer encode: unknown option %s", argv[i]);
        else if (npos < 2) pos[npos++] = argv[i];
        else mhe_fail("tokenizer encode: too many arguments");
    }
    if (npos != 2) mhe_fail("tokenizer encode: expected TOKENIZER FILE\n%s", USAGE);
    Tokenizer *t = cased && mhe_has_suffix(pos[0], ".txt") && !mhe_has_suffix(pos[0], "merges.txt")
                       ? tokenizer_load_wordpiece_vocab(pos[0], false)
                       : tokenizer_load(pos[0]);
    size_t len;
    char *text = mhe_read_file(pos[1], &len);
    // What prepare refuses in a text input, refused here with prepare's message.
    corpus_check_utf8(pos[1], text, len, 0);
    IdBuf ids = {0};
    size_t lines = 0, tokens = 0;
    double t0 = mhe_now_s(), c0 = cpu_s();
    size_t i = 0;
    char num[16];
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n') e++;
        idbuf_clear(&ids);
        tokenizer_encode(t, text + i, e - i, &ids);
        lines++;
        tokens += ids.len;
        if (!bench) {
            for (size_t k = 0; k < ids.len; k++) {
                int n = snprintf(num, sizeof num, k ? " %d" : "%d", (int)ids.ids[k]);
                fwrite(num, 1, (size_t)n, stdout);
            }
            fputc('\n', stdout);
        }
        i = e + 1;
    }
    double dt = mhe_now_s() - t0, dc = cpu_s() - c0;
    if (bench)  // MB per CPU second is the per-core rate even on a loaded machine
        printf("bytes %zu lines %zu tokens %zu seconds %.3f cpu_seconds %.3f MB/s %.2f "
               "MB/cpu-s %.2f\n", len, lines, tokens, dt, dc, (double)len / 1e6 / (dt > 0 ? dt : 1e-9),
               (double)len / 1e6 / (dc > 0 ? dc : 1e-9));
    idbuf_free(&ids);
    free(text);
    tokenizer_free(t);
    return fflush(stdout) == 0 ? 0 : 1;
}

static int tok_cmd_train(int argc, char **argv) {
    TokenizerTrainOptions opt = {.kind = TOK_WORDPIECE, .vocab_size = 0, .threads = 2};
    const char *out = NULL;
    bool have_type = false;
    char **inputs = mhe_malloc((size_t)argc * sizeof *inputs);
    int n_in = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (strcmp(a, "--type") == 0 && has_val) {
            const char *v = argv[++i];
            if (strcmp(v, "wordpiece") == 0) opt.kind = TOK_WORDPIECE;
            else if (strcmp(v, "bpe") == 0) opt.kind = TOK_BPE;
            else mhe_fail("--type: expected wordpiece or bpe, got \"%s\"", v);
            have_type = true;
        } else if (strcmp(a, "--vocab-size") == 0 && has_val) {
            opt.vocab_size = parse_int(a, argv[++i]);
        } else if (strcmp(a, "--min-frequency") == 0 && has_val) {
            opt.min_frequency = parse_int(a, argv[++i]);
        } else if (strcmp(a, "--threads") == 0 && has_val) {
            opt.threads = parse_int(a, argv[++i]);
        } else if (strcmp(a, "--lowercase") == 0) {
            opt.lowercase = true;
        } else if (strcmp(a, "--out") == 0 && has_val) {
            out = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            mhe_fail("tokenizer train: unknown option or missing value: %s", a);
        } else {
            inputs[n_in++] = argv[i];
        }
    }
    if (!have_type) mhe_fail("tokenizer train: --type wordpiece|bpe is required");
    if (opt.vocab_size <= 0) mhe_fail("tokenizer train: --vocab-size N is required");
    if (!out) mhe_fail("tokenizer train: --out DIR is required");
    if (n_in == 0) mhe_fail("tokenizer train: no INPUTS given");
    double t0 = mhe_now_s();
    Tokenizer *t = tokenizer_train(&opt, n_in, inputs);
    tokenizer_save(t, out);
    if (tokenizer_vocab_size(t) > opt.vocab_size)
        fprintf(stderr, "tokenizer: the special tokens and the alphabet alone exceed --vocab-size %d\n",
                opt.vocab_size);
    else if (tokenizer_vocab_size(t) < opt.vocab_size)
        fprintf(stderr, "tokenizer: no pair left to merge before --vocab-size %d\n", opt.vocab_size);
    fprintf(stderr, "tokenizer: %s vocabulary of %d tokens written to %s in %.1f s\n",
            opt.kind == TOK_WORDPIECE ? "wordpiece" : "bpe", tokenizer_vocab_size(t), out,
            mhe_now_s() - t0);
    tokenizer_free(t);
    free(inputs);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    if (argc < 2 || cli_wants_help(argc, argv)) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "train") == 0) return tok_cmd_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "encode") == 0) return tok_cmd_encode(argc - 1, argv + 1);
    mhe_fail("tokenizer: unknown action \"%s\" (expected train or encode)\n%s", argv[1], USAGE);
}
