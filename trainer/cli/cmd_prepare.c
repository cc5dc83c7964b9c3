// mhetrain prepare: tokenize corpora into Megatron shards (data/prepare.h does the work).
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "common/error.h"
#include "common/fs.h"
#include "data/input_account.h"
#include "data/prepare.h"
#include "trainer/cli/commands.h"
#include "trainer/io/run_lock.h"

static const char USAGE[] =
    "usage: mhetrain prepare --tokenizer PATH --out DIR [options] INPUTS...\n"
    "       mhetrain prepare --text-out FILE [--format F] INPUTS...   (clean text only)\n"
    "\n"
    "Reads corpora, tokenizes every document and writes Megatron indexed shards\n"
    "DIR/train_00000.{bin,idx}, DIR/valid_00000.{bin,idx}, ... plus DIR/manifest.json.\n"
    "One sequence per document.  The output is byte-identical for the same inputs and\n"
    "settings whatever --threads is.\n"
    "\n"
    "INPUTS: MediaWiki XML dumps (.xml, .xml.bz2, multistream), WikiExtractor output\n"
    "(<doc> files or --json lines), plain-text books (.txt, Project Gutenberg header and\n"
    "footer stripped), JSON lines with a \"text\" field, parquet shards and Arrow files\n"
    "(Hugging Face hub datasets, a `datasets` cache; read through pyarrow: MHE_PYTHON, else\n"
    "the .venv beside the build folder, else python3), and - for JSON lines on standard\n"
    "input; directories are read recursively in sorted order (only their .parquet/.arrow\n"
    "files when they hold any).  Any text file may be bz2-compressed.\n"
    "\n"
    "options:\n"
    "  --tokenizer PATH       vocab.txt, tokenizer.json, vocab.json (+merges.txt) or a folder\n"
    "  --out DIR              output directory (created)\n"
    "  --shard-size-mb N      close a shard once its .bin reaches N MB (default 256)\n"
    "  --valid-docs-per-source N  validation split: from every input, documents drawn in a\n"
    "                         seeded order until it gives N of them (default 30) ...\n"
    "  --valid-min-tokens T   ... and its equal share of T tokens (default 100000); never more\n"
    "                         than half of an input's documents.  Each input is one source:\n"
    "                         give a wiki dump and a books folder as two inputs\n"
    "  --valid-fraction F     instead: each document goes to validation with probability F\n"
    "  --seed S               seed of the train/validation split (default 1234)\n"
    "  --threads N            tokenizing threads (default: the number of cores)\n"
    "  --whole-books          one document per book (default: one per chapter, see\n"
    "                         data/README.md)\n"
    "  --format F             auto|wiki|wikiextractor|books|jsonl|parquet|arrow (default\n"
    "                         auto: by file extension, then content)\n"
    "  --text-column NAME     JSON lines, parquet, Arrow: the document's text (default text)\n"
    "  --title-column NAME    the title, where a row has one: a first line equal to it is\n"
    "                         dropped, as a heading (default title)\n"
    "  --text-out FILE        also write the cleaned documents, one paragraph per line and\n"
    "                         a blank line between documents (input for tokenizer training)\n";

// One prepare per output folder, as one trainer per out_dir (trainer/io/run_lock.c): two runs
// would remove each other's staging files.  The flock dies with its holder, so a lock file left
// by a killed run is free; the file names the holder for the refusal only.  Held until exit.
static void lock_out_dir(const char *dir) {
    char path[4200];
    mhe_mkdirs(dir);
    snprintf(path, sizeof path, "%s/.prepare.lock", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) mhe_fail("prepare: %s: cannot open the lock: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[128];
        run_lock_holder(fd, holder, sizeof holder);
        if (err == EWOULDBLOCK)
            mhe_fail("prepare: --out %s is being written by another mhetrain prepare (%s); wait for it or choose "
                     "another --out", dir, holder[0] ? holder : "pid unknown");
        mhe_fail("prepare: %s: cannot lock: %s", path, strerror(err));
    }
    if (run_lock_claim(fd) != 0)
        mhe_fail("prepare: %s: cannot write the lock: %s", path, strerror(errno));
}

static const char *need_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) mhe_fail("prepare: %s needs a value", argv[*i]);
    return argv[++*i];
}


