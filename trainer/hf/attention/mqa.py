"""mqa: per-head Q_i; one K and one V head (W_K, W_V ∈ R^{D×d}) shared by all query heads."""
from torch import nn

NAME = "mqa"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.k, m.v = nn.Linear(D, n * d), nn.Linear(D, d), nn.Linear(D, d)


def per_head(m, x, n, d, o):
    B, T, _ = x.shape
    q = m.q(x).reshape(B, T, n, d).transpose(1, 2)
    return q, m.k(x).unsqueeze(1), m.v(x).unsqueeze(1), None


def init_weights(m, std):
    pass
