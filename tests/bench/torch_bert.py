"""The PyTorch side of bench_vs_torch.sh: a plain Hugging Face-style BERT for masked-LM
training, written in torch the way users write it (eager fp32, logits at every position,
CrossEntropyLoss(ignore_index=-100), clip_grad_norm_(1.0), torch.optim.AdamW).  Same shapes,
dropout and random token/label draw rule (mask_prob of positions scored) as `mhetrain bench`.

--fast (PyTorch 2): written the fast way instead: F.scaled_dot_product_attention (its own
dropout), the MLM head on the scored positions only, AdamW(fused=True).  --bf16 adds
torch.autocast("cpu", dtype=torch.bfloat16) around the forward (fp32 master weights).

Prints one line: `torch-result: tokens_per_s=... step_ms=... peak_rss_mib=... loss=...`,
the median step time over --steps timed steps after one warm-up step.
"""
import argparse
import contextlib
import math
import resource
import statistics
import time

import torch
from torch import nn


class SelfAttention(nn.Module):
    """mha: per-head Q, K, V projections.  mhe_add / mhe_mul (Multi-head Embedding attention):
    one shared d-wide Q, K, V projection and per-head embeddings e^Q, e^K, e^V [n, d] added to
    (or, as 1 + e, multiplied into) the shared vectors to make each head."""

    def __init__(self, kind, hidden, heads, head_dim, attn_dropout, fast=False):
        super().__init__()
        self.kind, self.n, self.d, self.fast, self.p = kind, heads, head_dim, fast, attn_dropout
        width = heads * head_dim if kind == "mha" else head_dim
        self.query = nn.Linear(hidden, width)
        self.key = nn.Linear(hidden, width)
        self.value = nn.Linear(hidden, width)
        if kind != "mha":
            self.eq = nn.Parameter(torch.randn(heads, head_dim) * 0.02)
            self.ek = nn.Parameter(torch.randn(heads, head_dim) * 0.02)
            self.ev = nn.Parameter(torch.randn(heads, head_dim) * 0.02)
        self.dropout = nn.Dropout(attn_dropout)
        self.out = nn.Linear(heads * head_dim, hidden)

    def heads(self, x, e):
        b, t, _ = x.shape
        if self.kind == "mha":
            return x.view(b, t, self.n, self.d).transpose(1, 2)
        x = x.unsqueeze(1)  # [b, 1, t, d] broadcast over heads
        if self.kind == "mhe_add":
            return x + e.view(1, self.n, 1, self.d)
        return x * (1 + e).view(1, self.n, 1, self.d)

    def forward(self, x):
        b, t, _ = x.shape
        q = self.heads(self.query(x), getattr(self, "eq", None))
        k = self.heads(self.key(x), getattr(self, "ek", None))
        v = self.heads(self.value(x), getattr(self, "ev", None))
        if self.fast:
            n = self.n
            q, k, v = (t.expand(b, n, t.shape[2], self.d) for t in (q, k, v))
            ctx = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0)
            return self.out(ctx.transpose(1, 2).reshape(b, t, n * self.d))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, self.n * self.d)
        return self.out(ctx)


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.attn = SelfAttention(a.attention, a.hidden, a.heads, a.hidden // a.heads, a.attn_dropout, a.fast)
        self.ln1 = nn.LayerNorm(a.hidden, eps=1e-12)
        self.up = nn.Linear(a.hidden, a.ffn)
        self.down = nn.Linear(a.ffn, a.hidden)
        self.ln2 = nn.LayerNorm(a.hidden, eps=1e-12)
        self.drop = nn.Dropout(a.dropout)

    def forward(self, x):
        h = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(h + self.drop(self.down(nn.functional.gelu(self.up(h)))))


class BertForMaskedLM(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.word = nn.Embedding(a.vocab, a.hidden)
        self.pos = nn.Embedding(a.seq, a.hidden)
        self.token_type = nn.Embedding(2, a.hidden)
        self.emb_ln = nn.LayerNorm(a.hidden, eps=1e-12)
        self.drop = nn.Dropout(a.dropout)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.head_dense = nn.Linear(a.hidden, a.hidden)
        self.head_ln = nn.LayerNorm(a.hidden, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(a.vocab))
        self.loss = nn.CrossEntropyLoss(ignore_index=-100)
        self.fast = a.fast
        self.apply(self.init_weights)

    @staticmethod
    def init_weights(mod):
        # As Hugging Face's BertPreTrainedModel: N(0, 0.02) weights, zero biases.
        if isinstance(mod, (nn.Linear, nn.Embedding)):
            mod.weight.data.normal_(0.0, 0.02)
        if isinstance(mod, nn.Linear) and mod.bias is not None:
            mod.bias.data.zero_()

    def forward(self, ids, labels):
        t = ids.shape[1]
        pos = torch.arange(t).unsqueeze(0)
        x = self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(ids))
        x = self.drop(self.emb_ln(x))
        for layer in self.layers:
            x = layer(x)
        if self.fast:
            # The head on the scored positions only.
            scored = labels.view(-1) >= 0
            x, labels = x.reshape(-1, x.shape[-1])[scored], labels.view(-1)[scored]
        h = self.head_ln(nn.functional.gelu(self.head_dense(x)))
        logits = h @ self.word.weight.t() + self.decoder_bias  # tied decoder, every position
        return self.loss(logits.view(-1, logits.shape[-1]), labels.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attention", default="mha", choices=["mha", "mhe_add", "mhe_mul"])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--attn-dropout", type=float, default=0.1)
    p.add_argument("--mask-prob", type=float, default=0.15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--fast", action="store_true", help="SDPA, head on scored rows, fused AdamW")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (with --fast)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = BertForMaskedLM(a)
    kw = {"fused": True} if a.fast else {}
    clip_kw = {"foreach": True} if a.fast else {}  # one multi-tensor norm (PyTorch 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, **kw)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.bf16 else contextlib.nullcontext
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    scored = torch.rand(a.batch, a.seq) < a.mask_prob
    labels = torch.where(scored, torch.randint(0, a.vocab, (a.batch, a.seq)), torch.full_like(ids, -100))
    labels[0, 0] = 1
    times, loss = [], 0.0
    for s in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            out = model(ids, labels)
        out.backward()
        # mhetrain takes the gradient norm every step and clips at optim.clip_norm (1.0).
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, **clip_kw)
        opt.step()
        loss = out.item()
        if s > 0:
            times.append(time.perf_counter() - t0)
    step = statistics.median(times)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"torch-result: tokens_per_s={a.batch * a.seq / step:.1f} step_ms={1e3 * step:.3f} "
          f"peak_rss_mib={rss:.1f} loss={loss:.4f} threads={torch.get_num_threads()} torch={torch.__version__}")


if __name__ == "__main__":
    main()
