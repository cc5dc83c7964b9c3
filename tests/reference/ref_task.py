#!/usr/bin/python3
"""PyTorch oracle for mhetrain's fine-tuning heads (issue 14), on top of ref_model.py's encoder.

Written from the fine-tuning contract (the heads of Hugging Face's BertForSequenceClassification,
GPT2ForSequenceClassification and *ForQuestionAnswering), not from the C code:
  bert classification / regression: pooled = tanh(task.pooler(x[:, 0])), logits = task.classifier(pooled)
  gpt classification / regression:  logits = task.classifier(x[b, last[b]])  (no bias)
  span (both): (start, end) = task.qa(x) on every token
Losses: cross-entropy (classification), MSE (regression, num_labels = 1), span
(CE(start) + CE(end)) / 2 with the softmax over each row's real (attention_mask = 1) positions.
No dropout (the C side is compared with training off).

Usage: ref_task.py --jobs FILE, one case per line: cfg.json weights.safetensors inputs.safetensors
out.safetensors.  cfg.json is ref_model's plus "task": classification|regression|span and
"num_labels".  Inputs: input_ids, attention_mask, token_type_ids (bert) [B,T]; label (I32 [B]),
target (F32 [B]), start/end (I32 [B]), last (I32 [B]) as the task needs.  Writes logits
([B,C], [B] for regression, [B,T,2] for span), loss and grad.<name> for every parameter.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ref_model  # noqa: E402
import st_io  # noqa: E402


class TaskHead(nn.Module):
    def __init__(self, cfg, task, num_labels):
        super().__init__()
        self.kind, self.bert = task, cfg.arch == "bert"
        if task == "span":
            self.qa = nn.Linear(cfg.hidden, 2)
            return
        outs = 1 if task == "regression" else num_labels
        if self.bert:
            self.pooler = nn.Linear(cfg.hidden, cfg.hidden)
        self.classifier = nn.Linear(cfg.hidden, outs, bias=self.bert)

    def forward(self, x, last):
        if self.kind == "span":
            return self.qa(x)  # [B,T,2]
        rows = torch.arange(x.shape[0])
        if self.bert:
            h = torch.tanh(self.pooler(x[:, 0]))
        else:
            h = x[rows, last]
        out = self.classifier(h)
        return out.squeeze(-1) if self.kind == "regression" else out


class TaskModel(nn.Module):
    """ref_model.Model's embeddings, layers and final LayerNorm (its MLM head removed) + TaskHead."""

    def __init__(self, cfg, task, num_labels):
        super().__init__()
        base = ref_model.Model(cfg)
        self.cfg = cfg
        self.embed, self.layers = base.embed, base.layers
        if cfg.norm == "pre":
            self.final_ln = base.final_ln
        self._allowed = base.allowed
        self.task = TaskHead(cfg, task, num_labels)

    def forward(self, ids, mask, types, last):
        x = self.embed(ids, types)
        allowed = self._allowed(mask)
        for layer in self.layers:
            x = layer(x, allowed)
        if self.cfg.norm == "pre":
            x = self.final_ln(x)
        return self.task(x, last)


def task_loss(kind, out, mask, inp):
    if kind == "classification":
        return F.cross_entropy(out, torch.from_numpy(inp["label"].astype(np.int64)))
    if kind == "regression":
        return F.mse_loss(out, torch.from_numpy(inp["target"]).to(out.dtype))
    real = mask != 0
    total = 0
    for k, name in enumerate(("start", "end")):
        z = out[..., k].masked_fill(~real, float("-inf"))
        total = total + F.cross_entropy(z, torch.from_numpy(inp[name].astype(np.int64)))
    return total / 2


def run_case(cfg_path, w_path, in_path, out_path):
    with open(cfg_path) as f:
        raw = json.load(f)
    cfg = ref_model.Cfg(raw)
    kind = raw["task"]
    torch.manual_seed(0)
    model = TaskModel(cfg, kind, int(raw.get("num_labels", 0)))
    ref_model.load_weights(model, st_io.read(w_path)[0])
    inp = st_io.read(in_path)[0]
    ids = torch.from_numpy(inp["input_ids"].astype(np.int64))
    mask = torch.from_numpy(inp["attention_mask"].astype(np.int64))
    types = torch.from_numpy(inp["token_type_ids"].astype(np.int64)) if "token_type_ids" in inp else torch.zeros_like(ids)
    last = torch.from_numpy(inp["last"].astype(np.int64)) if "last" in inp else None
    out = model(ids, mask, types, last)
    loss = task_loss(kind, out, mask, inp)
    model.zero_grad(set_to_none=False)
    loss.backward()
    res = {"logits": out.detach().numpy(), "loss": loss.detach().reshape(1).numpy()}
    for name, p in ref_model.named_params(model):
        res[f"grad.{name}"] = (p.grad if p.grad is not None else torch.zeros_like(p)).detach().numpy()
    st_io.write(out_path, res, {"task": kind})


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", required=True, help="one case per line: cfg weights inputs out")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)  # tiny cases: threads only spin on a loaded machine
    status = 0
    with open(a.jobs) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            try:
                run_case(*parts)
            except (ref_model.ConfigError, st_io.SafetensorsError, OSError, KeyError, ValueError) as e:
                print(f"ref_task: {parts[0]}: {e}", file=sys.stderr)
                status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
