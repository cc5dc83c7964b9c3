"""Issue 32's fuzz pass (a tool, not a ctest): seeded mutations of fine-tuning files, Hugging Face
folders and two-rank configurations, each run and sorted into
  clear     exit 2, one stderr line naming the file (or the differing key, for ranks)
  accepted  exit 0 on input that is valid (or that no oracle here calls invalid)
  silent    exit 0 on input an oracle calls invalid (bad UTF-8, bad JSON, non-finite target, ...)
  vague     exit 2 but several lines, or a line naming neither the file nor the key
  crash     killed by a signal or exit >= 128;  hang: past the time limit
  loss      a failed command left a staging folder or changed an existing output folder
  other     any other exit status (printed for a look)
Run: MHETRAIN=build/mhetrain TASK_DUMP=build/task_dump .venv/bin/python tests/fuzz/fuzz_round32.py [SEED]
(the rank part needs the training fixture's corpus in build/test-corpus: ctest -R train_corpus_fixture).
"""
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MHETRAIN = os.environ.get("MHETRAIN", os.path.join(SRC, "build", "mhetrain"))
TASK_DUMP = os.environ.get("TASK_DUMP", os.path.join(SRC, "build", "task_dump"))
SHARED = os.path.join(SRC, "..", "shared", "data")
BERT_VOCAB = os.path.join(SHARED, "tokenizers", "bert-base-uncased-vocab.txt")
seed = int(sys.argv[1]) if len(sys.argv) > 1 else 32
rng = random.Random(seed)
work = tempfile.mkdtemp(prefix="mhe-fuzz32-")
counts = collections.defaultdict(collections.Counter)
findings = []


def run(args, timeout=60, cwd=None):
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=cwd, errors="replace")
        return p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        return None, "timeout"


def judge(area, name, rc, err, must_fail, names):
    lines = [l for l in err.splitlines() if l.strip() and not l.startswith(("---", "mpirun", "Primary job", "a non-zero",
                                                                            "  Process", "  Exit code", "the job", "Per user"))]
    if rc is None:
        cat = "hang"
    elif rc < 0 or rc >= 128:
        cat = "crash"
    elif rc == 0:
        cat = "silent" if must_fail else "accepted"
    elif rc == 2:
        # mhetrain prefixes its line with "mhetrain:"; task_dump prints the library's line bare.
        mh = [l for l in lines if l.startswith("mhetrain")] if area == "ranks" else lines
        cat = "clear" if len(mh) == 1 and any(n in mh[0] for n in names) else "vague"
    else:
        cat = "other"
    counts[area][cat] += 1
    if cat not in ("clear", "accepted"):
        findings.append((area, cat, name, rc, " | ".join(lines)[:300]))
    return cat


# ---------------------------------------------------------------- fine-tuning files
def write_cfg(path, task):
    with open(path, "w") as f:
        f.write(f"model:\n  arch: bert\n  max_seq: 128\n  vocab_size: 30522\ndata:\n  tokenizer: {json.dumps(BERT_VOCAB)}\ntask:\n")
        for k, v in task.items():
            f.write(f"  {k}: {json.dumps(v)}\n")


def valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


SENTS = ["it is a fine film", "a dull , lifeless mess", "the cast is superb and the story moves", "nothing works here"]
bases = {
    "sst2": ({"type": "classification", "format": "sst2"},
             ("sentence\tlabel\n" + "".join(f"{s}\t{i % 2}\n" for i, s in enumerate(SENTS))).encode()),
    "stsb": ({"type": "regression", "format": "stsb"},
             ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n" +
              "".join(f"{i}\tg\tf\t2012\t{i}\ts\ts\t{s}\t{SENTS[-i - 1]}\t{i * 1.25}\n" for i, s in enumerate(SENTS))).encode()),
    "jsonl_reg": ({"type": "regression", "format": "jsonl", "text_a": "s", "label_column": "y"},
                  "".join(json.dumps({"s": s, "y": i / 3}) + "\n" for i, s in enumerate(SENTS)).encode()),
    "boolq": ({"type": "classification", "format": "boolq"},
              "".join(json.dumps({"question": s, "passage": SENTS[0], "label": i % 2 == 0}) + "\n"
                      for i, s in enumerate(SENTS)).encode()),
    "squad2": ({"type": "span", "format": "squad2"},
               json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [
                   {"context": "The cat sat on the mat in 1895.", "qas": [
                       {"id": "q1", "question": "Where?", "answers": [{"text": "the mat", "answer_start": 15}],
                        "is_impossible": False},
                       {"id": "q2", "question": "Who?", "answers": [], "is_impossible": True}]}]}]}).encode()),
}
LABEL_SUBS = ["", "nan", "inf", "-inf", "1e39", "1e400", "0x1", " 1", "1 ", "\uff11", "-0", "1e-50", "2", "true", "01"]


