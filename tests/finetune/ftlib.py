"""Shared by the tests of tests/finetune/: configs for task_dump, running it, random texts."""
import atexit
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

SRC = os.environ.get("MHE_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TASK_DUMP = os.environ.get("TASK_DUMP", os.path.join(SRC, "build", "task_dump"))
TOKENIZERS = os.path.join(SRC, "..", "shared", "data", "tokenizers")
if not os.path.isdir(TOKENIZERS):
    TOKENIZERS = "/work/shared/data/tokenizers"
BERT_VOCAB = os.path.join(TOKENIZERS, "bert-base-uncased-vocab.txt")
GPT2_VOCAB = os.path.join(TOKENIZERS, "gpt2-vocab.json")

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def finish(name):
    if FAILURES:
        print(f"{name}: {len(FAILURES)} failure(s)")
        sys.exit(1)
    print(f"{name}: ok")


def workdir(name):
    """A scratch directory removed when the test exits (kept with MHE_KEEP_WORK=1)."""
    d = tempfile.mkdtemp(prefix=f"mhe-ft-{name}-")
    if not os.environ.get("MHE_KEEP_WORK"):
        atexit.register(shutil.rmtree, d, True)
    return d


def yaml_value(v):
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def write_config(path, task, arch="bert", max_seq=128, extra=None):
    """A config whose task section is `task` (dict), tokenizer of the arch."""
    vocab, tok = (30522, BERT_VOCAB) if arch == "bert" else (50257, GPT2_VOCAB)
    lines = ["model:", f"  arch: {arch}", f"  max_seq: {max_seq}", f"  vocab_size: {vocab}",
             "data:", f"  tokenizer: {yaml_value(tok)}", "task:"]
    lines += [f"  {k}: {yaml_value(v)}" for k, v in task.items()]
    for section, keys in (extra or {}).items():
        lines.append(f"{section}:")
        lines += [f"  {k}: {yaml_value(v)}" for k, v in keys.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def dump(mode, config, split_or_file, *overrides, expect_fail=False):
    """Runs task_dump; returns parsed JSON, or (status, stderr) when expect_fail."""
    r = subprocess.run([TASK_DUMP, mode, config, split_or_file, *overrides], capture_output=True, text=True)
    if expect_fail:
        return r.returncode, r.stderr.strip()
    if r.returncode != 0:
        raise RuntimeError(f"task_dump {mode} {config} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def run_stdin(args, text):
    r = subprocess.run([TASK_DUMP, *args], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"task_dump {args} failed: {r.stderr}")
    return json.loads(r.stdout)


WORDS = ["the", "a", "An", "cat", "sat", "on", "mat", "don't", "\"quoted\"", "'single'", "café",
         "naïve", "中文", "emoji😀", "(1895).", "U.S.", "x-ray", "50%", "#tag", "ÅNGSTRÖM", "über",
         "co-operate", "…", "end.", "Smith's", "–", "1,000", "e=mc²", "Москва", "θ"]


def sentence(rng, lo=1, hi=25):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))
