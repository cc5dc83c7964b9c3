"""PyTorch's side of tests/gpu/check.sh: the same models as `gpu_bench`, trained on the same GPU
the fast way (SDPA, bf16 autocast over fp32 master weights, fused AdamW, foreach gradient clip,
the MLM head on the scored rows only; torch.compile with --compile), timed with CUDA events.

  torch_gpu.py model --arch bert|gpt --attention mha|mhe_mul --seq T --batch B [--compile]
      one line: torch-result: arch=.. attention=.. seq=.. batch=.. step_ms=.. tokens_per_s=.. loss=..
  torch_gpu.py attention
      SDPA forward and backward with the flash and the cuDNN backends on the shapes that
      gpu_attn_bench times: one `sdpa-result:` line per shape and backend (FlashAttention's flop
      convention, as gpu_attn_bench).

Models as mhetrain builds them: BERT (post-LN, learned positions, token types, tied decoder with
bias, erf GELU) and GPT-2 (pre-LN, learned positions, tied head, final LayerNorm, every position
scored); mhe_mul: one shared d-wide Q, K, V projection scaled per head by (1 + e).
"""
import argparse
import contextlib
import math
import statistics

import torch
import torch.nn.functional as F
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self, kind, hidden, heads, head_dim, p, causal):
        super().__init__()
        self.kind, self.n, self.d, self.p, self.causal = kind, heads, head_dim, p, causal
        width = heads * head_dim if kind == "mha" else head_dim
        self.qkv = nn.Linear(hidden, 3 * width)
        if kind == "mhe_mul":
            self.e = nn.Parameter(torch.randn(3, heads, head_dim) * 0.02)
        self.out = nn.Linear(heads * head_dim, hidden)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        if self.kind == "mha":
            q, k, v = (z.view(b, t, self.n, self.d).transpose(1, 2) for z in (q, k, v))
        else:
            q, k, v = (z.unsqueeze(1) * (1 + self.e[i]).view(1, self.n, 1, self.d) for i, z in enumerate((q, k, v)))
        ctx = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p if self.training else 0.0,
                                             is_causal=self.causal)
        return self.out(ctx.transpose(1, 2).reshape(b, t, self.n * self.d))


class Block(nn.Module):
    def __init__(self, a, pre_ln):
        super().__init__()
        self.pre_ln = pre_ln
        self.attn = SelfAttention(a.attention, 768, 12, 64, 0.1, causal=pre_ln)
        self.ln1, self.ln2 = nn.LayerNorm(768, eps=1e-12), nn.LayerNorm(768, eps=1e-12)
        self.up, self.down = nn.Linear(768, 3072), nn.Linear(3072, 768)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        if self.pre_ln:  # GPT-2
            x = x + self.drop(self.attn(self.ln1(x)))
            return x + self.drop(self.down(F.gelu(self.up(self.ln2(x)))))
        h = self.ln1(x + self.drop(self.attn(x)))
        return self.ln2(h + self.drop(self.down(F.gelu(self.up(h)))))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gpt = a.arch == "gpt"
        vocab, maxpos = (50257, 1024) if self.gpt else (30522, 512)
        self.word, self.pos = nn.Embedding(vocab, 768), nn.Embedding(maxpos, 768)
        if not self.gpt:
            self.token_type = nn.Embedding(2, 768)
            self.head_dense, self.head_ln = nn.Linear(768, 768), nn.LayerNorm(768, eps=1e-12)
            self.decoder_bias = nn.Parameter(torch.zeros(vocab))
        self.ln = nn.LayerNorm(768, eps=1e-12)  # BERT: embedding LN; GPT-2: final LN
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(Block(a, self.gpt) for _ in range(12))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.data.normal_(0.0, 0.02)
            if isinstance(m, nn.Linear):
                m.bias.data.zero_()

    def forward(self, ids, labels):
        t = ids.shape[1]
        x = self.word(ids) + self.pos(torch.arange(t, device=ids.device)).unsqueeze(0)
        if self.gpt:
            x = self.drop(x)
            for blk in self.blocks:
                x = blk(x)
            logits = self.ln(x) @ self.word.weight.t()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), labels.view(-1), ignore_index=-100)
        x = self.drop(self.ln(x + self.token_type(torch.zeros_like(ids))))
        for blk in self.blocks:
            x = blk(x)
        scored = labels.view(-1) >= 0  # the head on the scored rows only
        x, labels = x.reshape(-1, 768)[scored], labels.view(-1)[scored]
        h = self.head_ln(F.gelu(self.head_dense(x)))
        logits = h @ self.word.weight.t() + self.decoder_bias
        return F.cross_entropy(logits.float(), labels, ignore_index=-100)


