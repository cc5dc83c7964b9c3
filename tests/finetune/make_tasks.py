#!/usr/bin/env python3
"""Builds four small fine-tuning tasks from the real text of ../shared/data, in the benchmarks'
own file layouts, so `mhetrain finetune` is exercised on the readers a GLUE/SQuAD user has
(tests/finetune/README.md explains each task and why it needs reading):

  pair/      MRPC layout  (classification) does sentence B follow sentence A in the same
                          document (1), or come from another document of the same source (0)?
  source/    SST-2 layout (classification) is the sentence from Wikipedia (0) or a book (1)?
  distance/  STS-B layout (regression)     how close in their document are sentences A and B?
                          5 next sentence, 4 same paragraph, 3 within three paragraphs, 2 same
                          document, 1 another document of the same source, 0 the other source
  blank/     SQuAD v2.0   (span)           a sentence of the paragraph with one word blanked is
                          the question (at most 30 words), that word in the paragraph the answer;
                          a third of the questions come from another document's paragraph: no
                          answer

The text is what `mhetrain prepare --text-out` cleans from the Wikipedia dump (one article = one
document) and the Gutenberg books (header/footer stripped; every 50 consecutive paragraphs of a
book = one document, so both splits hold every book).  Documents are split into train and dev
(seeded), never a document in both; everything is deterministic for a seed.

usage: make_tasks.py OUT_DIR [--data DIR] [--mhetrain PATH] [--seed N] [--train N] [--dev N]
"""
import argparse
import hashlib
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BOOK_DOC_PARAGRAPHS = 50
BLANK = "_____"
ABBREV = {"mr", "mrs", "ms", "dr", "st", "vs", "etc", "e.g", "i.e", "no", "vol", "fig", "jr", "sr", "mt",
          "gen", "col", "capt", "lt", "rev", "prof", "inc", "co", "ltd", "u.s", "b", "c", "ca", "cf", "al"}
STOP = set("""a an the and or but if of to in on at by for with from as is was were are be been being it its
this that these those he she they we you i his her their our your my me him them us not no so than then there
here which who whom whose what when where why how all any each few more most other some such only own same too
very can will just should now into over under again further once also would could may might must shall upon
out up down off about above below between through during before after said one two""".split())


def clean_text(mhetrain, inputs, fmt):
    """Documents (lists of paragraphs) as `mhetrain prepare --text-out` cleans them."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "text.txt")
        r = subprocess.run([mhetrain, "prepare", "--text-out", out, "--format", fmt, "--threads", "1", *inputs],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"make_tasks: mhetrain prepare failed: {r.stderr.strip()}")
        with open(out, encoding="utf-8") as f:
            text = f.read()
    docs = []
    for block in text.split("\n\n"):
        paras = [p.strip() for p in block.split("\n") if p.strip()]
        if paras:
            docs.append(paras)
    return docs


_BOUNDARY = re.compile(r"[.!?][\"'\u201d\u2019)\]]*\s+")


def sentences(paragraph):
    """Sentences of a paragraph: split after . ! ? (and closing quotes) before an upper-case
    letter, a digit or an opening quote, unless the word before is a known abbreviation."""
    out, start = [], 0
    for m in _BOUNDARY.finditer(paragraph):
        nxt = paragraph[m.end():m.end() + 2]
        if not nxt or not (nxt[0].isupper() or nxt[0].isdigit() or nxt[0] in "\"'\u201c\u2018("):
            continue
        word = paragraph[start:m.start() + 1].split()[-1].rstrip(".").lower() if paragraph[start:m.start() + 1].split() else ""
        if word in ABBREV or (len(word) == 1 and word.isalpha()):
            continue
        out.append(paragraph[start:m.end()].strip())
        start = m.end()
    if paragraph[start:].strip():
        out.append(paragraph[start:].strip())
    return out


def usable(s):
    n = len(s.split())
    return 6 <= n <= 45 and "\t" not in s and sum(c.isalpha() for c in s) > 0.6 * len(s.replace(" ", ""))


class Doc:
    def __init__(self, source, name, paragraphs):
        self.source, self.name = source, name
        self.paragraphs = paragraphs
        # (paragraph index, sentence) for every sentence, in order
        self.sents = [(pi, s) for pi, p in enumerate(paragraphs) for s in sentences(p)]


def load_docs(data, mhetrain):
    wiki = clean_text(mhetrain, [os.path.join(data, "wikipedia", "enwiki-pages-articles-shortened.xml.bz2")], "wiki")
    books = clean_text(mhetrain, [os.path.join(data, "books")], "books")
    docs = [Doc(0, f"wiki{i:03d}", d) for i, d in enumerate(wiki)]
    for b, book in enumerate(books):
        for k in range(0, len(book), BOOK_DOC_PARAGRAPHS):
            docs.append(Doc(1, f"book{b}-{k // BOOK_DOC_PARAGRAPHS:03d}", book[k:k + BOOK_DOC_PARAGRAPHS]))
    return [d for d in docs if len(d.sents) >= 2]


def split_docs(docs, seed, dev_share=0.2):
    """Train/dev by document: a document's seeded hash decides, per source."""
    def key(d):
        return hashlib.sha256(f"{seed}:{d.name}".encode()).hexdigest()
    train, dev = [], []
    for src in (0, 1):
        ds = sorted((d for d in docs if d.source == src), key=key)
        n_dev = max(1, round(dev_share * len(ds)))
        dev += ds[:n_dev]
        train += ds[n_dev:]
    return train, dev


