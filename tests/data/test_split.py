"""Books cut into chapters, the per-source validation split, and launch/fetch_corpus.sh.

book_chapters: every real book of ../shared/data/books, read by `mhetrain prepare --text-out`,
    against a Python re-implementation of the chapter rules written from data/README.md
    (headings counted by regular expressions on the paragraphs of the whole cleaned book that
    `--whole-books` gives); the chapters must partition the book exactly.
valid_split: prepare on the shared Wikipedia dump + books with the default rule: every source
    gives >= 30 documents and the validation split >= 100k tokens; the chosen documents equal
    a Python oracle of the rule (seeded keys from common/rng.h's definition, half cap); valid
    and train are disjoint and together the whole corpus in input order; the bytes do not
    depend on --threads; another --seed chooses other documents; a source too small for the
    minimums is warned about; mixing the two rules is an error.
fetch_script: syntax, --list, a second run on a complete folder touches no registry (apt-get,
    pip and zstd are shims that fail), a missing package fails with one clear line.

usage: test_split.py book_chapters|valid_split|fetch_script
"""
import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from test_prepare import (BERT_VOCAB, BOOKS, DUMP, MHETRAIN, SRC, check, read_docs,  # noqa: E402
                          read_shard, rng_at, run)

# --- oracle: the chapter rules of data/README.md -----------------------------------------------
HEAD = {"chapter", "book", "act", "part", "stave", "adventure", "volume", "canto", "section"}
NUMW = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
        "ninth", "tenth", "eleventh", "twelfth", "last", "final"}
ALONE = {"prologue", "epilogue", "preface", "introduction", "conclusion"}
ROMAN = r"[IVXLCDM]{1,7}"
MIN, LONG, PIECE = 2000, 32768, 16384


def capitalised(w):
    up, lo = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz"
    return w[:1] in up and w[:1] != "" and (all(c in up for c in w[1:]) or all(c in lo for c in w[1:]))


def is_heading(p):
    if not p or len(p.encode()) > 80:
        return False
    m = re.fullmatch(r"([A-Za-z]+)\.?", p)
    if m and capitalised(m.group(1)) and m.group(1).lower() in ALONE:
        return True
    if re.fullmatch(rf"(?:{ROMAN}|[0-9]{{1,3}})\.?", p):
        return True
    if re.match(rf"{ROMAN}\. ", p) and not re.search(r"[a-z]", p):
        return True
    m = re.match(r"([A-Za-z]+) +([A-Za-z]+) +([A-Za-z0-9]+)(?![A-Za-z0-9])", p)
    if m and m.group(1).lower() == "the" and all(map(capitalised, m.groups())) \
            and m.group(2).lower() in NUMW and m.group(3).lower() in HEAD:
        return True
    m = re.match(r"([A-Za-z]+) +([A-Za-z0-9]+)(.?)", p)
    if not m or not capitalised(m.group(1)) or m.group(1).lower() not in HEAD:
        return False
    num = m.group(2)
    number = (re.fullmatch(r"[0-9]{1,3}", num) or re.fullmatch(ROMAN, num)
              or (capitalised(num) and num.lower() in NUMW))
    after = p[m.end(2):]
    return bool(number) and (after == "" or after[0] in ".:;,-" or after.startswith("\u2014"))


def chapters(book):
    """Documents of one cleaned book (paragraphs joined by newlines)."""
    paras = book.split("\n")
    starts = [0] + [i for i in range(1, len(paras)) if is_heading(paras[i])]
    size = lambda a, b: len("\n".join(paras[a:b]).encode()) + (1 if b < len(paras) else 0)  # noqa: E731
    runs = [starts[0]]
    for s in starts[1:]:
        if size(runs[-1], s) >= MIN:
            runs.append(s)
    if len(runs) > 1 and size(runs[-1], len(paras)) < MIN:
        runs.pop()
    docs = []
    for k, a in enumerate(runs):
        b = runs[k + 1] if k + 1 < len(runs) else len(paras)
        text = "\n".join(paras[a:b])
        if len(text.encode()) <= LONG:
            docs.append(text)
            continue
        piece = []
        for j in range(a, b):
            piece.append(paras[j])
            rest = "\n".join(paras[j + 1:b])
            if len("\n".join(piece).encode()) >= PIECE and j + 1 < b and len(rest.encode()) >= PIECE // 2:
                docs.append("\n".join(piece))
                piece = []
        docs.append("\n".join(piece))
    return docs


