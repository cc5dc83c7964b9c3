"""sha: one shared head Q = X W_Q, K, V (W ∈ R^{D×d}); all n heads identical."""
from torch import nn

NAME = "sha"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.k, m.v = nn.Linear(D, d), nn.Linear(D, d), nn.Linear(D, d)


def per_head(m, x, n, d, o):
    q, k, v = (f(x).unsqueeze(1) for f in (m.q, m.k, m.v))  # [B, 1, T, d]
    return q.expand(-1, n, -1, -1), k, v, None


def init_weights(m, std):
    pass