int cmd_prepare(int argc, char **argv) {
    if (cli_wants_help(argc, argv)) {
        fputs(USAGE, stdout);
        return 0;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    PrepareOptions o = {.shard_size_mb = 256, .valid_docs_per_source = 30,
                        .valid_min_tokens = 100000, .seed = 1234,
                        .threads = cores > 0 ? (int)cores : 1};
    o.inputs = mhe_calloc((size_t)argc, sizeof *o.inputs);
    bool per_source_given = false;
    const char *text_column = "text", *title_column = "title";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--tokenizer") == 0) o.tokenizer = need_value(argc, argv, &i);
        else if (strcmp(a, "--out") == 0) o.out_dir = need_value(argc, argv, &i);
        else if (strcmp(a, "--text-out") == 0) o.text_out = need_value(argc, argv, &i);
        else if (strcmp(a, "--shard-size-mb") == 0)
            o.shard_size_mb = cli_real_option("prepare", a, need_value(argc, argv, &i), 1e-6, 1e6);
        else if (strcmp(a, "--valid-fraction") == 0) {
            o.valid_fraction = cli_real_option("prepare", a, need_value(argc, argv, &i), 0, 1);
            o.valid_by_fraction = true;
        } else if (strcmp(a, "--valid-docs-per-source") == 0) {
            o.valid_docs_per_source = (int)cli_int_option("prepare", a, need_value(argc, argv, &i), 0, 1000000000);
            per_source_given = true;
        } else if (strcmp(a, "--valid-min-tokens") == 0) {
            o.valid_min_tokens = (int64_t)cli_int_option("prepare", a, need_value(argc, argv, &i), 0, 1000000000000000LL);
            per_source_given = true;
        } else if (strcmp(a, "--whole-books") == 0)
            o.whole_books = true;
        else if (strcmp(a, "--seed") == 0)
            o.seed = (uint64_t)cli_int_option("prepare", a, need_value(argc, argv, &i), 0, INT64_MAX);
        else if (strcmp(a, "--threads") == 0)
            o.threads = (int)cli_int_option("prepare", a, need_value(argc, argv, &i), 1, 256);
        else if (strcmp(a, "--text-column") == 0 || strcmp(a, "--title-column") == 0) {
            const char *v = need_value(argc, argv, &i);
            if (!v[0]) mhe_fail("prepare: %s needs a column name", a);
            if (a[2] == 't' && a[3] == 'e') text_column = v;
            else title_column = v;
        } else if (strcmp(a, "--format") == 0) {
            const char *f = need_value(argc, argv, &i);
            if (!corpus_format_parse(f, &o.format))
                mhe_fail("prepare: unknown --format \"%s\" (expected auto, wiki, wikiextractor, "
                         "books, jsonl, parquet or arrow)", f);
        } else if (a[0] == '-' && a[1] == '-')
            mhe_fail("prepare: unknown option %s (see mhetrain prepare --help)", a);
        else
            o.inputs[o.n_inputs++] = argv[i];
    }
    if (o.valid_by_fraction && per_source_given)
        mhe_fail("prepare: --valid-fraction is another rule than --valid-docs-per-source and "
                 "--valid-min-tokens: give one or the other");
    if (o.n_inputs == 0) mhe_fail("prepare: no inputs given (see mhetrain prepare --help)");
    int stdin_inputs = 0;
    for (int i = 0; i < o.n_inputs; i++) stdin_inputs += strcmp(o.inputs[i], CORPUS_STDIN) == 0;
    if (stdin_inputs > 1) mhe_fail("prepare: - (standard input) given %d times; it can be read once", stdin_inputs);
    if (strcmp(text_column, title_column) == 0)
        mhe_fail("prepare: --text-column and --title-column are both \"%s\"", text_column);
    corpus_set_columns(text_column, title_column);
    if (!o.tokenizer && !o.text_out) mhe_fail("prepare: --tokenizer is required (or --text-out alone)");
    if (o.tokenizer && !o.out_dir) mhe_fail("prepare: --out DIR is required with --tokenizer");
    if (!o.tokenizer && o.out_dir) mhe_fail("prepare: --out needs --tokenizer");

    if (o.out_dir) lock_out_dir(o.out_dir);
    PrepareResult r;
    prepare_run(&o, &r);
    if (o.tokenizer) {
        long long tokens = (long long)(r.tokens[0] + r.tokens[1]);
        fprintf(stderr,
                "prepare: %lld documents (train %lld, valid %lld), %lld tokens (train %lld, "
                "valid %lld), %d+%d shards, %lld empty skipped\n",
                (long long)(r.documents[0] + r.documents[1]), (long long)r.documents[0],
                (long long)r.documents[1], tokens, (long long)r.tokens[0],
                (long long)r.tokens[1], r.shards[0], r.shards[1], (long long)r.skipped_empty);
    }
    for (int i = 0; o.tokenizer && !o.valid_by_fraction && i < r.n_sources; i++) {
        const SourceSplit *s = &r.sources[i];
        fprintf(stderr, "prepare: %s: %lld documents, %lld tokens; validation %lld documents, %lld tokens\n",
                o.inputs[i], (long long)s->documents, (long long)s->tokens,
                (long long)s->valid_documents, (long long)s->valid_tokens);
        if (!s->met)
            fprintf(stderr, "prepare: warning: %s: validation wanted %d documents and %lld tokens "
                            "from it, got %lld and %lld (at most half of its documents are taken)\n",
                    o.inputs[i], o.valid_docs_per_source, (long long)s->tokens_wanted,
                    (long long)s->valid_documents, (long long)s->valid_tokens);
    }
    prepare_account_print(stderr, &r.reading);
    if (r.nul_replaced > 0)
        fprintf(stderr, "prepare: %lld NUL characters (\\u0000) in the text replaced by U+FFFD (the documents are kept "
                        "whole; manifest.json: reading.nul_characters_replaced)\n", (long long)r.nul_replaced);
    if (o.tokenizer && o.valid_by_fraction && o.valid_fraction > 0 && r.documents[1] == 0)
        fprintf(stderr, "prepare: warning: no document fell into the validation split "
                        "(raise --valid-fraction for a corpus this small)\n");
    fprintf(stderr, "prepare: %.2f s, %.0f tokens/s, peak RSS %.1f MB\n", r.seconds,
            r.tokens_per_second, r.peak_rss_mb);
    free(o.inputs);
    free(r.sources);
    return 0;
}
