// Corpus readers and the wikitext cleaner: hand-written wikitext with the rendered prose as
// the oracle, real Gutenberg books, bz2 multistream, JSON lines and WikiExtractor files.
#include <bzlib.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/byte_source.h"
#include "data/corpus.h"
#include "data/wikitext.h"

static void expect_clean(const char *wikitext, const char *want) {
    StrBuf out = {0};
    wikitext_clean(wikitext, strlen(wikitext), &out);
    if (strcmp(out.s, want) != 0)
        fail_msg("wikitext %s\n  cleaned to \"%s\"\n  expected   \"%s\"", wikitext, out.s, want);
    strbuf_free(&out);
}

static void test_nested_templates_are_removed(void **state) {
    (void)state;
    expect_clean("A {{cite|x={{inner|{{deep}}}}|y}} B", "A B");
    expect_clean("{{Infobox\n| name = X\n| born = {{birth date|1900|1|1}}\n}}\nX was born.", "X was born.");
    expect_clean("Unclosed {{template stays out", "Unclosed template stays out");
}

static void test_tables_are_removed(void **state) {
    (void)state;
    expect_clean("Before\n{| class=\"wikitable\"\n|-\n| a || {{flag|b}}\n|-\n{|\n| nested\n|}\n|}\nAfter",
                 "Before\nAfter");
}

static void test_refs_and_comments_are_removed(void **state) {
    (void)state;
    expect_clean("Fact.<ref name=\"a\">{{cite web|url=http://x}} [[Link]]</ref> More<ref name=b/> "
                 "text<!-- hidden [[x]] -->.",
                 "Fact. More text.");
    expect_clean("A<REF>upper case</REF > b.", "A b.");
    // MediaWiki closes a ref only at "</ref>": a malformed "</ref name=x>" stays inside.
    expect_clean("X.<ref>{{Cite web|title = A</ref name=\"n\"> B|url = http://x}}</ref> Y.", "X. Y.");
}

static void test_link_text_is_kept(void **state) {
    (void)state;
    expect_clean("[[Paris]] and [[Paris, Texas|the Texas town]] and [[dog]]s.",
                 "Paris and the Texas town and dogs.");
    expect_clean("[[Paris, Texas|]] and [[:Category:Cats|the cat category]]",
                 "Paris and the cat category");
}

static void test_files_categories_and_interlanguage_links_are_removed(void **state) {
    (void)state;
    expect_clean("Text [[File:X.jpg|thumb|A [[caption]] with [[a|links]]]] more.\n"
                 "[[Image:Y.png|left]]\n[[Category:Foo|Bar]]\n[[de:Anarchismus]]\n[[zh-min-nan:X]]",
                 "Text more.");
    // File captions may span blank lines (legends built from templates).
    expect_clean("[[File:Map.svg|thumb|Situation.\n{{legend|#fff|[[A|B]]}}\n\n{{legend|x}}]]\nProse.",
                 "Prose.");
}

static void test_external_links_keep_their_text(void **state) {
    (void)state;
    expect_clean("See [http://example.com the site] and [https://x.org] now.",
                 "See the site and now.");
}

static void test_emphasis_headings_and_lists(void **state) {
    (void)state;
    expect_clean("'''Bold''' and ''italic'' and '''''both'''''.\n== History ==\n=== Early ===\n"
                 "* item one\n# item two\n:indented\n;term\n----\nend",
                 "Bold and italic and both.\nitem one\nitem two\nindented\nterm\nend");
}

static void test_entities_and_magic_words(void **state) {
    (void)state;
    expect_clean("__TOC__\nA&nbsp;B &amp; C &lt;x&gt; caf&#233; &#x263A; &mdash; &unknown; __NOTOC__",
                 "A B & C <x> caf\xc3\xa9 \xe2\x98\xba \xe2\x80\x94 &unknown;");
}

static void test_non_prose_tags_are_dropped(void **state) {
    (void)state;
    expect_clean("E = <math>mc^2</math> holds.<gallery>\nFile:a.jpg|x\n</gallery> <b>bold</b> "
                 "<span style=\"x\">span</span> a < b<br/>next",
                 "E = holds. bold span a < b\nnext");
}

static void test_markup_never_survives(void **state) {
    (void)state;
    // Malformed wikitext: stray closers, unbalanced links, entity-made brackets.
    expect_clean("a }} b ]] c |} d [[ e &#123;&#123;x&#125;&#125; f", "a b c d e x f");
}

// A book comes as one document per chapter (data/book_split.c): the chapters, joined by the
// paragraph separator, give back the whole book's text.
static char *book_text;
static size_t book_len;
static void on_book(void *ctx, const char *text, size_t len) {
    (void)ctx;
    book_text = realloc(book_text, book_len + len + 2);
    if (book_len) book_text[book_len++] = '\n';
    memcpy(book_text + book_len, text, len);
    book_len += len;
    book_text[book_len] = 0;
}

