"""`mhetrain finetune` then `mhetrain export`: the matching transformers Auto class scores the dev
split as mhetrain did (venv: transformers 4.41.2).

Tasks: tests/finetune/make_tasks.py's derived tasks from ../shared/data — `source` (SST-2
layout: Wikipedia or book sentence, classification) and `distance` (STS-B layout: how close two
sentences are in their document, regression).  Per case a small model at mhetrain's
initialisation (hf_make_checkpoint … init) stands for the pretrained checkpoint;
`mhetrain finetune` trains it three epochs (train.init_from, lr 2e-3) and keeps the best epoch in
OUT/best; `mhetrain export OUT/best` writes it with its head; then transformers (AutoTokenizer +
AutoModelForSequenceClassification, trust_remote_code for the remote code) encodes and scores
the same dev file:
  - the class: BertForSequenceClassification (bert mha), GPT2ForSequenceClassification (gpt mha,
    a single-sentence task), MheForSequenceClassification (mhe_mul, gqa, and gpt pairs);
  - the dev loss (cross-entropy / MSE, mean over the rows) equals mhetrain's dev_loss of the best
    step in metrics.jsonl, ≤ 1e-5 relative;
  - the metrics equal finetune_result.json's: accuracy exactly; Pearson and Spearman within
    max(1e-5, 20 · 2⁻²³ · max|pred| / sd(pred)): two float32 forwards differ by float32 rounding of
    the predictions, which a correlation sees relative to their spread, tiny for a weak regressor
    (measured: gpt gqa 1.6e-6, bound 2.1e-3; bert mha 2.3e-4 and 1.4e-3, bound 1.7e-2, its
    predictions' sd being 1.4e-4 of their mean). The dev loss is the tight check.
What the models learn is not asserted here (tests/finetune does): the export is under test.
Pairs are kept to rows that fit max_seq untruncated (filtered with the same tokenizer), since
transformers' and mhetrain's longest-first truncation may break ties differently.
"""
import csv
import json
import os
import sys

from hf_harness import check, finish, make_workdir, sh

WORK = make_workdir("mhe_hf_finetune_")  # before transformers is imported

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf
from scipy.stats import pearsonr, spearmanr

MHETRAIN = os.environ["MHETRAIN"]
MAKE = os.environ["MHE_MAKE_CHECKPOINT"]
SRC = os.environ["MHE_SOURCE_DIR"]
REL_TOL = 1e-5
CORR_TOL = 1e-5
torch.set_num_threads(2)
# name, arch, attention, task dir, task keys, expected class
CASES = [
    ("bert_mhe_mul_source", "bert", "mhe_mul", "source", "classification", "sst2", "MheForSequenceClassification"),
    ("bert_mha_distance", "bert", "mha", "distance", "regression", "stsb", "BertForSequenceClassification"),
    ("gpt_mha_source", "gpt", "mha", "source", "classification", "sst2", "GPT2ForSequenceClassification"),
    ("gpt_gqa_distance", "gpt", "gqa", "distance", "regression", "stsb", "MheForSequenceClassification"),
]




def read_rows(path, fmt):
    rows = list(csv.reader(open(path, encoding="utf-8"), delimiter="\t", quoting=csv.QUOTE_NONE))
    head, body = rows[0], rows[1:]
    if fmt == "sst2":
        return head, body, [(r[0], None, int(r[1])) for r in body]
    return head, body, [(r[7], r[8], float(r[-1])) for r in body]


def encode(tok, arch, a, b):
    if arch == "bert":
        return tok(a, b) if b is not None else tok(a)
    ids = tok(a)["input_ids"] + ([tok.eos_token_id] + tok(b)["input_ids"] if b is not None else [])
    return {"input_ids": ids, "attention_mask": [1] * len(ids)}


