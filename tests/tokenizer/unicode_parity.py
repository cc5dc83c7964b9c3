#!/usr/bin/env python3
"""Every Unicode code point, and random mixed-script strings, give HF `tokenizers` ids.

1. Every code point >= 0x80 of planes 0-3 and 14 (surrogates excepted; 1 in 64 of the
   unassigned planes 4-13 and private-use planes 15-16) in contexts that exercise each class
   ("a{c}b -{c}- 1{c}2 {c}'t", eight code points per line) encodes like HF for uncased and
   cased BERT and for GPT-2.
2. 20,000 seeded random strings mixing ASCII, contractions, blanks and code points of every
   plane, likewise.
3. Canonical ordering in NFD: a WordPiece trained on words with two spacing combining marks
   (U+1D165 ccc 216, U+1D16D ccc 226) encodes them in either order, mixed with accents that
   are stripped, to the same ids as HF.
(`gen_unicode_tables.py --check` compares data/unicode_hf_tables.c with HF directly; it is
slower and not part of this test.)"""
import json
import os
import random
import subprocess
import sys

from tokenizers import BertWordPieceTokenizer, Tokenizer, models, pre_tokenizers

MHETRAIN = os.environ["MHETRAIN"]
WORK = os.path.join(os.environ.get("MHE_BINARY_DIR", "/tmp"), "tokenizer_unicode")
TOKS = os.path.join(os.environ["MHE_SOURCE_DIR"], "..", "shared", "data", "tokenizers")


def random_lines(n, seed):
    rnd = random.Random(seed)
    pool = [" ", " ", "\t", "\r", "a", "b", "'", "s", "t", "1", ".", "-", "#", "\u00a0"]
    out = []
    while len(out) < n:
        chars = []
        for _ in range(rnd.randint(0, 30)):
            r = rnd.random()
            c = (rnd.choice(pool) if r < 0.3 else chr(rnd.randint(0x20, 0x7E)) if r < 0.5 else
                 chr(rnd.randint(0xA0, 0x3000)) if r < 0.7 else chr(rnd.randint(0x3000, 0xFFFF))
                 if r < 0.85 else chr(rnd.randint(0x10000, 0x10FFFF)))
            chars.append(c)
        s = "".join(chars)
        if "\n" not in s and not any(0xD800 <= ord(c) <= 0xDFFF for c in s):
            out.append(s)
    return out


def main():
    os.makedirs(WORK, exist_ok=True)
    ok = True
    cps = [c for c in range(0x80, 0x110000)
           if not 0xD800 <= c <= 0xDFFF and (c < 0x40000 or 0xE0000 <= c < 0xF0000 or c % 64 == 0)]
    lines = [" ".join(f"a{chr(c)}b -{chr(c)}- 1{chr(c)}2 {chr(c)}'t" for c in cps[i:i + 8])
             for i in range(0, len(cps), 8)]
    lines += random_lines(20000, 1234)
    path = os.path.join(WORK, "lines.txt")
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines) + "\n")
    vocab_txt = os.path.join(TOKS, "bert-base-uncased-vocab.txt")
    vj, mt = os.path.join(TOKS, "gpt2-vocab.json"), os.path.join(TOKS, "gpt2-merges.txt")
    gpt2 = Tokenizer(models.BPE.from_file(vj, mt))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.add_special_tokens(["<|endoftext|>"])
    configs = [("bert-uncased", BertWordPieceTokenizer(vocab_txt, lowercase=True), vocab_txt, []),
               ("bert-cased", BertWordPieceTokenizer(vocab_txt, lowercase=False, strip_accents=False),
                vocab_txt, ["--cased"]),
               ("gpt2", gpt2, vj, [])]
    for name, hf, tok, extra in configs:
        out = subprocess.run([MHETRAIN, "tokenizer", "encode", *extra, tok, path], check=True,
                             stdout=subprocess.PIPE).stdout.decode().split("\n")[:-1]
        theirs = [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]
        bad = [i for i in range(len(lines)) if [int(x) for x in out[i].split()] != theirs[i]]
        print(f"{name}: {len(lines)} lines, {len(bad)} differing")
        for i in bad[:3]:
            print(f"  {[hex(ord(c)) for c in lines[i]][:24]}\n    ours {out[i][:120]}\n    HF   {theirs[i][:24]}")
        ok &= not bad
    corpus = os.path.join(WORK, "ccc.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": "x\U0001D165\U0001D16D y\U0001D165\U0001D16D x y"}) + "\n")
    out_dir = os.path.join(WORK, "ccc")
    subprocess.run([MHETRAIN, "tokenizer", "train", "--type", "wordpiece", "--lowercase",
                    "--vocab-size", "40", "--out", out_dir, corpus], check=True,
                   stderr=subprocess.DEVNULL)
    text = ("x\U0001D16D\U0001D165 X\u0301\U0001D16D\u0316\U0001D165 y\U0001D165\u0301\U0001D16D "
            "Y\U0001D16D\U0001D165\u0327")
    ccc_path = os.path.join(WORK, "ccc.txt")
    with open(ccc_path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    ours = subprocess.run([MHETRAIN, "tokenizer", "encode", out_dir, ccc_path], check=True,
                          stdout=subprocess.PIPE).stdout.decode().split()
    theirs = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json")).encode(
        text, add_special_tokens=False).ids
    same = [int(x) for x in ours] == theirs
    print(f"canonical ordering: ours {ours}, HF {theirs}: {'same' if same else 'DIFFERENT'}")
    ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