static char *read_book(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/../shared/data/books/%s", MHE_SOURCE_DIR, name);
    CorpusStats st = {0};
    book_text = NULL;
    book_len = 0;
    corpus_read_file(path, CORPUS_AUTO, on_book, NULL, &st);
    assert_true(st.documents > 1);
    return book_text;
}

static void test_gutenberg_header_and_footer_are_stripped(void **state) {
    (void)state;
    char *s = read_book("doyle-adventures-of-sherlock-holmes.txt");
    assert_non_null(s);
    // The book's first line after the "*** START OF" marker and the "Produced by" credit;
    // its last words before "End of the Project Gutenberg EBook".
    assert_true(strncmp(s, "THE ADVENTURES OF SHERLOCK HOLMES\nby\nSIR ARTHUR CONAN DOYLE\n", 57) == 0);
    assert_null(strstr(s, "Produced by"));
    assert_null(strstr(s, "*** START"));
    assert_null(strstr(s, "*** END"));
    assert_null(strstr(s, "FULL LICENSE"));
    assert_null(strstr(s, "End of the Project Gutenberg"));
    const char *tail = "school at Walsall, where I believe that she has met with considerable success.";
    assert_string_equal(s + strlen(s) - strlen(tail), tail);
    // Paragraphs: one per line, hard wraps joined.
    assert_non_null(strstr(s, "To Sherlock Holmes she is always THE woman. I have seldom heard him mention her "
                              "under any other name."));
    free(s);
    s = read_book("twain-tom-sawyer.txt");  // no Gutenberg header: only the credit goes
    assert_true(strncmp(s, "THE ADVENTURES OF TOM SAWYER BY MARK TWAIN", 42) == 0);
    free(s);
}

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void test_bz2_multistream_reads_every_stream(void **state) {
    (void)state;
    char path[] = "/tmp/mhe_multiXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *parts[3] = {"first stream\n", "second stream\n", "third\n"};
    char all[4096];
    unsigned total = 0;
    for (int i = 0; i < 3; i++) {
        unsigned cap = sizeof all - total;
        assert_int_equal(BZ2_bzBuffToBuffCompress(all + total, &cap, (char *)parts[i],
                                                  (unsigned)strlen(parts[i]), 9, 0, 0), BZ_OK);
        total += cap;
    }
    write_file(path, all, total);
    ByteSource *s = byte_source_open(path);
    assert_true(byte_source_is_bz2(s));
    char buf[256];
    size_t n = byte_source_read(s, buf, sizeof buf - 1);
    buf[n] = 0;
    assert_string_equal(buf, "first stream\nsecond stream\nthird\n");
    byte_source_close(s);
    unlink(path);
}

typedef struct {
    int n;
    char docs[8][256];
} Docs;

static void on_doc(void *ctx, const char *text, size_t len) {
    Docs *d = ctx;
    assert_true(d->n < 8 && len < 256);
    memcpy(d->docs[d->n], text, len);
    d->docs[d->n++][len] = 0;
}

static void test_jsonl_and_wikiextractor_readers(void **state) {
    (void)state;
    // WikiExtractor --json separates paragraphs by one newline, other dumps by a blank line.
    const char *jl = "{\"id\": \"1\", \"title\": \"A\", \"text\": \"Line one.\\n\\nLine  two \\u00e9.\\nThree\"}\n"
                     "\n{\"text\": \"\"}\n{\"text\": \"Third.\"}\n";
    write_file("/tmp/mhe_test_corpus.jsonl", jl, strlen(jl));
    Docs d = {0};
    CorpusStats st = {0};
    corpus_read_file("/tmp/mhe_test_corpus.jsonl", CORPUS_AUTO, on_doc, &d, &st);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.docs[0], "Line one.\nLine two \xc3\xa9.\nThree");
    assert_string_equal(d.docs[1], "Third.");
    assert_int_equal(st.empty, 1);
    unlink("/tmp/mhe_test_corpus.jsonl");

    const char *we = "<doc id=\"12\" url=\"https://en.wikipedia.org/wiki?curid=12\" title=\"Anarchism\">\n"
                     "Anarchism\n\nAnarchism is a philosophy.\nIt has currents.\n</doc>\n"
                     "<doc id=\"25\" url=\"u\" title=\"Autism\">\nAutism\n\nAutism is a condition.\n</doc>\n"
                     // As WikiExtractor 3 writes it: escaped, with leftovers of the page's markup.
                     "<doc id=\"2\" url=\"u\" title=\"Main\">\nMain\n\n&lt;templatestyles src=\"a.css\" /&gt;"
                     "__NOEDITSECTION__\n \nAT&amp;T &lt;3 &quot;q&quot;\n</doc>\n";
    write_file("/tmp/mhe_test_wiki_00", we, strlen(we));
    assert_int_equal(corpus_detect("/tmp/mhe_test_wiki_00", CORPUS_AUTO), CORPUS_WIKIEXTRACTOR);
    memset(&d, 0, sizeof d);
    corpus_read_file("/tmp/mhe_test_wiki_00", CORPUS_AUTO, on_doc, &d, &st);
    assert_int_equal(d.n, 3);
    assert_string_equal(d.docs[0], "Anarchism is a philosophy.\nIt has currents.");
    assert_string_equal(d.docs[1], "Autism is a condition.");
    assert_string_equal(d.docs[2], "AT&T <3 \"q\"");
    unlink("/tmp/mhe_test_wiki_00");
}

