#!/usr/bin/env python3
"""Single-thread encoding throughput, ours vs Hugging Face `tokenizers`, on the same text (the
books + wikitext lines the parity test writes).  Not a ctest; run by hand:
  MHETRAIN=build/mhetrain MHE_SOURCE_DIR=$PWD .venv/bin/python tests/tokenizer/bench.py LINES.txt"""
import os
import resource
import subprocess
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before importing tokenizers: one thread
os.environ["RAYON_NUM_THREADS"] = "1"
from tokenizers import BertWordPieceTokenizer, Tokenizer, models, pre_tokenizers  # noqa: E402

MHETRAIN = os.environ["MHETRAIN"]
TOKS = os.path.join(os.environ["MHE_SOURCE_DIR"], "..", "shared", "data", "tokenizers")


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main():
    path = sys.argv[1]
    raw = open(path, "rb").read()
    lines = raw.decode("utf-8", "replace").split("\n")
    mb = len(raw) / 1e6
    vocab_txt = os.path.join(TOKS, "bert-base-uncased-vocab.txt")
    vj, mt = os.path.join(TOKS, "gpt2-vocab.json"), os.path.join(TOKS, "gpt2-merges.txt")
    bert = BertWordPieceTokenizer(vocab_txt, lowercase=True)
    gpt2 = Tokenizer(models.BPE.from_file(vj, mt))
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    gpt2.add_special_tokens(["<|endoftext|>"])
    print(f"text: {mb:.1f} MB, {len(lines)} lines; one thread each, timed in CPU seconds")
    for name, hf, ours in [("bert-base-uncased WordPiece", bert, vocab_txt), ("GPT-2 byte-level BPE", gpt2, vj)]:
        best_ours = 0.0
        for _ in range(3):
            out = subprocess.run([MHETRAIN, "tokenizer", "encode", "--bench", ours, path],
                                 check=True, capture_output=True).stdout.decode().split()
            best_ours = max(best_ours, float(out[out.index("MB/cpu-s") + 1]))
        best_hf = 0.0
        for _ in range(3):
            t0 = cpu()
            hf.encode_batch(lines, add_special_tokens=False)
            best_hf = max(best_hf, mb / (cpu() - t0))
        print(f"{name}: ours {best_ours:.1f} MB/s, HF tokenizers {best_hf:.1f} MB/s "
              "(MB per CPU second, best of 3; HF: encode_batch, TOKENIZERS_PARALLELISM=false)")


if __name__ == "__main__":
    main()
