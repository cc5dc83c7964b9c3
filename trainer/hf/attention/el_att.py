"""el_att: per-head Q_i; no K/V projections: K_i = V_i = X[:, i·d:(i+1)·d] (needs n·d = D)."""
from torch import nn

NAME = "el_att"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    if n * d != D:
        raise ValueError(f"el_att needs heads*head_dim == hidden ({n}*{d} != {D})")
    return dict(o)


def build(m, D, n, d, o):
    m.q = nn.Linear(D, n * d)


def _split(y, heads):
    B, T, _ = y.shape
    return y.reshape(B, T, heads, -1).transpose(1, 2)


def per_head(m, x, n, d, o):
    q = _split(m.q(x), n)
    kv = _split(x, n)
    return q, kv, kv, None


def init_weights(m, std):
    pass
