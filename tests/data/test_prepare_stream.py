"""Plain-text books are read in bounded memory (data/corpus_book.c), with the output the
whole-file reader gave (issue 50).

usage: test_prepare_stream.py identical|memory

identical: the shared books and generated books that exercise every rule of the book reader
  (BOM, CRLF, Gutenberg START/END lines and the older "End of the Project Gutenberg EBook" line,
  the "Produced by" credit, headings, short chapters joining, long chapters cut into pieces,
  multi-byte UTF-8, whitespace runs) are prepared with MHE_TEXT_CHUNK set to sizes that put the
  reads' boundaries inside lines, CRLF pairs, UTF-8 sequences and paragraph breaks; the shards
  and the cleaned text must equal, byte for byte, what the reader that read a book whole wrote
  (DIGESTS: computed with that reader, commit 5b46bd0).  The input account counts the same.
memory: a generated 300 MB book is prepared under a peak RSS far below its size (the whole-file
  reader held it twice, ~700 MB); a book without blank lines (BookCorpus's layout) is not one
  document of the whole file; a bad MHE_TEXT_CHUNK is refused naming the variable.
"""
import hashlib
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("MHE_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MHETRAIN = os.environ["MHETRAIN"]
DATA = os.path.normpath(os.path.join(SRC, "..", "shared", "data"))
BOOKS = os.path.join(DATA, "books")
BERT_VOCAB = os.path.join(DATA, "tokenizers", "bert-base-uncased-vocab.txt")

# sha256 of the outputs of the whole-file reader (before the streaming one) on the shared books
# plus gen_books(): the cleaned text (--text-out), every shard file and the input account.
DIGESTS = {
    "text": "8255f370cbb134c2cef09ea6227dd14121cac3e622cc6e26232face8e0c8e9ee",
    "train_00000.bin": "3ccadcce350aec93b2ead5d4d43b2c11de364ad57929de6399867470cd078d58",
    "train_00000.idx": "e952e60237c1b41920b870b25bfc58d585376f0de32b17f1c1dee677c6bdf76b",
    "train_00001.bin": "cc4d110e15ea22f7576d80103395b207867f1cd908054e65071d0ad9d2d2fde5",
    "train_00001.idx": "ebc6efd2fb29939ab55476c4aea07d7691718f505fc483af61f9c9ef7790f5e9",
    "valid_00000.bin": "6687bd45b94b3934234a442c695d61527a0c82e9cdba99ccf4be7a380b508b1f",
    "valid_00000.idx": "c55dab3c3b1120068d2c8cf3debae4068cfd3d9ea0a02f0992c1000f279f4927",
    "account": "e7796345020dc5e413f45cfc453678c09d7a1a29b785754dac01699cd2696d22",
}


def check(cond, msg):
    if not cond:
        sys.exit("FAIL: " + msg)


def run(args, env=None, expect=0):
    p = subprocess.run(args, capture_output=True, text=True, env=env)
    if p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}, expected {expect}\n{p.stderr}")
    return p


WORDS = ["the", "whale", "ship", "sea", "Ahab", "said", "and", "of", "captain", "água", "naïve", "café",
         "—", "“quoted”", "中文", "日本語", "😀", "ü", "x", "a", "long-winded", "it's", "I", "V"]


def words(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n))


