"""skv: per-head Q_i; one projection serves as key and value: K_i = V_i = X W_KV^(i)."""
from torch import nn

NAME = "skv"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.kv = nn.Linear(D, n * d), nn.Linear(D, n * d)


def _split(y, heads):
    B, T, _ = y.shape
    return y.reshape(B, T, heads, -1).transpose(1, 2)


def per_head(m, x, n, d, o):
    q = _split(m.q(x), n)
    kv = _split(m.kv(x), n)
    return q, kv, kv, None


def init_weights(m, std):
    pass
