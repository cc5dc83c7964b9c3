"""Fine-tuned checkpoints (issue 14: task.* head) exported by `mhetrain export` give, loaded by
the matching transformers Auto class, the outputs mhetrain computes (venv: transformers 4.41.2).

Per case (bert / gpt x attention type x classification (mnli: 3 labels, pairs) / regression
(stsb) / span (squad2), and for mha single-sentence classification (sst2)): hf_make_checkpoint writes a checkpoint with a task head and every tensor random
and non-trivial; `mhetrain export` writes it (mha: the stock classes, and again with
--format mhetrain); the export's AutoTokenizer encodes real book sentences (bert: sentence
pairs, token types 0/1; gpt: pairs joined as a <|endoftext|> b for mnli and stsb, else single
sentences, padded with <|endoftext|>), right-padded;
hf_task_outputs runs mhetrain's model_forward_task on those ids; then
  - AutoModelForSequenceClassification / AutoModelForQuestionAnswering build the class
    config.json names (Bert…, GPT2…, Mhe…) with no missing, unexpected or mismatched key; mha
    goes to the stock classes except gpt pair tasks (GPT2ForSequenceClassification would read
    the token before the <|endoftext|> separator), which go to the remote code, and
    `--format hf` refuses them in one line;
  - ‖ours − theirs‖ / ‖theirs‖ ≤ 1e-5 on the logits (classification), values (regression) or
    start and end logits at the real tokens (span);
  - config.json: id2label spelled as the format's labels, problem_type, finetuning_task;
  - AutoModel loads the same export (the head's tensors unexpected; missing only the pooler of a
    bert span model, which has none, as BertForQuestionAnswering) and its last_hidden_state
    feeds the head to the same outputs.
"""
import json
import os
import re
import shutil
import subprocess

from hf_harness import check, finish, make_workdir, registered_types, sh

WORK = make_workdir("mhe_hf_task_")  # before transformers is imported
import zlib

import numpy as np
import torch
import transformers as tf
from safetensors.numpy import load_file, save_file

MHETRAIN = os.environ["MHETRAIN"]
MAKE = os.environ["MHE_MAKE_CHECKPOINT"]
OUTPUTS = os.environ["MHE_TASK_OUTPUTS"]
TASKS = {"classification": ("mnli", ["contradiction", "entailment", "neutral"]), "regression": ("stsb", None),
         "span": ("squad2", None), "single": ("sst2", ["0", "1"])}
REL_TOL = 1e-5
torch.set_num_threads(2)




