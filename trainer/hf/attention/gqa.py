"""gqa: per-head Q_i; g K/V heads, K/V head j serving query heads j·(n/g) … (j+1)·(n/g)−1."""
from torch import nn

NAME = "gqa"
OPTIONS = {"groups": 1}
HF_KEYS = {"groups": "kv_groups"}


def resolve(o, D, n, d):
    o = dict(o)
    g = int(o.get("groups") or 1)
    if g <= 0 or n % g:
        raise ValueError(f"gqa needs groups dividing heads ({g} vs {n})")
    o["groups"] = g
    return o


def build(m, D, n, d, o):
    g = o["groups"]
    m.q, m.k, m.v = nn.Linear(D, n * d), nn.Linear(D, g * d), nn.Linear(D, g * d)


def _split(y, heads):
    B, T, _ = y.shape
    return y.reshape(B, T, heads, -1).transpose(1, 2)


def per_head(m, x, n, d, o):
    g = o["groups"]
    q = _split(m.q(x), n)  # q first: autograd then sums dX in the same order for every type
    k, v = (_split(f(x), g).repeat_interleave(n // g, dim=1) for f in (m.k, m.v))
    return q, k, v, None


def init_weights(m, std):
    pass
