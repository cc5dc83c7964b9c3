#!/usr/bin/env python3
"""Parity of `mhetrain tokenizer encode` with Hugging Face `tokenizers` (the oracle).

Every line of the four books, of the cleaned Wikipedia text (our corpus reader) and of the raw
wikitext of the dumps (plus hand-made edge cases) is encoded by both; the ids must be equal
line by line for: bert-base-uncased vocab.txt (BertWordPieceTokenizer, uncased), the GPT-2
vocab.json + merges.txt (byte-level BPE, no prefix space, <|endoftext|> special), and a
WordPiece and a BPE tokenizer trained by `mhetrain tokenizer train` (their tokenizer.json
loaded by Tokenizer.from_file).  On a 1-in-20 sample of the lines: the tokenizer.json files
HF writes for BERT and GPT-2, loaded by us, and the BERT vocab.txt used cased.
Exits 1 and prints the first differing lines when any line differs."""
import bz2
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

from tokenizers import BertWordPieceTokenizer, Tokenizer, models, pre_tokenizers

MHETRAIN = os.environ["MHETRAIN"]
SRC = os.environ["MHE_SOURCE_DIR"]
WORK = os.path.join(os.environ.get("MHE_BINARY_DIR", "/tmp"), "tokenizer_parity")
DATA = os.path.normpath(os.path.join(SRC, "..", "shared", "data"))
BOOKS = os.path.join(DATA, "books")
TOKS = os.path.join(DATA, "tokenizers")

# Lines where a difference is expected, each with its reason: {(config, line index): reason}.
# Empty: every line of every configuration must match.
EXCEPTIONS = {}

EDGE_CASES = [
    "", " ", "   ", "\t\t", "a", " a", "a ", "  a  b  ", "a\u00a0b\u3000c\u2028d\u0085e",
    "Hello, World! It's 12:30 -- isn't it?", "I'M YOU'RE WE'VE THEY'LL SHE'D 'S 't",
    "''s ?'s don't 'tis 'twas rock'n'roll", "caf\u00e9 na\u00efve \u00c5ngstr\u00f6m \u0130stanbul",
    "\u4f60\u597d\u4e16\u754c \u3053\u3093\u306b\u3061\u306f \ud55c\uad6d\uc5b4 \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5\u037e \u0394\u03a3 \u03c2",
    "emoji \U0001f600\U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 flags \U0001f1eb\U0001f1f7",
    "ctrl\x01\x02\x7f\x0b\x0cchars \ufeffbom \u200bzw\u200c\u200d soft\u00adhyphen",
    "x" * 99, "y" * 100, "z" * 101, "supercalifragilistic" * 6, "\u00e9" * 120,
    "numbers 3.14159 1,000,000 \u0661\u0662\u0663 \u2460\u2461 \u00bd \u2167",
    "symbols $5 + 3 = 8 < 9 > 7 ^ ` | ~ \u00a9 \u00ae \u2122 \u20ac \u00a7 \u2022 \u2026 \u2014 \u201cq\u201d",
    "[CLS] [SEP] [MASK] [PAD] [UNK] [cls] <|endoftext|> a<|endoftext|>b <|endoftext|><|endoftext|>",
    "tabs\tand\x1cnewlines\r\x1dmixed \r \t end   ", "   leading and trailing   ",
    "\ufffd replacement \u0000 nul", "\U00020000 \U0002a700 \U0002b820 \U0002b920 \uf900 \U0002f800",
    "math \U0001d400\U0001d401 \u2200x\u2203y \u221e", "hyphen-ated well-known e-mail x--y",
    "URL https://en.wikipedia.org/wiki/Foo_(bar)?a=1&b=2#c", "code {{cite|a=b}} [[link|text]] '''bold'''",
]


def book_lines():
    lines = []
    for name in sorted(os.listdir(BOOKS)):
        with open(os.path.join(BOOKS, name), "rb") as f:
            lines += f.read().decode("utf-8").split("\n")
    return lines


def clean_wiki_lines():
    """The cleaned prose of the dumps, from the corpus reader (`mhetrain prepare --text-out`)."""
    wiki = os.path.join(DATA, "wikipedia")
    dumps = [os.path.join(wiki, n) for n in sorted(os.listdir(wiki)) if n.endswith(".xml.bz2")]
    out = os.path.join(WORK, "wiki_clean.txt")
    subprocess.run([MHETRAIN, "prepare", "--text-out", out, *dumps], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out, "rb") as f:
        return f.read().decode("utf-8").split("\n")