def label_case(fmt, base):
    text = base.decode()
    lines = text.split("\n")
    k = 1 if lines[0].startswith(("sentence", "index")) else 0
    sub = rng.choice(LABEL_SUBS)
    if fmt in ("sst2", "stsb"):
        cols = lines[k].split("\t")
        cols[-1] = sub
        lines[k] = "\t".join(cols)
        mutated = "\n".join(lines).encode()
    elif fmt == "jsonl_reg":
        mutated = text.replace(f'"y": 0.0', f'"y": {sub}' if sub.strip() and sub not in ("\uff11", "0x1", "01") else f'"y": "{sub}"', 1).encode()
    else:
        return None, None
    if fmt == "sst2":
        bad = sub not in ("0", "1")
    elif fmt == "jsonl_reg":  # JSON allows whitespace around a number; the rest must be a finite number
        bad = sub.strip() in ("", "nan", "inf", "-inf", "1e39", "1e400", "0x1", "\uff11", "true")
    else:  # TSV: the README's number forms, no spaces, finite in single precision
        bad = sub in ("", "nan", "inf", "-inf", "1e39", "1e400", "0x1", " 1", "1 ", "\uff11", "true")
    return mutated, bad


def mutate(fmt, base):
    kind = rng.choice(["truncate", "flip", "nul", "label", "crlf", "bom", "dupline", "dropline", "longline", "empty",
                       "ctrl"])
    b = bytearray(base)
    must_fail = None  # None: no oracle verdict
    if kind == "truncate":
        b = b[:rng.randrange(0, len(b))]
    elif kind == "flip":
        i = rng.randrange(len(b))
        b[i] = rng.randrange(256)
    elif kind == "nul":
        b.insert(rng.randrange(len(b)), 0)
    elif kind == "label":
        m, bad = label_case(fmt, base)
        if m is None:
            kind, b = "flip", bytearray(base)
            b[rng.randrange(len(b))] = rng.randrange(256)
        else:
            b, must_fail = bytearray(m), bad
    elif kind == "crlf":
        b = bytearray(bytes(b).replace(b"\n", b"\r\n"))
        must_fail = False
    elif kind == "bom":
        b = bytearray(b"\xef\xbb\xbf" + bytes(b))
        must_fail = False  # accepted on purpose (GLUE's processors read utf-8-sig)
    elif kind == "dupline" and fmt != "squad2":
        ls = bytes(b).split(b"\n")
        ls.insert(2, ls[min(1, len(ls) - 1)])
        b = bytearray(b"\n".join(ls))
        must_fail = False
    elif kind == "dropline" and fmt != "squad2":
        ls = bytes(b).split(b"\n")
        del ls[-2]
        b = bytearray(b"\n".join(ls))
        must_fail = False
    elif kind == "longline" and fmt in ("sst2",):
        b = bytearray(bytes(b).replace(SENTS[0].encode(), (SENTS[0] + " ") .encode() * 50000, 1))
        must_fail = False
    elif kind == "empty":
        b = bytearray()
        must_fail = True
    elif kind == "ctrl":
        i = rng.randrange(len(b))
        b.insert(i, rng.choice([1, 7, 8, 27, 127]))
    data = bytes(b)
    if kind == "bom":
        return kind, data, False
    if not valid_utf8(data):
        must_fail = True
    if fmt in ("boolq", "jsonl_reg", "squad2") and must_fail is None:
        try:
            if fmt == "squad2":
                json.loads(data.decode("utf-8"))
            else:
                for l in data.decode("utf-8").splitlines():
                    if l.strip():
                        json.loads(l)
        except (ValueError, UnicodeDecodeError):
            must_fail = True
    return kind, data, must_fail


def fuzz_finetune(n):
    for i in range(n):
        fmt = rng.choice(sorted(bases))
        task, base = bases[fmt]
        kind, data, must_fail = mutate(fmt, base)
        path = os.path.join(work, f"ft{i}")
        with open(path, "wb") as f:
            f.write(data)
        cfg = os.path.join(work, f"ft{i}.yaml")
        write_cfg(cfg, dict(task, train_file=path, dev_file=path))
        mode = "features" if i % 3 == 0 else "examples"
        rc, err = run([TASK_DUMP, mode, cfg, "train"])
        cat = judge("finetune", f"{fmt}/{kind}/{mode} {path}", rc, err, must_fail, [path, cfg])
        if cat == "accepted" and must_fail is None and b"\x00" in data:
            findings.append(("finetune", "note", f"{fmt}/{kind} NUL accepted {path}", rc, ""))


