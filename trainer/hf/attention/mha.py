"""mha: multi-head attention, Q_i = X W_Q^(i), K_i = X W_K^(i), V_i = X W_V^(i)."""
from torch import nn

NAME = "mha"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.k, m.v = nn.Linear(D, n * d), nn.Linear(D, n * d), nn.Linear(D, n * d)


def _split(y, heads):
    B, T, _ = y.shape
    return y.reshape(B, T, heads, -1).transpose(1, 2)


def per_head(m, x, n, d, o):
    return _split(m.q(x), n), _split(m.k(x), n), _split(m.v(x), n), None


def init_weights(m, std):
    pass
