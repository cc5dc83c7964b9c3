#!/usr/bin/python3
"""Independent PyTorch oracle for mhetrain's BERT/GPT models and every attention variant.

Written from DESIGN.md §1-§2 only (not from the C code), as plain nn.Modules whose gradients come
from autograd. Every attention type materialises its per-head Q_i, K_i, V_i and runs the textbook
softmax(Q_i K_iᵀ/√d + mask) V_i, so the C model's fast paths are checked against the definition.
The per-head Q_i, K_i, V_i of each type come from its module in trainer/hf/attention/ (one file
per variant, shared with the Hugging Face code, torch only); every module found there is a type.

Usage (see README.md for the file formats):
  /usr/bin/python3 ref_model.py --config cfg.json --weights w.safetensors \
      --inputs in.safetensors --out out.safetensors [--dtype float32|float64] [--hidden]
"""
import argparse
import glob
import importlib.util
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st_io  # noqa: E402

VARIANT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "trainer", "hf", "attention")


def _load_variants():
    """name -> module for every trainer/hf/attention/<name>.py (loaded by path: no package needed)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(VARIANT_DIR, "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(f"mhe_attention_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        if mod.NAME != name:
            raise AssertionError(f"{path}: NAME is {mod.NAME!r}")
        out[name] = mod
    return out


VARIANTS = _load_variants()
ATTENTION_TYPES = tuple(VARIANTS)
# Masked scores are replaced by this (not -inf) so a row with no allowed key stays finite
# (it becomes uniform over all keys) instead of turning the whole batch into NaN.
MASKED_SCORE = -1e30


class ConfigError(Exception):
    pass


class Cfg:
    """The model part of the config, with the arch-dependent defaults of DESIGN.md §2."""

    def __init__(self, raw):
        def need(key):
            if key not in raw:
                raise ConfigError(f"config: missing key {key!r}")
            return raw[key]

        self.arch = need("arch")
        if self.arch not in ("bert", "gpt"):
            raise ConfigError(f"config: arch must be bert or gpt, not {self.arch!r}")
        bert = self.arch == "bert"
        self.layers = int(need("layers"))
        self.hidden = int(need("hidden"))
        self.heads = int(need("heads"))
        if self.hidden <= 0 or self.heads <= 0 or self.layers < 0:
            raise ConfigError("config: hidden and heads must be positive, layers non-negative")
        self.head_dim = int(raw.get("head_dim") or self.hidden // self.heads)
        self.ffn = int(raw.get("ffn") or 4 * self.hidden)
        self.vocab_size = int(need("vocab_size"))
        self.max_seq = int(need("max_seq"))
        self.type_vocab = int(raw.get("type_vocab") or 2)
        self.norm = raw.get("norm") or ("post" if bert else "pre")
        if self.norm not in ("post", "pre"):
            raise ConfigError(f"config: norm must be post or pre, not {self.norm!r}")
        self.activation = raw.get("activation") or ("gelu" if bert else "gelu_tanh")
        if self.activation not in ("gelu", "gelu_tanh"):
            raise ConfigError(f"config: activation must be gelu or gelu_tanh, not {self.activation!r}")
        eps = raw.get("ln_eps")
        self.ln_eps = float(eps) if eps is not None else (1e-12 if bert else 1e-5)
        self.attention = raw.get("attention") or "mha"
        if self.attention not in ATTENTION_TYPES:
            raise ConfigError(f"config: unknown attention {self.attention!r}")
        # The variant's own keys (e.g. groups, latent_dim), resolved and checked by its module.
        self.variant = VARIANTS[self.attention]
        opts = {k: raw.get(k, v) for k, v in self.variant.OPTIONS.items()}
        try:
            self.options = self.variant.resolve(opts, self.hidden, self.heads, self.head_dim)
        except ValueError as e:
            raise ConfigError(f"config: {e}") from None
        for k, v in self.options.items():
            setattr(self, k, v)


def activation(x, kind):
    if kind == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + torch.tanh(c * (x + 0.044715 * x * x * x)))


class Attention(nn.Module):
    """The variant's projections (its module's build / per_head), the textbook core, `o`."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        cfg.variant.build(self, cfg.hidden, cfg.heads, cfg.head_dim, cfg.options)
        self.o = nn.Linear(cfg.heads * cfg.head_dim, cfg.hidden)

    def per_head(self, x):
        """Per-head Q_i, K_i, V_i, each [B,n,T,·] (K/V expanded from 1 or g heads), and an optional key bias [B,n,1,T]."""
        cfg = self.cfg
        n = cfg.heads
        q, k, v, bias = cfg.variant.per_head(self, x, n, cfg.head_dim, cfg.options)
        B, _, T, _ = q.shape
        k, v = (z.expand(B, n, T, z.shape[-1]) for z in (k, v))
        return q, k, v, bias

    def forward(self, x, allowed):
        """x [B,T,D]; allowed bool [B,T(query),T(key)]. Returns [B,T,D]."""
        q, k, v, bias = self.per_head(x)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.cfg.head_dim)
        if bias is not None:
            scores = scores + bias
        scores = scores.masked_fill(~allowed.unsqueeze(1), MASKED_SCORE)
        probs = torch.softmax(scores, dim=-1)
        heads = torch.matmul(probs, v)  # [B,n,T,d]
        B, n, T, d = heads.shape
        return self.o(heads.transpose(1, 2).reshape(B, T, n * d))