def paragraph_lines(rng, nbytes):
    """A hard-wrapped paragraph of about nbytes, with whitespace runs the reflow collapses."""
    text = words(rng, max(1, nbytes // 5))
    lines, line = [], ""
    for w in text.split(" "):
        if len(line) > rng.randint(20, 90):
            lines.append(line)
            line = ""
        line += (rng.choice([" ", "  ", "\t", " \t "]) if line else rng.choice(["", " ", "\t"])) + w
    lines.append(line + rng.choice(["", " ", "\t", " \r"]))
    if rng.random() < 0.1:
        lines[0] = lines[0] + "\v" + "\f mid"
    return lines


def book(rng, chapters, framing=True, produced=True, old_end=True):
    out = []
    if framing:
        out += ["The Project Gutenberg EBook of Something, by Someone", "", "End of Project Gutenberg header?", "",
                "*** START OF THIS PROJECT GUTENBERG EBOOK SOMETHING ***", "", ""]
    if produced:
        out += ["Produced by Volunteers", "and more volunteers", ""]
    for c in range(chapters):
        kind = rng.random()
        heading = rng.choice([f"CHAPTER {c + 1}.", f"Chapter {c + 1}", "PROLOGUE", f"{c + 1}.",
                              "THE FIRST BOOK OF OPTICKS", f"ACT {['I', 'II', 'IV', 'IX'][c % 4]}. SCENE I."])
        out += ["", heading, ""]
        size = 300 if kind < 0.2 else 60000 if kind > 0.85 else rng.randint(1500, 9000)
        written = 0
        while written < size:
            n = rng.randint(40, 3000)
            out += paragraph_lines(rng, n)
            out += [""] * rng.randint(1, 3) + ([" \t "] if rng.random() < 0.2 else [])
            written += n
    if old_end:
        out += ["", "End of the Project Gutenberg EBook of Something, by", "Someone", ""]
    if framing:
        out += ["*** END OF THIS PROJECT GUTENBERG EBOOK SOMETHING ***", "", "licence text " * 40, ""]
    return out


def gen_books(folder):
    """Books that exercise the reader's rules; deterministic (random.Random with fixed seeds)."""
    os.makedirs(folder, exist_ok=True)
    specs = [  # name, seed, chapters, framing, "Produced by", old end line, CRLF, BOM, final newline
        ("a_plain", 1, 12, True, True, True, False, False, True),
        ("b_crlf_bom", 2, 9, True, True, True, True, True, True),
        ("c_unframed", 3, 7, False, False, False, False, False, False),
        ("d_crlf_unframed", 4, 15, False, True, False, True, True, False),
        ("e_long", 5, 3, True, False, True, False, False, True),
    ]
    for name, seed, chapters, framing, produced, old_end, crlf, bom, final_nl in specs:
        rng = random.Random(seed)
        lines = book(rng, chapters, framing, produced, old_end)
        if name == "e_long":  # one chapter of 200 KB without headings: pieces at paragraph ends
            lines[-6:-6] = [ln for _ in range(120) for ln in paragraph_lines(rng, 1700) + [""]]
        text = ("\r\n" if crlf else "\n").join(lines) + (("\r\n" if crlf else "\n") if final_nl else "")
        data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
        open(os.path.join(folder, name + ".txt"), "wb").write(data)
    # Only an END line (the book is everything before it), and a one-line book.
    open(os.path.join(folder, "f_end_only.txt"), "w").write(
        "\n".join(book(random.Random(6), 4, False, False, True)) + "\n*** END OF THE BOOK ***\ntail\n")
    open(os.path.join(folder, "g_one_line.txt"), "w").write("   one   line\tonly   ")


def sha256(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def outputs(tmp, label, chunk):
    env = dict(os.environ)
    if chunk is not None:
        env["MHE_TEXT_CHUNK"] = str(chunk)
    out, text = os.path.join(tmp, f"out_{label}"), os.path.join(tmp, f"text_{label}.txt")
    p = run([MHETRAIN, "prepare", "--threads", "2", "--tokenizer", BERT_VOCAB, "--out", out, "--text-out", text,
             "--shard-size-mb", "1", BOOKS, os.path.join(tmp, "gen")], env=env)
    got = {"text": sha256(text)}
    for f in sorted(os.listdir(out)):
        if f.endswith((".bin", ".idx")):
            got[f] = sha256(os.path.join(out, f))
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    # The input account (data/input_account.c): per file and in total, as the whole-file reader counted.
    account = [(os.path.basename(i["path"]), i.get("account")) for i in manifest["inputs"]]
    got["account"] = hashlib.sha256(json.dumps([account, manifest["reading"]], sort_keys=True).encode()).hexdigest()
    shutil.rmtree(out)
    os.remove(text)
    return got


def test_identical(tmp):
    gen_books(os.path.join(tmp, "gen"))
    base = outputs(tmp, "default", None)
    if os.environ.get("MHE_PRINT_DIGESTS"):  # how DIGESTS was made (with the whole-file reader)
        print(json.dumps(base, indent=1))
        return
    check(base == DIGESTS, f"outputs differ from the whole-file reader's: {json.dumps(base, indent=1)}")
    # Sizes that split lines, CRLF pairs ("\r" | "\n"), UTF-8 sequences (2-4 bytes) and blank
    # lines between reads: every boundary falls somewhere inside each of them.
    for chunk in (1, 2, 3, 5, 7, 64, 4093):
        got = outputs(tmp, f"c{chunk}", chunk)
        check(got == DIGESTS, f"MHE_TEXT_CHUNK={chunk}: outputs differ from the whole-file reader's: "
              f"{sorted(k for k in got if got[k] != DIGESTS.get(k))}")
        print(f"MHE_TEXT_CHUNK={chunk}: the text, {len(got) - 2} shard files and the input account identical")
    print("identical ok")


def peak_rss(args):
    """(peak RSS in MB, the CompletedProcess) of one run, measured in a child of its own."""
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "sys.stdout.write(p.stderr); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "sys.exit(p.returncode)")
    p = subprocess.run([sys.executable, "-c", probe] + args, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)} exited {p.returncode}\n{p.stdout}")
    lines = p.stdout.splitlines()
    p.stderr = "\n".join(lines[:-1])
    return int(lines[-1]) / 1024, p


def test_memory(tmp):
    # 300 MB of book: chapters of paragraphs, written a block at a time.
    big = os.path.join(tmp, "big.txt")
    rng = random.Random(7)
    block = "\n".join(book(rng, 40, framing=False, produced=False, old_end=False)) + "\n"
    size = 300 << 20
    with open(big, "w", encoding="utf-8") as f:
        written = 0
        while written < size:
            f.write(block)
            written += len(block.encode("utf-8"))
    # /dev/null as the text output: the reader's memory is measured, not a second copy on disk.
    # Above the program's own at start (a CUDA build maps cuBLASLt and NCCL: ~230 MB before main).
    base, _ = peak_rss([MHETRAIN, "--help"])
    rss, p = peak_rss([MHETRAIN, "prepare", "--text-out", "/dev/null", big])
    account = [ln for ln in p.stderr.splitlines() if "input account" in ln]
    print(f"{written / 2**20:.0f} MB book: peak RSS {rss:.1f} MB, {rss - base:.1f} MB above the program's "
          f"{base:.1f} MB at start; {account[0][:150] if account else ''}")
    check(rss - base < 64, f"peak RSS {rss - base:.1f} MB above the start's reading a {written >> 20} MB book "
          "(bound 64 MB)")
    os.remove(big)
    # BookCorpus's layout: one sentence per line, no blank line.  Not one document of 3 MB.
    flat = os.path.join(tmp, "flat.txt")
    with open(flat, "w", encoding="utf-8") as f:
        for i in range(60000):
            f.write(words(rng, 10) + ".\n")
    text = os.path.join(tmp, "flat_out.txt")
    run([MHETRAIN, "prepare", "--text-out", text, flat])
    docs = [d for d in open(text, encoding="utf-8").read().split("\n\n") if d]
    longest = max(len(d.encode("utf-8")) for d in docs)
    print(f"{os.path.getsize(flat) >> 10} KB without blank lines: {len(docs)} documents, longest {longest} bytes")
    check(len(docs) >= 3 and longest < (1 << 20) + 4096, "a book without blank lines became one document")
    for bad in ("0", "1k", "-5", "4294967296"):
        env = dict(os.environ, MHE_TEXT_CHUNK=bad)
        p = run([MHETRAIN, "prepare", "--text-out", os.path.join(tmp, "x.txt"), os.path.join(BOOKS)], env=env,
                expect=2)
        check("MHE_TEXT_CHUNK" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              f"MHE_TEXT_CHUNK={bad}: not one line naming the variable: {p.stderr}")
    print("memory ok")


def main():
    which = sys.argv[1]
    tmp = tempfile.mkdtemp(prefix=f"mhe_stream_{which}_")
    try:
        globals()["test_" + which](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