def sentences():
    path = os.path.join(os.environ["MHE_SOURCE_DIR"], "..", "shared", "data", "books", "doyle-adventures-of-sherlock-holmes.txt")
    text = open(path, encoding="utf-8-sig").read()
    text = re.sub(r"\s+", " ", text[text.index("*** START OF"):text.index("*** END OF")])
    out = [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", text) if 6 <= len(s.split()) <= 25]
    return out[200:204]  # four sentences of different lengths, past the front matter


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def encode(tok, arch, task, sents):
    if arch == "bert":
        enc = tok(sents[:3], sents[1:4], padding=True, truncation=True, max_length=64, return_tensors="np")
    elif task in ("classification", "regression"):  # pairs as mhetrain joins them: a <|endoftext|> b
        rows = [tok(a)["input_ids"] + [tok.eos_token_id] + tok(b)["input_ids"] for a, b in zip(sents[:3], sents[1:4])]
        rows = [r[:64] for r in rows]
        T = max(map(len, rows))
        enc = {"input_ids": np.array([r + [tok.eos_token_id] * (T - len(r)) for r in rows]),
               "attention_mask": np.array([[1] * len(r) + [0] * (T - len(r)) for r in rows])}
    else:
        enc = tok(sents, padding=True, truncation=True, max_length=64, return_tensors="np")
    batch = {"input_ids": enc["input_ids"].astype(np.int32), "attention_mask": enc["attention_mask"].astype(np.int32)}
    if arch == "bert":
        batch["token_type_ids"] = enc["token_type_ids"].astype(np.int32)
    else:
        batch["last"] = (enc["attention_mask"].sum(1) - 1).astype(np.int32)
    return batch


def run_case(work, arch, attn, task, sents, fmt):
    name = f"{arch}_{attn}_{task}" + ("_as_mhetrain" if fmt else "")
    run = os.path.join(work, "runs", f"{arch}_{attn}_{task}")
    if not os.path.isdir(run):
        sh(MAKE, arch, attn, run, str(zlib.crc32(f"{arch}{attn}{task}".encode()) % 1000), "random", task)
    d = os.path.join(work, name)
    sh(MHETRAIN, "export", run, "--out", d, *(["--format", fmt] if fmt else []))
    cfg = json.load(open(os.path.join(d, "config.json")))
    remote = cfg["model_type"] == "mhetrain"
    tok = tf.AutoTokenizer.from_pretrained(d)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    batch = encode(tok, arch, task, sents)
    save_file(batch, os.path.join(d + ".batch.safetensors"))
    sh(OUTPUTS, run, d + ".batch.safetensors", d + ".ours.safetensors")
    ours = load_file(d + ".ours.safetensors")["outputs"]

    auto = tf.AutoModelForQuestionAnswering if task == "span" else tf.AutoModelForSequenceClassification
    model, info = auto.from_pretrained(d, trust_remote_code=remote, output_loading_info=True)
    model.eval()
    cls = type(model).__name__
    # gpt pair tasks go to the remote code even for mha (export.c: GPT-2's class would read the
    # token before the <|endoftext|> separator)
    stock = attn == "mha" and not fmt and not (arch == "gpt" and task in ("classification", "regression"))
    check(remote != stock, f"{name}: exported as {'the stock class' if stock else 'the remote code'}")
    prefix = "Mhe" if remote else ("Bert" if arch == "bert" else "GPT2")
    want = prefix + ("ForQuestionAnswering" if task == "span" else "ForSequenceClassification")
    check(cls == want and cfg["architectures"] == [want], f"{name}: {auto.__name__} builds {cls} (config: "
          f"{cfg['architectures']})")
    keys = {k: [str(x) for x in info.get(k, [])] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    check(not any(keys.values()), f"{name}: no missing, unexpected or mismatched key {keys}")
    fmt_name, labels = TASKS[task]
    check(cfg.get("finetuning_task") == fmt_name, f"{name}: finetuning_task {cfg.get('finetuning_task')}")
    if task != "span":
        want_labels = labels or ["LABEL_0"]
        check([cfg["id2label"][str(i)] for i in range(len(want_labels))] == want_labels
              and cfg["problem_type"] == ("regression" if task == "regression" else "single_label_classification")
              and model.config.num_labels == len(want_labels),
              f"{name}: id2label {cfg['id2label']}, problem_type {cfg['problem_type']}")
    inputs = {k: torch.from_numpy(v.astype(np.int64)) for k, v in batch.items() if k != "last"}
    with torch.no_grad():
        out = model(**inputs)
    mask = batch["attention_mask"].astype(bool)
    if task == "span":
        theirs = torch.stack([out.start_logits, out.end_logits], -1).numpy()
        e = rel(ours[mask], theirs[mask])
        check(ours.shape == theirs.shape, f"{name}: span outputs [B, T, 2]")
    else:
        theirs = out.logits.numpy()
        if task == "regression":
            theirs = theirs[:, 0]
        e = rel(ours, theirs)
    norm = float(np.linalg.norm(theirs))
    check(e <= REL_TOL and norm > 0.1, f"{name}: outputs equal mhetrain's, rel {e:.2e} (|theirs| {norm:.3g})")
    if remote:  # the task export also loads as AutoModel, which feeds the same head
        base, binfo = tf.AutoModel.from_pretrained(d, trust_remote_code=True, output_loading_info=True)
        with torch.no_grad():
            h = base.eval()(**inputs).last_hidden_state
            if task == "span":
                again = model.qa_outputs(h)
            elif arch == "bert":
                again = model.classifier(torch.tanh(base.pooler.dense(h[:, 0])))
            else:
                again = model.score(h)[torch.arange(h.shape[0]), torch.from_numpy(batch["last"].astype(np.int64))]
        head = {"span": ["qa_outputs.bias", "qa_outputs.weight"]}.get(
            task, ["classifier.bias", "classifier.weight"] if arch == "bert" else ["score.weight"])
        # bert's QA head has no pooler (as BertForQuestionAnswering): AutoModel initialises it
        missing = ["mhe.pooler.dense.bias", "mhe.pooler.dense.weight"] if arch == "bert" and task == "span" else []
        check(sorted(binfo["unexpected_keys"]) == head and sorted(binfo["missing_keys"]) == missing,
              f"{name}: AutoModel loads the task export (unexpected {sorted(binfo['unexpected_keys'])}, "
              f"missing {sorted(binfo['missing_keys'])})")
        ref = torch.stack([out.start_logits, out.end_logits], -1) if task == "span" else out.logits
        check(torch.allclose(again, ref, atol=1e-6), f"{name}: AutoModel's hidden states give the head's outputs")
    shutil.rmtree(d, ignore_errors=True)


def main():
    work = WORK
    sents = sentences()
    try:
        for arch in ("bert", "gpt"):
            for attn in registered_types(MHETRAIN):
                for task in (TASKS if attn == "mha" else [t for t in TASKS if t != "single"]):
                    for fmt in ([None, "mhetrain"] if attn == "mha" else [None]):
                        try:
                            run_case(work, arch, attn, task, sents, fmt)
                        except Exception as e:  # one line naming the case, then the next case
                            check(False, f"{arch}_{attn}_{task}{'_' + fmt if fmt else ''}: {type(e).__name__}: {e}")
        # --format hf on a gpt pair task: refused, saying why
        run = os.path.join(work, "runs", "gpt_mha_classification")
        p = subprocess.run([MHETRAIN, "export", run, "--out", os.path.join(work, "refused"), "--format", "hf"],
                           capture_output=True, text=True)
        check(p.returncode == 2 and "separator" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              f"gpt mha pair task --format hf exits 2 with one line: {p.returncode} {p.stderr.strip()}")
    finally:
        finish(work)


if __name__ == "__main__":
    main()