class FFN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.activation
        self.up = nn.Linear(cfg.hidden, cfg.ffn)
        self.down = nn.Linear(cfg.ffn, cfg.hidden)

    def forward(self, x):
        return self.down(activation(self.up(x), self.kind))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.pre = cfg.norm == "pre"
        self.attn = Attention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.ffn = FFN(cfg)
        self.ln2 = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)

    def forward(self, x, allowed):
        if self.pre:
            h = x + self.attn(self.ln1(x), allowed)
            return h + self.ffn(self.ln2(h))
        h = self.ln1(x + self.attn(x, allowed))
        return self.ln2(h + self.ffn(h))


class Embed(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.bert = cfg.arch == "bert"
        self.word = nn.Parameter(torch.zeros(cfg.vocab_size, cfg.hidden))
        self.pos = nn.Parameter(torch.zeros(cfg.max_seq, cfg.hidden))
        if self.bert:
            # "type" is an nn.Module method, so the attribute is type_; named_params() renames it.
            self.type_ = nn.Parameter(torch.zeros(cfg.type_vocab, cfg.hidden))
            self.ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)

    def forward(self, ids, type_ids):
        T = ids.shape[1]
        x = self.word[ids] + self.pos[:T].unsqueeze(0)
        if self.bert:
            x = self.ln(x + self.type_[type_ids])
        return x


class MlmHead(nn.Module):
    """BERT's transform (dense, activation, LayerNorm); the decoder is the tied word embedding."""

    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.activation
        self.dense = nn.Linear(cfg.hidden, cfg.hidden)
        self.ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, x):
        return self.ln(activation(self.dense(x), self.kind))


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = Embed(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.layers))
        if cfg.norm == "pre":
            self.final_ln = nn.LayerNorm(cfg.hidden, eps=cfg.ln_eps)
        if cfg.arch == "bert":
            self.head = MlmHead(cfg)

    def allowed(self, attention_mask):
        """bool [B,Tq,Tk]: padded keys are never attended to; gpt adds the causal mask."""
        B, T = attention_mask.shape
        ok = (attention_mask != 0).unsqueeze(1).expand(B, T, T)
        if self.cfg.arch == "gpt":
            causal = torch.ones(T, T, dtype=torch.bool, device=ok.device).tril()
            ok = ok & causal.unsqueeze(0)
        return ok

    def forward(self, ids, attention_mask=None, type_ids=None, hidden=None):
        """Returns logits [B,T,V]. If hidden is a dict, intermediate states are stored in it."""
        if attention_mask is None:
            attention_mask = torch.ones_like(ids)
        if type_ids is None:
            type_ids = torch.zeros_like(ids)
        allowed = self.allowed(attention_mask)
        x = self.embed(ids, type_ids)
        if hidden is not None:
            hidden["hidden.embed"] = x
        for l, layer in enumerate(self.layers):
            x = layer(x, allowed)
            if hidden is not None:
                hidden[f"hidden.layers.{l}"] = x
        if self.cfg.norm == "pre":
            x = self.final_ln(x)
        if self.cfg.arch == "bert":
            x = self.head(x)
        if hidden is not None:
            hidden["hidden.final"] = x
        logits = torch.matmul(x, self.embed.word.t())
        if self.cfg.arch == "bert":
            logits = logits + self.head.bias
        return logits


def cross_entropy(logits, labels):
    """Mean over positions with label != -100 of −log softmax(logits)[label]."""
    V = logits.shape[-1]
    flat = logits.reshape(-1, V)
    lab = labels.reshape(-1).long()
    keep = lab != -100
    logp = torch.log_softmax(flat[keep], dim=-1)
    picked = logp.gather(1, lab[keep].unsqueeze(1)).squeeze(1)
    return -picked.mean()


def named_params(model):
    """(canonical name, parameter) pairs: exactly the names of the C parameter table."""
    for name, p in model.named_parameters():
        yield ("embed.type" if name == "embed.type_" else name), p