def wiki_lines():
    """Raw wikitext lines of every page of the dumps (a superset stress test of the cleaned
    prose: all the markup characters are still there)."""
    lines = []
    wiki = os.path.join(DATA, "wikipedia")
    for name in sorted(os.listdir(wiki)):
        if not name.endswith(".xml.bz2"):
            continue
        with bz2.open(os.path.join(wiki, name), "rb") as f:
            for _, el in ET.iterparse(f):
                if el.tag.endswith("}text") and el.text:
                    lines += el.text.split("\n")
                el.clear()
    return lines


def run_ours(tokenizer, path, extra=()):
    out = subprocess.run([MHETRAIN, "tokenizer", "encode", *extra, tokenizer, path],
                         check=True, stdout=subprocess.PIPE).stdout.decode()
    rows = out.split("\n")
    assert rows[-1] == "", "output must end with a newline"
    return [[int(x) for x in r.split()] for r in rows[:-1]]


def compare(config, hf, ours_tokenizer, lines, path, extra=()):
    t0 = time.time()
    ours = run_ours(ours_tokenizer, path, extra)
    t1 = time.time()
    theirs = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
    t2 = time.time()
    if len(ours) != len(lines):
        print(f"FAIL {config}: {len(ours)} output lines for {len(lines)} input lines")
        return False
    bad = [i for i in range(len(lines)) if ours[i] != theirs[i] and (config, i) not in EXCEPTIONS]
    n_tok = sum(len(x) for x in theirs)
    print(f"{config}: {len(lines)} lines, {n_tok} tokens, {len(bad)} differing "
          f"(ours {t1 - t0:.1f} s, HF {t2 - t1:.1f} s)")
    for i in bad[:5]:
        print(f"  line {i}: {lines[i][:200]!r}\n    ours {ours[i][:40]}\n    HF   {theirs[i][:40]}")
    return not bad


def main():
    os.makedirs(WORK, exist_ok=True)
    books = book_lines()
    lines = EDGE_CASES + books + clean_wiki_lines() + wiki_lines()
    assert all("\n" not in l for l in lines)
    path = os.path.join(WORK, "lines.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} lines, {os.path.getsize(path) / 1e6:.1f} MB")
    ok = True

    vocab_txt = os.path.join(TOKS, "bert-base-uncased-vocab.txt")
    bert = BertWordPieceTokenizer(vocab_txt, lowercase=True)
    ok &= compare("bert-uncased", bert, vocab_txt, lines, path)

    vj, mt = os.path.join(TOKS, "gpt2-vocab.json"), os.path.join(TOKS, "gpt2-merges.txt")
    gpt2 = Tokenizer(models.BPE.from_file(vj, mt))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True)
    gpt2.add_special_tokens(["<|endoftext|>"])
    ok &= compare("gpt2", gpt2, vj, lines, path)

    # tokenizer.json files written by HF itself load in ours with the same ids (a sample of
    # the lines keeps this quick).
    sub = EDGE_CASES + lines[len(EDGE_CASES)::20]
    sub_path = os.path.join(WORK, "lines_sample.txt")
    with open(sub_path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(sub) + "\n")
    for name, hf in [("bert-uncased", bert), ("gpt2", gpt2)]:
        saved = os.path.join(WORK, f"hf-{name}.json")
        hf.save(saved)
        ok &= compare(f"{name} (HF-written tokenizer.json)", hf, saved, sub, sub_path)
    # The cased path (no lowercasing, no accent stripping) on the same sample.
    bert_cased = BertWordPieceTokenizer(vocab_txt, lowercase=False, strip_accents=False)
    ok &= compare("bert-vocab-cased", bert_cased, vocab_txt, sub, sub_path, ["--cased"])

    # Tokenizers we train, on two books (the test stays fast); their tokenizer.json must load
    # in HF and give our ids on all the lines, including the text they never saw.
    train_in = [os.path.join(BOOKS, "doyle-adventures-of-sherlock-holmes.txt"),
                os.path.join(BOOKS, "twain-tom-sawyer.txt")]
    for kind, size, flags in [("wordpiece", 3000, ["--lowercase"]), ("bpe", 3000, [])]:
        out = os.path.join(WORK, f"trained-{kind}")
        t0 = time.time()
        subprocess.run([MHETRAIN, "tokenizer", "train", "--type", kind, "--vocab-size", str(size),
                        *flags, "--out", out, *train_in], check=True)
        print(f"trained {kind} in {time.time() - t0:.1f} s")
        hf = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
        if hf.get_vocab_size() != size:
            print(f"FAIL trained-{kind}: HF sees {hf.get_vocab_size()} tokens, asked for {size}")
            ok = False
        ok &= compare(f"trained-{kind}", hf, out, lines, path)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
