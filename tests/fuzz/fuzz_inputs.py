"""A deterministic fuzz pass over everything mhetrain reads (issue 17): data files (plain text,
JSON lines, WikiExtractor output, MediaWiki XML plain and bz2), Megatron shards (.bin/.idx),
checkpoints (model/optimizer safetensors, state.json, config.yaml, wrong shapes), tokenizer
files (vocab.txt, tokenizer.json, vocab.json + merges.txt), the shards' manifest.json, run
configs and number-valued
overrides.  Each case mutates one file (or override) of a good copy and runs the subcommand that
reads it under a timeout.  A case fails when mhetrain

  - dies of a signal, or exits with a status other than 0, 1, 2 (a crash);
  - outlives the timeout (a hang);
  - exits 0 although the mutation must be detected (`must`: a checksummed or length-checked
    file was changed, a file truncated, invalid UTF-8 put into text, an out-of-range id);
  - fails with anything but one line naming the mutated file (its name, or the option or key
    for overrides); informational lines ("prepare: ...", "mhetrain: warning: ...") may precede.

Usage: fuzz_inputs.py [--cases-per-kind N] [--seed S] [--list]; tests/fuzz/README.md lists the
kinds, the mutations and the messages they produce.  Environment: MHETRAIN, MHE_SOURCE_DIR,
MHE_BINARY_DIR (the tests/train fixture corpus in MHE_BINARY_DIR/test-corpus)."""
import argparse
import bz2
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time

SRC = os.environ["MHE_SOURCE_DIR"]
EXE = os.environ["MHETRAIN"]
CORPUS = os.path.join(os.environ["MHE_BINARY_DIR"], "test-corpus")
SHARED = os.path.join(SRC, "..", "shared", "data")
TIMEOUT = 60
# Lines a command may print on stderr before its error line.
INFO_PREFIXES = ("prepare: ", "mhetrain: warning: ", "tokenizer: ", "mhetrain: skipping checkpoint ",
                 "model: ", "memory per worker", "device ", "step ", "eval ", "checkpoint: ", "resumed ",
                 "mhetrain: resuming", "exported ", "convert")


class Case:
    def __init__(self, kind, name, argv, target, must, cwd):
        self.kind, self.name, self.argv, self.target, self.must, self.cwd = kind, name, argv, target, must, cwd


def run(case):
    t0 = time.time()
    try:
        p = subprocess.run(case.argv, capture_output=True, timeout=TIMEOUT, cwd=case.cwd)
    except subprocess.TimeoutExpired:
        return "hang (no exit within %d s)" % TIMEOUT, None, time.time() - t0
    err = p.stderr.decode("utf-8", "replace").rstrip("\n")
    lines = [l for l in err.split("\n") if l]
    rc = p.returncode
    if rc < 0:
        return "crash: killed by signal %d" % -rc, err, time.time() - t0
    if rc not in (0, 1, 2):
        return "crash: exit status %d" % rc, err, time.time() - t0
    if rc == 0:
        if case.must:
            return "silent success: %s must be detected" % case.must, err, time.time() - t0
        return None, None, time.time() - t0
    errors = [l for l in lines if not l.startswith(INFO_PREFIXES)]
    if len(errors) != 1:
        return "error is %d lines, expected one" % len(errors), err, time.time() - t0
    if case.target and case.target not in errors[0]:
        return "error does not name %s" % case.target, err, time.time() - t0
    return None, errors[0], time.time() - t0


# ---- mutations of bytes --------------------------------------------------------------------

def flip(data, rng, lo=0, hi=None):
    """One byte at a random offset in [lo, hi) replaced by a different random byte."""
    hi = len(data) if hi is None else hi
    if hi <= lo:
        return data, None
    i = rng.randrange(lo, hi)
    b = bytearray(data)
    b[i] = (b[i] + rng.randrange(1, 256)) % 256
    return bytes(b), i


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


TEXT_TOKENS = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x00", b"\r", b"\n\n",
               b"<doc id=\"1\">", b"</doc>", b"{", b"}", b"\"", b"\\", b"<", b">", b"&amp;", b"&#xD800;",
               b"&#99999999;", b"]]>", b"<page>", b"</page>", b"<text>", b"</text>", b"{{", b"}}", b"[[", b"]]",
               b"'''", b"\t", b"\xef\xbb\xbf"]