def build(cfg, dtype=torch.float32):
    torch.manual_seed(0)
    return Model(cfg).to(dtype)


def load_weights(model, weights):
    """Copies a name -> array dict into the model; every canonical name must be present exactly."""
    params = dict(named_params(model))
    missing = sorted(set(params) - set(weights))
    extra = sorted(set(weights) - set(params))
    if missing or extra:
        raise ConfigError(f"weights: missing {missing[:8]}{'…' if len(missing) > 8 else ''}, "
                          f"unexpected {extra[:8]}{'…' if len(extra) > 8 else ''}")
    with torch.no_grad():
        for name, p in params.items():
            w = np.asarray(weights[name])
            if tuple(w.shape) != tuple(p.shape):
                raise ConfigError(f"weights: {name} has shape {list(w.shape)}, expected {list(p.shape)}")
            p.copy_(torch.from_numpy(w.astype(np.float64)).to(p.dtype))


def run(model, inputs, want_hidden=False):
    """Forward + backward. inputs: dict of numpy arrays. Returns an ordered dict of output arrays."""
    cfg = model.cfg
    ids = torch.from_numpy(np.asarray(inputs["input_ids"]).astype(np.int64))
    if ids.dim() != 2:
        raise ConfigError(f"inputs: input_ids must be [B,T], got {list(ids.shape)}")
    B, T = ids.shape
    if T > cfg.max_seq:
        raise ConfigError(f"inputs: sequence length {T} exceeds max_seq {cfg.max_seq}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        raise ConfigError(f"inputs: input_ids outside [0, {cfg.vocab_size})")

    def opt(name):
        if name not in inputs:
            return None
        a = torch.from_numpy(np.asarray(inputs[name]).astype(np.int64))
        if tuple(a.shape) != (B, T):
            raise ConfigError(f"inputs: {name} must be [{B},{T}], got {list(a.shape)}")
        return a

    mask, types, labels = opt("attention_mask"), opt("token_type_ids"), opt("labels")
    if types is not None and cfg.arch == "bert" and types.numel() and (types.min() < 0 or types.max() >= cfg.type_vocab):
        raise ConfigError(f"inputs: token_type_ids outside [0, {cfg.type_vocab})")
    model.zero_grad(set_to_none=False)
    hidden = {} if want_hidden else None
    logits = model(ids, mask, types, hidden)
    out = {"logits": logits.detach().numpy()}
    if labels is not None:
        bad = (labels != -100) & ((labels < 0) | (labels >= cfg.vocab_size))
        if bad.any():
            raise ConfigError("inputs: labels must be -100 or in [0, vocab_size)")
        loss = cross_entropy(logits, labels)
        loss.backward()
        out["loss"] = loss.detach().reshape(1).numpy()
        for name, p in named_params(model):
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            out[f"grad.{name}"] = g.detach().numpy()
    if hidden is not None:
        for k, v in hidden.items():
            out[k] = v.detach().numpy()
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="model config (JSON)")
    ap.add_argument("--weights", required=True, help="safetensors with every canonical parameter")
    ap.add_argument("--inputs", required=True, help="safetensors: input_ids, labels, attention_mask, token_type_ids")
    ap.add_argument("--out", required=True, help="safetensors to write: logits, loss, grad.<name>")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--hidden", action="store_true", help="also write hidden.embed, hidden.layers.<l>, hidden.final")
    a = ap.parse_args(argv)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    try:
        with open(a.config) as f:
            raw = json.load(f)
        if isinstance(raw.get("model"), dict):  # tolerate {"model": {...}, "attention": {...}}
            merged = dict(raw["model"])
            att = raw.get("attention")
            if isinstance(att, dict):
                merged["attention"] = att.get("type", "mha")
                for k in VARIANTS.get(merged["attention"], VARIANTS["mha"]).OPTIONS:
                    if k in att:
                        merged[k] = att[k]
            raw = merged
        cfg = Cfg(raw)
        weights, _ = st_io.read(a.weights)
        inputs, _ = st_io.read(a.inputs)
        if "input_ids" not in inputs:
            raise ConfigError(f"{a.inputs}: no input_ids tensor")
        model = build(cfg, dtype)
        load_weights(model, weights)
        out = run(model, inputs, a.hidden)
    except (ConfigError, st_io.SafetensorsError, OSError, json.JSONDecodeError) as e:
        print(f"ref_model: {e}", file=sys.stderr)
        return 2
    st_io.write(a.out, out, {"dtype": a.dtype, "arch": cfg.arch, "attention": cfg.attention})
    return 0


if __name__ == "__main__":
    sys.exit(main())