# ---------------------------------------------------------------- HF folders
def make_hf_base():
    import torch
    import transformers as tf
    torch.manual_seed(0)
    d = os.path.join(work, "hf_base")
    cfg = tf.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=40)
    tf.BertForMaskedLM(cfg).save_pretrained(d, safe_serialization=True)
    tf.BertTokenizerFast(BERT_VOCAB).save_pretrained(d)
    return d


CFG_KEYS = ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "max_position_embeddings", "type_vocab_size", "layer_norm_eps", "hidden_act", "model_type", "architectures"]
CFG_VALUES = [None, -1, 0, 1, 3, 10 ** 9, "12", 1.5, True, [], {}, "gelu_new", 1e-400]


def hf_mutation(d):
    from safetensors.numpy import load_file, save_file
    kind = rng.choice(["cfg_del", "cfg_val", "cfg_trunc", "st_trunc", "st_flip_header", "st_dtype", "st_shape",
                       "st_extra", "st_hlen", "tok_empty", "tok_dup", "tok_del", "tok_json"])
    cp = os.path.join(d, "config.json")
    sp = os.path.join(d, "model.safetensors")
    must_fail = True
    if kind in ("cfg_del", "cfg_val"):
        c = json.load(open(cp))
        key = rng.choice(CFG_KEYS)
        if kind == "cfg_del":
            c.pop(key, None)
            must_fail = key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                "intermediate_size", "max_position_embeddings", "model_type", "architectures")
            must_fail = None if not must_fail else True  # a missing optional key may default
        else:
            v = rng.choice(CFG_VALUES)
            c[key] = v
            must_fail = None if (key, v) in (("hidden_act", "gelu_new"),) else True
            if key == "layer_norm_eps" and isinstance(v, float) and v > 0:
                must_fail = None
        kind += f":{key}"
        json.dump(c, open(cp, "w"))
    elif kind == "cfg_trunc":
        t = open(cp, "rb").read()
        open(cp, "wb").write(t[:rng.randrange(1, len(t) - 1)])
    elif kind == "st_trunc":
        t = open(sp, "rb").read()
        open(sp, "wb").write(t[:rng.randrange(0, len(t))])
    elif kind == "st_flip_header":
        t = bytearray(open(sp, "rb").read())
        hl = int.from_bytes(t[:8], "little")
        t[8 + rng.randrange(hl)] = rng.randrange(32, 127)
        open(sp, "wb").write(bytes(t))
        must_fail = None
    elif kind == "st_hlen":
        t = bytearray(open(sp, "rb").read())
        t[:8] = rng.choice([0, 1, 2 ** 63, len(t), 2 ** 40]).to_bytes(8, "little")
        open(sp, "wb").write(bytes(t))
    else:
        import numpy as np
        ts = load_file(sp)
        name = rng.choice(sorted(ts))
        if kind == "st_dtype":
            dt = rng.choice([np.float64, np.int32, np.float16, np.int8])
            ts[name] = ts[name].astype(dt)
            must_fail = dt != np.float16
            kind += f":{np.dtype(dt).name}"
        elif kind == "st_shape":
            ts[name] = ts[name].reshape(-1)[:-1].copy() if ts[name].size > 1 else np.zeros(3, np.float32)
        elif kind == "st_extra":
            ts["bert.extra.weight"] = np.zeros(4, np.float32)
        if kind.startswith("st_"):
            save_file(ts, sp, metadata={"format": "pt"})
        if kind.startswith("tok_"):
            vp = os.path.join(d, "vocab.txt")
            if kind == "tok_empty":
                open(vp, "w").close()
                os.remove(os.path.join(d, "tokenizer.json"))
            elif kind == "tok_dup":
                v = open(vp).read().splitlines()
                open(vp, "w").write("\n".join(v + v[:5]) + "\n")
                os.remove(os.path.join(d, "tokenizer.json"))
                must_fail = None
            elif kind == "tok_del":
                os.remove(os.path.join(d, "tokenizer.json"))
                os.remove(vp)
                must_fail = False  # no tokenizer files: imported without one, said on stderr
            elif kind == "tok_json":
                tp = os.path.join(d, "tokenizer.json")
                t = open(tp, "rb").read()
                open(tp, "wb").write(t[:len(t) // 2])
    return kind, must_fail


def fuzz_hf(n):
    base = make_hf_base()
    out = os.path.join(work, "hf_out")
    rc, err = run([MHETRAIN, "import", base, "--out", out])
    assert rc == 0, err
    before = sorted(os.listdir(out))
    for i in range(n):
        d = os.path.join(work, f"hf{i}")
        shutil.copytree(base, d)
        kind, must_fail = hf_mutation(d)
        # Into the existing import with --force: a failure must leave it whole.
        rc, err = run([MHETRAIN, "import", d, "--out", out, "--force"])
        cat = judge("hf", f"{kind} {d}", rc, err, must_fail, [d])
        staging = [f for f in os.listdir(work) if ".partial" in f]
        if rc != 0 and (staging or sorted(os.listdir(out)) != before):
            counts["hf"]["loss"] += 1
            findings.append(("hf", "loss", f"{kind} {d}", rc, f"staging left: {staging}"))
        if rc == 0:  # restore the reference output for the next case
            shutil.rmtree(out)
            run([MHETRAIN, "import", base, "--out", out])
        shutil.rmtree(d)


# ---------------------------------------------------------------- two-rank configurations
RANK_KEYS = [("model.hidden", "32"), ("model.layers", "3"), ("model.heads", "2"), ("model.ffn", "64"),
             ("model.max_seq", "128"), ("model.dropout", "0.2"), ("model.norm", "pre"), ("model.ln_eps", "1e-5"),
             ("model.activation", "gelu_tanh"), ("model.vocab_size", "2048"), ("attention.type", "mha"),
             ("attention.embed_std", "0.05"), ("attention.fast_path", "false"), ("data.seq_len", "32"),
             ("data.shuffle_seed", "5"), ("objective.mask_prob", "0.2"), ("objective.whole_word", "true"),
             ("optim.lr", "1e-3"), ("optim.name", "lamb"), ("optim.warmup_steps", "1"), ("optim.clip_norm", "0.5"),
             ("train.seed", "12"), ("train.global_batch", "16"), ("train.micro_batch", "1"), ("train.steps", "2"),
             ("train.eval_every", "1"), ("train.keep_last", "2"), ("train.recompute", "layer"),
             ("train.on_nonfinite", "stop"), ("dist.bucket_mb", "1"), ("dist.zero", "1"), ("dist.timeout_s", "40"),
             ("runtime.precision", "bf16"), ("runtime.threads", "2")]


def fuzz_ranks(n):
    corpus = os.path.join(SRC, "build", "test-corpus")
    if not os.path.isdir(corpus):
        print("no build/test-corpus: rank part skipped (ctest -R train_corpus_fixture)")
        return
    tiny = os.path.join(SRC, "tests", "train", "tiny.yaml")
    base = [tiny, f"data.train=[{corpus}/shards/train]", f"data.valid=[{corpus}/shards/valid]",
            f"data.tokenizer={corpus}/tokenizer/tokenizer.json", "train.steps=1", "train.eval_every=0",
            "train.checkpoint_every=0"]
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
    picks = rng.sample(RANK_KEYS, min(n, len(RANK_KEYS)))
    for i, (key, value) in enumerate(picks):
        out = os.path.join(work, f"rk{i}")
        args = mpirun + ["-np", "1", MHETRAIN, "train", *base, f"train.out_dir={out}", ":",
                         "-np", "1", MHETRAIN, "train", *base, f"train.out_dir={out}", f"{key}={value}"]
        rc, err = run(args, timeout=180)
        must_fail = key != "runtime.threads"
        judge("ranks", f"{key}={value} on rank 1", rc, err, must_fail, [key])
    # The same relative data path missing on rank 1's node.
    a, b = os.path.join(work, "na"), os.path.join(work, "nb")
    os.makedirs(a)
    os.makedirs(b)
    os.symlink(os.path.join(corpus, "shards"), os.path.join(a, "shards"))
    rel = [tiny, "data.train=[shards/train]", "data.valid=[]", f"data.tokenizer={corpus}/tokenizer/tokenizer.json",
           "train.steps=1", f"train.out_dir={work}/rmiss"]
    rc, err = run(mpirun + ["-np", "1", "-wdir", a, MHETRAIN, "train", *rel, ":", "-np", "1", "-wdir", b, MHETRAIN,
                            "train", *rel], timeout=180)
    judge("ranks", "data.train missing on rank 1's node", rc, err, True, ["shards/train"])


fuzz_finetune(int(os.environ.get("FUZZ_FT", 300)))
fuzz_hf(int(os.environ.get("FUZZ_HF", 60)))
fuzz_ranks(int(os.environ.get("FUZZ_RANKS", 34)))
for area, c in counts.items():
    print(f"{area}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) + f" (total {sum(c.values())})")
for f in findings:
    print("FINDING", *f)
print("work dir:", work)