def mutate_text(data, rng):
    """Insertions of hostile fragments, deletions, duplications; returns (data, what)."""
    ops = []
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(4)
        pos = rng.randint(0, len(data))
        if op == 0:
            tok = rng.choice(TEXT_TOKENS)
            data = data[:pos] + tok + data[pos:]
            ops.append("insert %r at %d" % (tok, pos))
        elif op == 1:
            n = rng.randint(1, 64)
            data = data[:pos] + data[pos + n:]
            ops.append("delete %d at %d" % (n, pos))
        elif op == 2:
            n = rng.randint(1, 200)
            data = data[:pos] + data[pos:pos + n] + data[pos:]
            ops.append("duplicate %d at %d" % (n, pos))
        else:
            data, i = flip(data, rng)
            ops.append("flip byte %s" % i)
    return data, "; ".join(ops)


def invalid_utf8(data):
    """True when data is not valid UTF-8 (Python's strict decoder agrees with ours: no
    surrogates, no overlongs, nothing above U+10FFFF)."""
    try:
        data.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


# ---- kinds ---------------------------------------------------------------------------------

def corpus_seeds(work):
    """Small good inputs of every reader prepare has."""
    book = read(os.path.join(SHARED, "books", "twain-tom-sawyer.txt"))[:20000]
    paras = [p for p in book.decode("utf-8").split("\r\n\r\n") if p.strip()][:40]
    jsonl = b"".join(json.dumps({"text": p}).encode() + b"\n" for p in paras[:20])
    wikiext = b"".join(b'<doc id="%d" url="u" title="t%d">\nTitle\n\n%s\n</doc>\n' % (i, i, p.encode())
                       for i, p in enumerate(paras[:20]))
    pages = b"".join(b"<page><title>T%d</title><ns>0</ns><id>%d</id><revision><id>1</id><text>"
                     b"%s</text></revision></page>\n" % (i, i + 1, p.replace("&", "&amp;").replace("<", "&lt;")
                                                          .encode()) for i, p in enumerate(paras[:20]))
    xml = (b'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/" version="0.10">\n'
           b"<siteinfo><sitename>W</sitename></siteinfo>\n" + pages + b"</mediawiki>\n")
    return {"book.txt": ("books", book), "docs.jsonl": ("jsonl", jsonl), "wiki_00": ("wikiextractor", wikiext),
            "pages.xml": ("wiki", xml), "pages.xml.bz2": ("wiki", bz2.compress(xml))}


def data_cases(work, rng, n):
    """prepare on a mutated input: text-level mutations, plus truncation of the bz2 stream."""
    tok = os.path.join(CORPUS, "tokenizer", "tokenizer.json")
    seeds = corpus_seeds(work)
    names = sorted(seeds)
    for i in range(n):
        name = names[i % len(names)]
        fmt, good = seeds[name]
        d = os.path.join(work, "data%d" % i)
        os.makedirs(d)
        path = os.path.join(d, name)
        must = None
        if name.endswith(".bz2"):
            op = rng.randrange(3)
            if op == 0:
                cut = rng.randrange(1, len(good) - 1)
                data, what, must = good[:cut], "truncate to %d bytes" % cut, "a truncated bz2 stream"
            elif op == 1:
                data, at = flip(good, rng, 10, len(good) - 10)
                what, must = "flip byte %d of the compressed stream" % at, "a corrupt bz2 block (CRC)"
            else:
                raw, what = mutate_text(bz2.decompress(good), rng)
                data = bz2.compress(raw)
                if invalid_utf8(raw):
                    must = "invalid UTF-8"
        else:
            if rng.random() < 0.2:
                cut = rng.randrange(0, len(good))
                data, what = good[:cut], "truncate to %d bytes" % cut
            else:
                data, what = mutate_text(good, rng)
            if invalid_utf8(data):
                must = "invalid UTF-8"
        write(path, data)
        argv = [EXE, "prepare", "--tokenizer", tok, "--out", os.path.join(d, "out"), "--format", fmt,
                "--threads", "1", path]
        yield Case("data", "%s: %s" % (name, what), argv, name, must, d)