def test_book_chapters(tmp):
    names = sorted(os.listdir(BOOKS))
    check(len(names) == 4, "the four shared books")
    for name in names:
        path = os.path.join(BOOKS, name)
        whole, split = os.path.join(tmp, "whole.txt"), os.path.join(tmp, "split.txt")
        run([MHETRAIN, "prepare", "--whole-books", "--text-out", whole, path])
        run([MHETRAIN, "prepare", "--text-out", split, path])
        book = read_docs(whole)
        check(len(book) == 1, f"{name}: --whole-books gives one document")
        got, want = read_docs(split), chapters(book[0])
        headings = sum(is_heading(p) for p in book[0].split("\n"))
        check(len(got) == len(want), f"{name}: {len(got)} documents, oracle {len(want)}")
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b]
        check(not bad, f"{name}: documents {bad[:5]} differ from the oracle")
        check("\n".join(got) == book[0], f"{name}: the chapters are the whole book, in order")
        check(len(got) >= 30, f"{name}: {len(got)} documents, at least 30 expected")
        print(f"{name}: {headings} headings, {len(got)} documents equal to the oracle "
              f"(sizes {min(map(len, got))}-{max(map(len, got))} bytes)")
    print("book_chapters ok")


# --- oracle: the per-source rule --------------------------------------------------------------
VALID_STREAM = 0x76616C6964