def time_cuda(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def model_main(a):
    torch.manual_seed(0)
    dev = "cuda"
    model = Model(a).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    fwd = torch.compile(model) if a.compile else model
    vocab = 50257 if a.arch == "gpt" else 30522
    ids = torch.randint(0, vocab, (a.batch, a.seq), device=dev)
    if a.arch == "gpt":
        labels = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)
    else:
        scored = torch.rand(a.batch, a.seq, device=dev) < 0.15
        labels = torch.where(scored, torch.randint(0, vocab, ids.shape, device=dev), torch.full_like(ids, -100))
    loss = [0.0]

    def step():
        # --accum micro-batches into the gradients, then one clip and optimizer step (as gpu_bench
        # --accum and train.global_batch = accum x micro_batch); the loss the mean over them.
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for _ in range(a.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                out = fwd(ids, labels) / a.accum
            out.backward()
            total = total + out.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        loss[0] = total

    for _ in range(3):
        step()
    ms = time_cuda(step, a.steps)
    print(f"torch-result: arch={a.arch} attention={a.attention} seq={a.seq} batch={a.batch} "
          f"accum={a.accum} compile={int(a.compile)} step_ms={ms:.3f} "
          f"tokens_per_s={a.accum * a.batch * a.seq / ms * 1e3:.0f} "
          f"loss={float(loss[0]):.4f} torch={torch.__version__}", flush=True)


def attention_main(a):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    shapes = [(64, 12, 128, 64, False), (16, 12, 512, 64, False), (16, 12, 1024, 64, True)]
    for b, h, t, d, causal in shapes:
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        dout = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)
        f = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0)
        for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    run_f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    out = run_f()
                    fwd_ms = time_cuda(run_f, 20)
                    bwd_ms = time_cuda(lambda: torch.autograd.grad(run_f(), (q, k, v), dout), 20) - fwd_ms
                print(f"sdpa-result: backend={name} B={b} H={h} T={t} d={d} causal={int(causal)} "
                      f"fwd_ms={fwd_ms:.4f} bwd_ms={bwd_ms:.4f} fwd_tflops={f / fwd_ms / 1e9:.1f} "
                      f"bwd_tflops={2.5 * f / bwd_ms / 1e9:.1f}", flush=True)
                del out
            except Exception as e:  # a backend that refuses the shape says so and the rest go on
                print(f"sdpa-result: backend={name} B={b} H={h} T={t} d={d} causal={int(causal)} "
                      f"error={type(e).__name__}: {str(e).splitlines()[0][:120]}", flush=True)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="what", required=True)
    m = sub.add_parser("model")
    m.add_argument("--arch", choices=["bert", "gpt"], required=True)
    m.add_argument("--attention", choices=["mha", "mhe_mul"], default="mha")
    m.add_argument("--seq", type=int, required=True)
    m.add_argument("--batch", type=int, required=True)
    m.add_argument("--steps", type=int, default=10)
    m.add_argument("--compile", action="store_true")
    m.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
    sub.add_parser("attention")
    a = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_gpu.py: no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = True
    (model_main if a.what == "model" else attention_main)(a)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