static void test_utf8_validation_reports_first_bad_byte(void **state) {
    (void)state;
    assert_int_equal(utf8_invalid_offset("ok \xc3\xa9 \xe2\x98\xba \xf0\x9f\x98\x80", 14), -1);
    assert_int_equal(utf8_invalid_offset("ab\xff", 3), 2);
    assert_int_equal(utf8_invalid_offset("ab\xc3", 3), 2);          // cut sequence
    assert_int_equal(utf8_invalid_offset("a\xc0\xaf" "b", 4), 1);      // overlong
    assert_int_equal(utf8_invalid_offset("a\xed\xa0\x80", 4), 1);   // surrogate
}

static bool valid_utf8(const char *s) { return utf8_invalid_offset(s, strlen(s)) < 0; }

static void test_cleaner_survives_random_markup(void **state) {
    (void)state;
    // Random soup of markup fragments: the cleaner must not crash (ASan builds check memory),
    // must keep UTF-8 valid and must never let wiki syntax through.
    static const char *const BITS[] = {
        "{{", "}}", "[[", "]]", "{|", "|}", "|", "<ref>", "</ref>", "<ref name=x/>", "<ref",
        "'", "''", "'''", "&amp;", "&#123;", "&#x5B;", "&#", "&", ";", "<!--", "-->", "\n", "\n\n",
        "==", "=", "*", "#", ":", "[http://x.org ", "[", "]", "File:", "Category:", "de:", "a",
        "word ", " ", "\xc3\xa9", "<math>", "</math>", "<b>", "</b>", "<br/>", "__TOC__", "(",
        ")", ",", "<", ">", "/", "<gallery>", "</gallery>", "-", "----", "\t"};
    const int NB = (int)(sizeof BITS / sizeof BITS[0]);
    static const char *const FORBIDDEN[] = {"{{", "}}", "[[", "]]", "{|", "|}", "<ref", "'''", NULL};
    uint64_t x = 12345;
    char buf[4096];
    StrBuf out = {0};
    for (int iter = 0; iter < 20000; iter++) {
        size_t n = 0;
        int parts = 1 + (int)((x = x * 6364136223846793005ULL + 1442695040888963407ULL) >> 58);
        for (int k = 0; k < parts * 3; k++) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            const char *b = BITS[(x >> 33) % (uint64_t)NB];
            size_t m = strlen(b);
            if (n + m >= sizeof buf) break;
            memcpy(buf + n, b, m);
            n += m;
        }
        wikitext_clean(buf, n, &out);
        assert_true(valid_utf8(out.s));
        for (int f = 0; FORBIDDEN[f]; f++)
            if (strstr(out.s, FORBIDDEN[f]))
                fail_msg("input \"%.*s\" cleaned to \"%s\" holding %s", (int)n, buf, out.s, FORBIDDEN[f]);
    }
    strbuf_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nested_templates_are_removed),
        cmocka_unit_test(test_tables_are_removed),
        cmocka_unit_test(test_refs_and_comments_are_removed),
        cmocka_unit_test(test_link_text_is_kept),
        cmocka_unit_test(test_files_categories_and_interlanguage_links_are_removed),
        cmocka_unit_test(test_external_links_keep_their_text),
        cmocka_unit_test(test_emphasis_headings_and_lists),
        cmocka_unit_test(test_entities_and_magic_words),
        cmocka_unit_test(test_non_prose_tags_are_dropped),
        cmocka_unit_test(test_markup_never_survives),
        cmocka_unit_test(test_gutenberg_header_and_footer_are_stripped),
        cmocka_unit_test(test_bz2_multistream_reads_every_stream),
        cmocka_unit_test(test_jsonl_and_wikiextractor_readers),
        cmocka_unit_test(test_utf8_validation_reports_first_bad_byte),
        cmocka_unit_test(test_cleaner_survives_random_markup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