def choose(seed, sources, per_source, min_tokens):
    """sources: per source, the token counts of its documents.  Returns the chosen indices."""
    used = sum(1 for s in sources if s)
    share = -(-min_tokens // used)
    chosen = []
    for s, toks in enumerate(sources):
        order = sorted(range(len(toks)), key=lambda k: (rng_at(seed, VALID_STREAM, s, k), k))
        picked, tokens = [], 0
        for k in order[:len(toks) // 2]:
            if len(picked) >= per_source and tokens >= share:
                break
            picked.append(k)
            tokens += toks[k]
        chosen.append(set(picked))
    return chosen


def shards(out, split):
    m = json.load(open(os.path.join(out, "manifest.json")))
    seqs = []
    for sh in m["splits"][split]["shards"]:
        seqs += [tuple(int(x) for x in s) for s in read_shard(os.path.join(out, sh["prefix"]))[1]]
    return seqs


def test_valid_split(tmp):
    inputs = [DUMP, BOOKS]
    everything = os.path.join(tmp, "all")
    run([MHETRAIN, "prepare", "--tokenizer", BERT_VOCAB, "--out", everything, "--valid-fraction", "0"] + inputs)
    docs = shards(everything, "train")
    check(len(set(docs)) == len(docs), "no two documents of the corpus are equal")
    m_all = json.load(open(os.path.join(everything, "manifest.json")))
    counts = [s["documents"] for s in m_all["sources"]]
    check(sum(counts) == len(docs) and len(counts) == 2, "per-source document counts")
    by_source = [docs[:counts[0]], docs[counts[0]:]]

    for seed in (1234, 99):
        out = os.path.join(tmp, f"s{seed}")
        p = run([MHETRAIN, "prepare", "--threads", "2", "--tokenizer", BERT_VOCAB, "--out", out,
                 "--seed", str(seed)] + inputs)
        m = json.load(open(os.path.join(out, "manifest.json")))
        chosen = choose(seed, [[len(d) for d in src] for src in by_source], 30, 100000)
        want_valid = [d for s, src in enumerate(by_source) for k, d in enumerate(src) if k in chosen[s]]
        want_train = [d for s, src in enumerate(by_source) for k, d in enumerate(src) if k not in chosen[s]]
        valid, train = shards(out, "valid"), shards(out, "train")
        check(valid == want_valid, f"seed {seed}: validation documents differ from the oracle")
        check(train == want_train, f"seed {seed}: training documents differ from the oracle")
        check(not set(valid) & set(train), "validation and training share no document")
        for s, src in enumerate(m["sources"]):
            check(src["valid_documents"] >= 30 and src["valid_minimums_met"], f"source {s}: >= 30 documents")
            check(src["valid_documents"] == len(chosen[s]), f"source {s}: manifest count")
            check(src["valid_tokens"] == sum(len(by_source[s][k]) for k in chosen[s]), f"source {s}: tokens")
        check(m["splits"]["valid"]["tokens"] >= 100000, "validation >= 100k tokens")
        check(m["settings"]["valid_rule"] == "per_source", "rule recorded")
        check("warning" not in p.stderr, f"no warning on the shared corpus: {p.stderr}")
        print(f"seed {seed}: validation " + ", ".join(
            f"{os.path.basename(s['input'])} {s['valid_documents']} docs/{s['valid_tokens']} tokens"
            for s in m["sources"]) + f"; train {m['splits']['train']['documents']} docs, "
            f"{m['splits']['train']['tokens']} tokens: equal to the oracle")
    check(shards(os.path.join(tmp, "s1234"), "valid") != shards(os.path.join(tmp, "s99"), "valid"),
          "another seed chooses other documents")

    # Byte-identical for any thread count.
    one = os.path.join(tmp, "t1")
    run([MHETRAIN, "prepare", "--threads", "1", "--tokenizer", BERT_VOCAB, "--out", one] + inputs)
    names = sorted(f for f in os.listdir(one) if f.endswith((".bin", ".idx")))
    check(names == sorted(f for f in os.listdir(os.path.join(tmp, "s1234")) if f.endswith((".bin", ".idx"))),
          "same shard files")
    check(all(filecmp.cmp(os.path.join(one, f), os.path.join(tmp, "s1234", f), shallow=False) for f in names),
          "shards identical for 1 and 2 threads")
    check(not os.path.exists(os.path.join(one, "staging.tmp")), "the staging file is removed")

    # A source too small for the minimums: at most half of it, and a warning.
    small = os.path.join(tmp, "small")
    book = os.path.join(BOOKS, "twain-tom-sawyer.txt")
    p = run([MHETRAIN, "prepare", "--tokenizer", BERT_VOCAB, "--out", small, book])
    src = json.load(open(os.path.join(small, "manifest.json")))["sources"][0]
    check(src["valid_documents"] == src["documents"] // 2 and not src["valid_minimums_met"], "half cap")
    check(re.search(r"warning: .*twain-tom-sawyer.txt: validation wanted 30 documents", p.stderr),
          f"warning for a small source: {p.stderr}")
    p = run([MHETRAIN, "prepare", "--tokenizer", BERT_VOCAB, "--out", os.path.join(tmp, "x"),
             "--valid-fraction", "0.1", "--valid-docs-per-source", "5", book], expect=2)
    check("give one or the other" in p.stderr, "mixing the rules is an error")
    print("valid_split ok")


# --- launch/fetch_corpus.sh without the network -------------------------------------------------
def test_fetch_script(tmp):
    script = os.path.join(SRC, "launch", "fetch_corpus.sh")
    run(["bash", "-n", script])
    files = run(["bash", script, "--list"]).stdout.split()
    check(files[0].startswith("wikipedia/") and len([f for f in files if f.startswith("books/")]) >= 50,
          f"--list names the dump and the books: {len(files)} files")
    shims = os.path.join(tmp, "shims")
    os.makedirs(shims)
    for tool in ("apt-get", "pip", "pip3", "zstd", "dpkg-deb"):
        with open(os.path.join(shims, tool), "w") as f:
            f.write(f"#!/bin/sh\necho \"E: {tool}: no registry in this test\" >&2\n"
                    f"touch {tmp}/registry-called\nexit 100\n")
        os.chmod(os.path.join(shims, tool), 0o755)
    env = dict(os.environ, PATH=shims + ":" + os.environ["PATH"])
    dest = os.path.join(tmp, "raw")
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        with open(os.path.join(dest, f), "w") as fh:
            fh.write("already fetched\n")
    p = run(["bash", script, dest], env=env)
    check(p.stdout.strip() == os.path.realpath(dest), "prints the folder")
    check(not os.path.exists(os.path.join(tmp, "registry-called")), "a complete folder needs no registry")
    check(sorted(os.path.relpath(os.path.join(r, f), dest) for r, _, fs in os.walk(dest) for f in fs)
          == sorted(files), "nothing added or removed")
    os.unlink(os.path.join(dest, "books", "austen-emma.txt"))
    p = run(["bash", script, dest], expect=1, env=env)
    check(p.stderr.strip().splitlines()[-1] ==
          "fetch: Debian package r-cran-janeaustenr could not be downloaded", f"clear failure: {p.stderr}")
    print("fetch_script ok")


def main():
    which = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix="mhe_split_")
    try:
        {"book_chapters": test_book_chapters, "valid_split": test_valid_split,
         "fetch_script": test_fetch_script}[which](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
