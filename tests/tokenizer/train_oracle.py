#!/usr/bin/env python3
"""`mhetrain tokenizer train` against a naive BPE trainer written here (the oracle).

The oracle pre-tokenizes with Hugging Face `tokenizers` (BertNormalizer + BertPreTokenizer,
or ByteLevel), counts words, then repeatedly recounts every adjacent pair and merges the most
frequent one (ties: smaller (left id, right id) first; ids in the order the trainer assigns
them: specials, then the alphabet sorted by code point / byte, then merged tokens, a merged
string already in the vocabulary keeping its id).  Vocabulary and merges must be identical.
Also: training with 1 and 3 counting threads writes identical files."""
import json
import os
import re
import subprocess
import sys
from collections import Counter

from tokenizers import normalizers, pre_tokenizers

MHETRAIN = os.environ["MHETRAIN"]
WORK = os.path.join(os.environ.get("MHE_BINARY_DIR", "/tmp"), "tokenizer_train_oracle")
BOOK = os.path.join(os.environ["MHE_SOURCE_DIR"], "..", "shared", "data", "books",
                    "twain-tom-sawyer.txt")
N_LINES, VOCAB = 2500, 700


def byte_level_char(b):
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if b in keep:
        return chr(b)
    return chr(256 + [x for x in range(256) if x not in keep].index(b))


def naive_bpe(words, vocab, vocab_size, cont_prefix):
    """words: Counter of tuples of ids; vocab: list of token strings (id = index)."""
    index = {t: i for i, t in enumerate(vocab)}
    words = {w: c for w, c in words.items()}
    merges = []
    while len(vocab) < vocab_size:
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), n = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        right = vocab[b][len(cont_prefix):] if cont_prefix and vocab[b].startswith(cont_prefix) else vocab[b]
        s = vocab[a] + right
        if s not in index:
            index[s] = len(vocab)
            vocab.append(s)
        m = index[s]
        merges.append((vocab[a], vocab[b]))
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(m)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return vocab, merges


def main():
    os.makedirs(WORK, exist_ok=True)
    texts = []
    with open(BOOK, encoding="utf-8") as f:
        for line in f.read().split("\n")[:N_LINES]:
            line = re.sub(r"[ \t\r]+", " ", line).strip()  # already what the reader's reflow gives
            if line and not re.search(r"[\x0b\x0c]", line):
                texts.append(line)
    corpus = os.path.join(WORK, "corpus.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    ok = True

    # WordPiece (uncased).
    norm = normalizers.BertNormalizer(lowercase=True)
    pre = pre_tokenizers.BertPreTokenizer()
    counts = Counter(w for t in texts for w, _ in pre.pre_tokenize_str(norm.normalize_str(t)))
    first = sorted({w[0] for w in counts}, key=ord)
    cont = sorted({c for w in counts for c in w[1:]}, key=ord)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + first + ["##" + c for c in cont]
    idx = {t: i for i, t in enumerate(vocab)}
    words = Counter({tuple([idx[w[0]]] + [idx["##" + c] for c in w[1:]]): c for w, c in counts.items()})
    want_vocab, _ = naive_bpe(words, vocab, VOCAB, "##")
    out = os.path.join(WORK, "wordpiece")
    subprocess.run([MHETRAIN, "tokenizer", "train", "--type", "wordpiece", "--lowercase",
                    "--vocab-size", str(VOCAB), "--out", out, corpus], check=True)
    got = open(os.path.join(out, "vocab.txt"), encoding="utf-8").read().split("\n")[:-1]
    same = got == want_vocab
    print(f"wordpiece: {len(got)} tokens, oracle {len(want_vocab)}: {'identical' if same else 'DIFFERENT'}")
    if not same:
        diff = next(i for i in range(min(len(got), len(want_vocab)) + 1)
                    if i >= len(got) or i >= len(want_vocab) or got[i] != want_vocab[i])
        print(f"  first difference at id {diff}: ours {got[diff:diff + 5]} oracle {want_vocab[diff:diff + 5]}")
    ok &= same

    # Byte-level BPE.
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False)
    counts = Counter(w for t in texts for w, _ in bl.pre_tokenize_str(t))
    vocab = ["<|endoftext|>"] + [byte_level_char(b) for b in range(256)]
    idx = {t: i for i, t in enumerate(vocab)}
    words = Counter({tuple(idx[c] for c in w): c for w, c in counts.items()})
    want_vocab, want_merges = naive_bpe(words, vocab, VOCAB, None)
    out = os.path.join(WORK, "bpe")
    subprocess.run([MHETRAIN, "tokenizer", "train", "--type", "bpe", "--vocab-size", str(VOCAB),
                    "--out", out, corpus], check=True)
    got_vocab = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8"))
    got_list = [t for t, _ in sorted(got_vocab.items(), key=lambda kv: kv[1])]
    got_merges = [tuple(l.split(" ")) for l in
                  open(os.path.join(out, "merges.txt"), encoding="utf-8").read().split("\n")[1:-1]]
    same = got_list == want_vocab and got_merges == want_merges
    print(f"bpe: {len(got_list)} tokens / {len(got_merges)} merges, oracle {len(want_vocab)} / "
          f"{len(want_merges)}: {'identical' if same else 'DIFFERENT'}")
    if not same:
        diff = next(i for i in range(len(want_merges) + 1)
                    if i >= len(got_merges) or i >= len(want_merges) or got_merges[i] != want_merges[i])
        print(f"  first merge difference at rank {diff}: ours {got_merges[diff:diff + 3]} "
              f"oracle {want_merges[diff:diff + 3]}")
    ok &= same
    # The counting threads do not change the result: 1 and 3 threads write the same bytes.
    books = os.path.dirname(BOOK)
    outs = []
    for threads in (1, 3):
        out = os.path.join(WORK, f"threads{threads}")
        subprocess.run([MHETRAIN, "tokenizer", "train", "--type", "bpe", "--vocab-size", "2000",
                        "--threads", str(threads), "--out", out, books], check=True)
        outs.append(open(os.path.join(out, "tokenizer.json"), "rb").read())
    same = outs[0] == outs[1]
    print(f"bpe on the books with 1 and 3 counting threads: {'identical' if same else 'DIFFERENT'}")
    ok &= same
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