def tokenizer_cases(work, rng, n):
    """tokenizer encode with a mutated tokenizer file, and prepare with the same file."""
    text = os.path.join(work, "encode.txt")
    write(text, read(os.path.join(CORPUS, "text.txt"))[:3000])
    small_vocab = b"".join(l + b"\n" for l in read(os.path.join(SHARED, "tokenizers", "bert-base-uncased-vocab.txt"))
                           .split(b"\n")[:1200])
    gpt_vocab = json.loads(read(os.path.join(SHARED, "tokenizers", "gpt2-vocab.json")))
    merges = read(os.path.join(SHARED, "tokenizers", "gpt2-merges.txt")).split(b"\n")[:400]
    # A self-consistent small BPE: the 256 byte tokens plus the results of the first merges.
    keep = {t: None for t in list(gpt_vocab)[:256]}
    good_merges = [merges[0]]
    for m in merges[1:]:
        parts = m.decode("utf-8").split(" ")
        if len(parts) == 2 and parts[0] in keep and parts[1] in keep:
            keep[parts[0] + parts[1]] = None
            good_merges.append(m)
    bpe_vocab = json.dumps({t: i for i, t in enumerate(keep)}).encode()
    seeds = {"vocab.txt": small_vocab, "tokenizer.json": read(os.path.join(CORPUS, "tokenizer", "tokenizer.json")),
             "vocab.json": bpe_vocab, "merges.txt": b"\n".join(good_merges) + b"\n"}
    names = sorted(seeds)
    for i in range(n):
        name = names[i % len(names)]
        d = os.path.join(work, "tok%d" % i)
        os.makedirs(d)
        for other in ("vocab.json", "merges.txt") if name in ("vocab.json", "merges.txt") else ():
            write(os.path.join(d, other), seeds[other])
        good = seeds[name]
        must = None
        if rng.random() < 0.25:
            cut = rng.randrange(1, len(good))
            data, what = good[:cut], "truncate to %d bytes" % cut
            if name.endswith(".json"):
                must = "truncated JSON"
        else:
            data, what = mutate_text(good, rng)
            if name.endswith(".json") and data[-1:] not in (b"}", b"\n"):
                must = "JSON without its closing brace"
        if invalid_utf8(data):
            must = "invalid UTF-8"
        path = os.path.join(d, name)
        write(path, data)
        load = os.path.join(d, "vocab.json") if name == "merges.txt" else path
        if i % 2 == 0:
            argv = [EXE, "tokenizer", "encode", load, text]
        else:
            argv = [EXE, "prepare", "--tokenizer", load, "--out", os.path.join(d, "out"), "--threads", "1", text]
        yield Case("tokenizer", "%s (%s): %s" % (name, argv[1], what), argv, name, must, d)