def run_case(work, name, arch, attn, task_dir, ttype, fmt, want_cls, tasks):
    pre = os.path.join(work, name + "_pre")
    sh(MAKE, arch, attn, pre, "7", "init")
    # The tokenizer, from an export of the starting point, to keep pairs that need no truncation.
    sh(MHETRAIN, "export", pre, "--out", pre + "_export")
    tok = tf.AutoTokenizer.from_pretrained(pre + "_export")
    task = os.path.join(work, name + "_task")
    os.makedirs(task)
    for split in ("train", "dev"):
        head, body, rows = read_rows(os.path.join(tasks, task_dir, f"{split}.tsv"), fmt)
        keep = [r for r, (a, b, _) in zip(body, rows) if len(encode(tok, arch, a, b)["input_ids"]) <= 64]
        with open(os.path.join(task, f"{split}.tsv"), "w", encoding="utf-8") as f:
            for r in [head] + keep:
                f.write("\t".join(r) + "\n")
    cfg = os.path.join(pre, "checkpoints", "step_00000001", "config.yaml")
    out = os.path.join(work, name + "_ft")
    sh(MHETRAIN, "finetune", cfg, f"train.init_from={pre}", f"train.out_dir={out}", f"task.type={ttype}",
       f"task.format={fmt}", f"task.train_file={task}/train.tsv", f"task.dev_file={task}/dev.tsv", "task.epochs=3",
       "train.global_batch=16", "train.micro_batch=16", "optim.lr=2e-3", "train.log_every=100",
       # transformers scores in float32: mhetrain's dev pass must too (auto picks bf16 products
       # where the CPU has them, 1e-3 off, which is precision's business, not the export's).
       "runtime.precision=fp32")
    result = json.load(open(os.path.join(out, "finetune_result.json")))
    dev_rows = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if '"dev_loss"' in line]
    best = [r for r in dev_rows if r["step"] == result["best_step"]][-1]
    exp = os.path.join(work, name + "_export")
    sh(MHETRAIN, "export", os.path.join(out, "best"), "--out", exp)
    model = tf.AutoModelForSequenceClassification.from_pretrained(exp, trust_remote_code=True).eval()
    check(type(model).__name__ == want_cls, f"{name}: the fine-tuned export loads as {type(model).__name__}")
    tok = tf.AutoTokenizer.from_pretrained(exp)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    _, _, rows = read_rows(os.path.join(task, "dev.tsv"), fmt)
    logits = []
    with torch.no_grad():
        for i in range(0, len(rows), 32):
            enc = [encode(tok, arch, a, b) for a, b, _ in rows[i:i + 32]]
            batch = tok.pad(enc, return_tensors="pt")
            logits.append(model(**batch).logits)
    logits = torch.cat(logits)
    y = [r[2] for r in rows]
    if ttype == "classification":
        loss = float(F.cross_entropy(logits.double(), torch.tensor(y)))
        acc = float((logits.argmax(-1).numpy() == np.array(y)).mean())
        ours = {"accuracy": acc}
    else:
        pred = logits[:, 0].double().numpy()
        loss = float(np.mean((pred - np.array(y)) ** 2))
        ours = {"pearson": float(pearsonr(pred, y)[0]), "spearman": float(spearmanr(pred, y)[0])}
        # Two float32 forwards differ by ~1e-7 of the predictions' size; a correlation sees that
        # relative to the predictions' spread, which a weak regressor makes tiny.
        corr_tol = max(CORR_TOL, 20 * 2.0 ** -23 * float(np.abs(pred).max() / pred.std()))
    e = abs(loss - best["dev_loss"]) / abs(best["dev_loss"])
    check(e <= REL_TOL, f"{name}: dev loss {loss:.7g} = mhetrain's {best['dev_loss']:.7g} (rel {e:.1e}, "
          f"{len(rows)} rows, best epoch {result['best_epoch']})")
    for k, v in ours.items():
        theirs = result["scores"][k]
        ok = v == theirs if k == "accuracy" else abs(v - theirs) <= corr_tol
        bound = "" if k == "accuracy" else f" ±{corr_tol:.1e}"
        check(ok, f"{name}: {k} {v:.6g} = mhetrain's {theirs:.6g}{bound} (trivial "
              f"{result['trivial'].get(k, float('nan')):.4g})")


def main():
    work = WORK
    try:
        tasks = os.path.join(work, "tasks")
        sh(sys.executable, os.path.join(SRC, "tests", "finetune", "make_tasks.py"), tasks, "--data",
           os.path.join(SRC, "..", "shared", "data"), "--mhetrain", MHETRAIN, "--train", "400", "--dev", "120",
           "--span-train", "20", "--span-dev", "20")
        for case in CASES:
            try:
                run_case(work, *case, tasks)
            except Exception as e:  # one line naming the case, then the next
                check(False, f"{case[0]}: {type(e).__name__}: {e}")
    finally:
        finish(work)


if __name__ == "__main__":
    main()