def pick(rng, items):
    return items[rng.randrange(len(items))]


def pair_task(rng, docs, n):
    """MRPC rows: (label, id1, id2, A, B); half B follows A, half B from another document."""
    by_src = {s: [d for d in docs if d.source == s] for s in (0, 1)}
    rows, seen = [], set()
    while len(rows) < n:
        d = pick(rng, docs)
        i = rng.randrange(len(d.sents) - 1)
        a = d.sents[i][1]
        if rng.random() < 0.5:
            b, label = d.sents[i + 1][1], 1
        else:
            other = pick(rng, [o for o in by_src[d.source] if o is not d] or docs)
            b, label = pick(rng, other.sents)[1], 0
        if not (usable(a) and usable(b)) or (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append((str(label), str(2 * len(rows)), str(2 * len(rows) + 1), a, b))
    return rows


def source_task(rng, docs, n):
    """SST-2 rows (sentence, label): label 1 = a book, 0 = Wikipedia; balanced."""
    rows, seen = [], set()
    pools = {s: [(d, x) for d in docs if d.source == s for x in d.sents if usable(x[1])] for s in (0, 1)}
    while len(rows) < n:
        src = len(rows) % 2
        _, (_, s) = pick(rng, pools[src])
        if s in seen:
            continue
        seen.add(s)
        rows.append((s, str(src)))
    rng.shuffle(rows)
    return rows


def distance_task(rng, docs, n):
    """STS-B rows (A, B, score): the six closeness levels, equally often."""
    by_src = {s: [d for d in docs if d.source == s] for s in (0, 1)}
    rows, seen = [], set()
    while len(rows) < n:
        level = len(rows) % 6
        d = pick(rng, docs)
        i = rng.randrange(len(d.sents))
        pa, a = d.sents[i]
        if level == 5:
            cands = [d.sents[i + 1]] if i + 1 < len(d.sents) else []
        elif level == 4:
            cands = [x for j, x in enumerate(d.sents) if x[0] == pa and abs(j - i) > 1]
        elif level == 3:
            cands = [x for x in d.sents if 1 <= abs(x[0] - pa) <= 3]
        elif level == 2:
            cands = [x for x in d.sents if abs(x[0] - pa) > 3]
        elif level == 1:
            others = [o for o in by_src[d.source] if o is not d]
            cands = pick(rng, others).sents if others else []
        else:
            cands = pick(rng, by_src[1 - d.source]).sents
        cands = [x for x in cands if usable(x[1])]
        if not cands or not usable(a):
            continue
        b = pick(rng, cands)[1]
        if (a, b) in seen:
            continue
        seen.add((a, b))
        rows.append((a, b, f"{level:.1f}"))
    rng.shuffle(rows)
    return rows


def blankable(word):
    core = word.strip(".,;:!?\"'()[]\u201c\u201d\u2018\u2019")
    return core if len(core) >= 4 and core.isalpha() and core.lower() not in STOP else None


def blank_task(rng, docs, n, prefix):
    """SQuAD v2.0 questions: a paragraph (30-110 words) as context; two thirds of the questions
    are one of its sentences with a word blanked (the answer: that word where the sentence is),
    one third a blanked sentence of another document's paragraph (impossible)."""
    paras = []
    for d in docs:
        for pi, p in enumerate(d.paragraphs):
            if 30 <= len(p.split()) <= 110 and "\t" not in p:
                ss = [s for s in sentences(p) if usable(s) and len(s.split()) <= 30]
                if ss:
                    paras.append((d, p, ss))
    questions = []

    def blanked(sentence):
        words = sentence.split(" ")
        cands = [(k, blankable(w)) for k, w in enumerate(words) if blankable(w)]
        if not cands:
            return None
        k, core = pick(rng, cands)
        pre = " ".join(words[:k])
        w = words[k]
        off = (len(pre) + 1 if k else 0) + w.index(core)
        q = sentence[:off] + BLANK + sentence[off + len(core):]
        return q, core, off

    by_ctx = {}
    tries = 0
    while len(questions) < n and tries < 50 * n:
        tries += 1
        d, p, ss = pick(rng, paras)
        if rng.random() < 2 / 3:
            s = pick(rng, ss)
            b = blanked(s)
            if not b:
                continue
            q, core, off = b
            start = p.find(s) + off
            if p.find(s) < 0 or p[start:start + len(core)] != core:
                continue
            qa = {"question": q, "answers": [{"text": core, "answer_start": start}], "is_impossible": False}
        else:
            od, op, oss = pick(rng, paras)
            if od is d:
                continue
            b = blanked(pick(rng, oss))
            if not b:
                continue
            qa = {"question": b[0], "answers": [], "plausible_answers": [], "is_impossible": True}
        if any(x["question"] == qa["question"] for x in by_ctx.get(p, [])):
            continue
        qa["id"] = f"{prefix}{len(questions):05d}"
        by_ctx.setdefault(p, []).append(qa)
        questions.append((d.name, p, qa))
    # SQuAD groups questions by paragraph, paragraphs by article.
    articles = {}
    for name, p, qa in questions:
        articles.setdefault(name, {}).setdefault(p, []).append(qa)
    data = [{"title": name, "paragraphs": [{"context": p, "qas": qas} for p, qas in ps.items()]}
            for name, ps in articles.items()]
    return {"version": "v2.0", "data": data}, len(questions)


def write_tsv(path, header, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        if header:
            f.write("\t".join(header) + "\n")
        for r in rows:
            f.write("\t".join(r) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data"))
    ap.add_argument("--mhetrain", default=os.environ.get("MHETRAIN", os.path.join(ROOT, "build", "mhetrain")))
    ap.add_argument("--seed", type=int, default=14)
    ap.add_argument("--train", type=int, default=2000, help="rows of each classification/regression train split")
    ap.add_argument("--dev", type=int, default=500)
    ap.add_argument("--span-train", type=int, default=1500, help="questions of the span train split")
    ap.add_argument("--span-dev", type=int, default=300)
    a = ap.parse_args()
    docs = load_docs(a.data, a.mhetrain)
    train_docs, dev_docs = split_docs(docs, a.seed)
    manifest = {"seed": a.seed, "documents": {"train": sorted(d.name for d in train_docs),
                                              "dev": sorted(d.name for d in dev_docs)}, "tasks": {}}
    for task in ("pair", "source", "distance", "blank"):
        os.makedirs(os.path.join(a.out, task), exist_ok=True)
    for split, ds, n, n_span in (("train", train_docs, a.train, a.span_train), ("dev", dev_docs, a.dev, a.span_dev)):
        # One generator per task and split, so a task's rows do not depend on the others.
        rng = lambda t: random.Random(f"{a.seed}:{t}:{split}")  # noqa: E731
        write_tsv(os.path.join(a.out, "pair", f"{split}.tsv"),
                  ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"], pair_task(rng("pair"), ds, n))
        write_tsv(os.path.join(a.out, "source", f"{split}.tsv"), ["sentence", "label"], source_task(rng("source"), ds, n))
        rows = distance_task(rng("distance"), ds, n)
        write_tsv(os.path.join(a.out, "distance", f"{split}.tsv"),
                  ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2",
                   "score"],
                  [(str(i), "derived", "shared-data", "2026", str(i), "none", "none", x, y, s)
                   for i, (x, y, s) in enumerate(rows)])
        squad, nq = blank_task(rng("blank"), ds, n_span, "dev" if split == "dev" else "tr")
        with open(os.path.join(a.out, "blank", f"{split}.json"), "w", encoding="utf-8") as f:
            json.dump(squad, f, ensure_ascii=False, indent=1)
    # The metric to judge each task by.  pair: accuracy, not MRPC's default acc_and_f1, because
    # with balanced labels a constant "1" has F1 0.67 and so acc_and_f1 0.58 without reading.
    tasks = {"pair": ("classification", "mrpc", "tsv", "accuracy"), "source": ("classification", "sst2", "tsv", "accuracy"),
             "distance": ("regression", "stsb", "tsv", "corr"), "blank": ("span", "squad2", "json", "squad_f1")}
    for t, (typ, fmt, ext, metric) in tasks.items():
        manifest["tasks"][t] = {"type": typ, "format": fmt, "metric": metric, "train_file": f"{t}/train.{ext}",
                                "dev_file": f"{t}/dev.{ext}"}
    with open(os.path.join(a.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"make_tasks: {len(train_docs)} train / {len(dev_docs)} dev documents -> {a.out} "
          f"(pair, source, distance: {a.train}/{a.dev} rows; blank: {a.span_train}/{a.span_dev} questions)")


if __name__ == "__main__":
    main()