def shard_cases(work, rng, n, run_dir):
    """eval of a good checkpoint over mutated validation shards."""
    prefix = os.path.join(CORPUS, "shards", "valid_00000")
    idx, bin_ = read(prefix + ".idx"), read(prefix + ".bin")
    S = struct.unpack_from("<Q", idx, 18)[0]
    for i in range(n):
        d = os.path.join(work, "shard%d" % i)
        os.makedirs(d)
        p = os.path.join(d, "valid_00000")
        op = i % 6
        new_idx, new_bin, must = idx, bin_, None
        if op == 0:
            cut = rng.randrange(0, len(bin_))
            new_bin, what, target, must = bin_[:cut], "truncate .bin to %d" % cut, ".bin", "a truncated .bin"
        elif op == 1:
            cut = rng.randrange(0, len(idx))
            new_idx, what, target, must = idx[:cut], "truncate .idx to %d" % cut, ".idx", "a truncated .idx"
        elif op == 2:
            new_idx, at = flip(idx, rng, 0, 34)
            what, target, must = "flip header byte %d" % at, ".idx", "a changed .idx header"
        elif op == 3:
            new_idx, at = flip(idx, rng, 34, 34 + 12 * S)
            what, target, must = "flip length/pointer byte %d" % at, ".idx", "lengths and pointers that disagree"
        elif op == 4:
            # An id at or above the vocabulary (2,000), or negative, in one token.
            b = bytearray(bin_)
            t = rng.randrange(0, len(bin_) // 2)
            struct.pack_into("<H", b, 2 * t, rng.choice([2000, 2001, 40000, 65535]))
            new_bin, what, target, must = bytes(b), "token %d out of the vocabulary" % t, ".bin", "an id >= vocab_size"
        else:
            new_idx, at = flip(idx, rng, 34 + 12 * S, len(idx))
            # A flip may leave the indices rising (other document boundaries): valid.
            what, target, must = "flip document-index byte %d" % at, ".idx", None
        write(p + ".idx", new_idx)
        write(p + ".bin", new_bin)
        argv = [EXE, "eval", run_dir, "data.valid=[%s]" % p]
        yield Case("shard", "valid_00000: %s" % what, argv, "valid_00000" + target if target else "valid_00000",
                   must, d)


def manifest_cases(work, rng, n, run_dir):
    """eval over good shards beside a mutated manifest.json (read strictly by the loader)."""
    prefix = os.path.join(CORPUS, "shards", "valid_00000")
    good = read(os.path.join(CORPUS, "shards", "manifest.json"))
    for i in range(n):
        d = os.path.join(work, "manifest%d" % i)
        os.makedirs(d)
        for ext in (".idx", ".bin"):
            shutil.copy(prefix + ext, os.path.join(d, "valid_00000" + ext))
        must = None
        if rng.random() < 0.3:
            cut = rng.randrange(0, len(good) - 2)
            data, what, must = good[:cut], "truncate to %d" % cut, "a truncated manifest (invalid JSON)"
        else:
            data, what = mutate_text(good, rng)
            if invalid_utf8(data):
                must = "invalid UTF-8 in JSON"
        write(os.path.join(d, "manifest.json"), data)
        argv = [EXE, "eval", run_dir, "data.valid=[%s]" % os.path.join(d, "valid_00000")]
        yield Case("manifest", "manifest.json: %s" % what, argv, "manifest.json", must, d)


def checkpoint_cases(work, rng, n, run_dir):
    """eval (and train's resume) of a mutated checkpoint copy."""
    step = sorted(f for f in os.listdir(os.path.join(run_dir, "checkpoints")) if f.startswith("step_"))[0]
    src = os.path.join(run_dir, "checkpoints", step)
    files = ["model.safetensors", "optimizer.safetensors", "state.json", "config.yaml"]
    for i in range(n):
        d = os.path.join(work, "ckpt%d" % i)
        ck = os.path.join(d, "run", "checkpoints", step)
        shutil.copytree(src, ck)
        name = files[i % len(files)]
        path = os.path.join(ck, name)
        good = read(path)
        op = rng.randrange(3)
        if op == 0:
            cut = rng.randrange(0, len(good))
            data, what = good[:cut], "truncate to %d" % cut
        elif op == 1:
            data, at = flip(good, rng)
            what = "flip byte %d" % at
        else:
            data, at = flip(good, rng, 0, min(len(good), 200))
            what = "flip header byte %d" % at
        write(path, data)
        must = "a changed checkpoint file (sha256 / byte count in state.json)"
        if i % 3 == 2:
            argv = [EXE, "train", os.path.join(ck, "config.yaml") if name != "config.yaml" else
                    os.path.join(src, "config.yaml"), "train.out_dir=%s" % os.path.join(d, "run"), "train.steps=3",
                    "train.eval_every=0", "train.checkpoint_every=0"]
            target = step
        else:
            argv = [EXE, "eval", os.path.join(d, "run") if i % 2 else ck]
            target = step
        yield Case("checkpoint", "%s/%s: %s (%s)" % (step, name, what, argv[1]), argv, target, must, d)
    # Wrong shapes: the checkpoint's weights under a config that wants other shapes.
    for i, override in enumerate(["model.hidden=96", "model.ffn=64", "model.layers=3", "model.vocab_size=2048",
                                  "attention.type=mha"]):
        argv = [EXE, "eval", src, override]
        yield Case("checkpoint", "%s under %s" % (step, override), argv, "model.safetensors",
                   "weights of the wrong shape", work)


NUMBER_FORMS = ["0x10", "0x1p-3", "1_000", " 4", "4 ", "+-4", "1e", ".inf", "-.inf", ".nan", "nan", "inf",
                "infinity", "1e400", "-1e400", "4.5", "0o10", "0b11", "１２", "1,5", "1e-400", "9" * 30, "-0",
                "0.", ".5", "+4", "4e0"]
NUMBER_KEYS = ["model.layers", "model.hidden", "train.steps", "train.seed", "optim.lr", "model.dropout",
               "data.shuffle_seed", "train.tokens", "dist.timeout_s", "train.global_batch"]
OPTIONS = [("train", ["--stop-after"]), ("prepare", ["--threads", "--seed", "--valid-fraction", "--shard-size-mb"]),
           ("tokenizer train", ["--vocab-size", "--threads", "--min-frequency"]),
           ("bench", ["--steps"]), ("convert", ["--tol", "--max-iter", "--seed", "--groups"])]


def number_cases(work, rng, n):
    """Overrides and options with number forms the README does not list: never accepted as a
    number (exit 0 only where the form is documented, e.g. +4, 4e0, .5)."""
    cfg = os.path.join(SRC, "tests", "train", "tiny.yaml")
    documented = {"-0", "0.", ".5", "+4", "4e0", "4.5", "1e-400"}
    for i in range(n):
        form = NUMBER_FORMS[i % len(NUMBER_FORMS)]
        if i % 2 == 0:
            key = rng.choice(NUMBER_KEYS)
            argv = [EXE, "train", cfg, "%s=%s" % (key, form), "--dry-run"]
            target = key
        else:
            cmd, opts = OPTIONS[rng.randrange(len(OPTIONS))]
            key = rng.choice(opts)
            argv = [EXE] + cmd.split() + [key, form] + {
                "train": [cfg, "--dry-run"], "prepare": ["--out", os.path.join(work, "np%d" % i), "/nonexistent"],
                "tokenizer train": ["--type", "bpe", "--out", os.path.join(work, "nt%d" % i), "/nonexistent"],
                "bench": [cfg], "convert": ["/nonexistent", "--to", "gqa", "--out", os.path.join(work, "nc%d" % i)]}[cmd]
            target = key
        # An override's value is YAML: blanks around a plain scalar are YAML's, not the number's.
        ok = documented | ({" 4", "4 "} if i % 2 == 0 else set())
        must = None if form in ok else "an undocumented number form %r" % form
        # Documented forms may still be out of range or fractional for an integer, or pass and
        # fail later (on /nonexistent): any one-line error is fine, as is success.
        yield Case("number", "%s %s" % (target, form), argv, target if must else None, must, work)


def config_cases(work, rng, n, run_dir):
    """A mutated run config used for real (eval of the checkpoint under it reads the data)."""
    cfg = read(os.path.join(SRC, "tests", "train", "tiny.yaml"))
    lines = cfg.split(b"\n")
    data_lines = [b"  train: [%s]" % os.path.join(CORPUS, "shards", "train").encode(),
                  b"  valid: [%s]" % os.path.join(CORPUS, "shards", "valid").encode(),
                  b"  tokenizer: %s" % os.path.join(CORPUS, "tokenizer", "tokenizer.json").encode()]
    at = lines.index(b"data:") + 1
    good = b"\n".join(lines[:at] + data_lines + lines[at:])
    for i in range(n):
        d = os.path.join(work, "cfg%d" % i)
        os.makedirs(d)
        path = os.path.join(d, "run.yaml")
        data, what = mutate_text(good, rng)
        must = "invalid UTF-8" if invalid_utf8(data) else None
        write(path, data)
        argv = [EXE, "train", path, "--dry-run"]
        yield Case("config", "run.yaml: %s" % what, argv, "run.yaml", must, d)


def make_run(work):
    run_dir = os.path.join(work, "good-run")
    argv = [EXE, "train", os.path.join(SRC, "tests", "train", "tiny.yaml"),
            "data.train=[%s]" % os.path.join(CORPUS, "shards", "train"),
            "data.valid=[%s]" % os.path.join(CORPUS, "shards", "valid"),
            "data.tokenizer=%s" % os.path.join(CORPUS, "tokenizer", "tokenizer.json"),
            "train.out_dir=%s" % run_dir, "train.steps=2", "train.checkpoint_every=2", "train.eval_every=0"]
    p = subprocess.run(argv, capture_output=True, timeout=300)
    if p.returncode != 0:
        sys.exit("fuzz: the good run failed: %s" % p.stderr.decode())
    return run_dir


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases-per-kind", type=int, default=int(os.environ.get("MHE_FUZZ_CASES", "25")))
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--kinds", default="data,tokenizer,shard,manifest,checkpoint,number,config")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    failures, counts = [], {}
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="mhe-fuzz.") as work:
        run_dir = make_run(work)
        n = args.cases_per_kind
        gens = {"data": lambda r: data_cases(work, r, n), "tokenizer": lambda r: tokenizer_cases(work, r, n),
                "shard": lambda r: shard_cases(work, r, n, run_dir),
                "manifest": lambda r: manifest_cases(work, r, n, run_dir),
                "checkpoint": lambda r: checkpoint_cases(work, r, n, run_dir),
                "number": lambda r: number_cases(work, r, n), "config": lambda r: config_cases(work, r, n, run_dir)}
        for kind in args.kinds.split(","):
            rng = random.Random("%d-%s" % (args.seed, kind))
            for case in gens[kind](rng):
                bad, msg, dt = run(case)
                c = counts.setdefault(kind, {"cases": 0, "accepted": 0, "rejected": 0})
                c["cases"] += 1
                c["rejected" if msg and not bad else "accepted"] += 0 if bad else 1
                if bad:
                    failures.append((case, bad, msg))
                    print("FAIL [%s] %s: %s\n  argv: %s\n  stderr: %s" % (kind, case.name, bad, " ".join(case.argv),
                                                                         (msg or "").replace("\n", "\n          ")))
                elif args.verbose:
                    print("ok   [%s] %s (%.1f s): %s" % (kind, case.name, dt, msg or "exit 0"))
    for kind, c in counts.items():
        print("%-10s %3d cases: %3d accepted, %3d rejected with one line naming the file" %
              (kind, c["cases"], c["accepted"], c["rejected"]))
    print("%d failures in %.0f s" % (len(failures), time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
