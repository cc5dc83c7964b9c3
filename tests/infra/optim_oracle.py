"""PyTorch oracle for tests/infra/test_optim.c.

Reads inputs.safetensors written by the C test, replays the same updates with
torch.optim.AdamW (AdamW) or with LAMB written here from the paper's equations (You et al.
2020, Algorithm 2 with bias correction; trust ratio only on weight-decayed tensors, with
the ||w|| = 0 / ||u|| = 0 guards), and clips a gradient with torch.nn.utils.clip_grad_norm_.
Writes expected.safetensors: params, m, v after the last step, clipped grads and the norm.
usage: optim_oracle.py inputs.safetensors expected.safetensors
"""
import sys

import torch
from safetensors.torch import load_file, save_file

PARAM_WEIGHT = 0


def lamb_step(params, grads, states, decays, lr, b1, b2, eps, wd, t):
    for p, g, st, dec in zip(params, grads, states, decays):
        m, v = st
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        mh = m / (1 - b1 ** t)
        vh = v / (1 - b2 ** t)
        u = mh / (vh.sqrt() + eps)
        ratio = 1.0
        if dec:
            u = u + wd * p
            wn = p.double().norm().item()
            un = u.double().norm().item()
            if wn > 0 and un > 0:
                ratio = wn / un
        p.sub_(u * (lr * ratio))


def main():
    x = load_file(sys.argv[1])
    offsets, numel, kinds = x["offsets"].tolist(), x["numel"].tolist(), x["kinds"].tolist()
    b1, b2, eps, wd = (float(v) for v in x["hyper"].tolist())
    kind, decay_all = x["flags"].tolist()
    flat0, grads, lrs = x["params0"], x["grads"], x["lrs"].tolist()
    shapes = [(o, n) for o, n in zip(offsets, numel)]
    params = [flat0[o:o + n].clone() for o, n in shapes]
    decays = [bool(decay_all) or k == PARAM_WEIGHT for k in kinds]
    if kind == 0:
        for p in params:
            p.requires_grad_(True)
        groups = [{"params": [p for p, d in zip(params, decays) if d], "weight_decay": wd},
                  {"params": [p for p, d in zip(params, decays) if not d], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=lrs[0], betas=(b1, b2), eps=eps)
        for s, lr in enumerate(lrs):
            for p, (o, n) in zip(params, shapes):
                p.grad = grads[s, o:o + n].clone()
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
        m = [opt.state[p]["exp_avg"] for p in params]
        v = [opt.state[p]["exp_avg_sq"] for p in params]
        params = [p.detach() for p in params]
    else:
        states = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
        for s, lr in enumerate(lrs):
            g = [grads[s, o:o + n] for o, n in shapes]
            lamb_step(params, g, states, decays, lr, b1, b2, eps, wd, s + 1)
        m = [st[0] for st in states]
        v = [st[1] for st in states]

    holders = [torch.zeros(n, requires_grad=True) for _, n in shapes]
    for h, (o, n) in zip(holders, shapes):
        h.grad = x["clip_in"][o:o + n].clone()
    norm = torch.nn.utils.clip_grad_norm_(holders, float(x["clip_max"].item()))
    clip = [h.grad for h in holders]
    save_file({
        "params": torch.cat(params).contiguous(),
        "m": torch.cat(m).contiguous(),
        "v": torch.cat(v).contiguous(),
        "clip_out": torch.cat(clip).contiguous(),
        "clip_norm": torch.tensor([float(norm)], dtype=torch.float64),
    }, sys.argv[2])


if __name__ == "__main__":
    main()
