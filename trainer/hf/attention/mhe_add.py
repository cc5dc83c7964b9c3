"""mhe_add: shared Q, K, V (width d) plus head embeddings: Q_i = Q + e_i^Q, K_i = K + e_i^K,
V_i = V + e_i^V, e ∈ R^{n×d}.  Materialised per head (the identities are the C fast path's)."""
import torch
from torch import nn

NAME = "mhe_add"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.k, m.v = nn.Linear(D, d), nn.Linear(D, d), nn.Linear(D, d)
    m.head_embed = nn.ParameterDict({w: nn.Parameter(torch.zeros(n, d)) for w in "qkv"})


def per_head(m, x, n, d, o):
    e = m.head_embed
    return tuple(f(x).unsqueeze(1) + e[w].view(1, n, 1, d) for f, w in ((m.q, "q"), (m.k, "k"), (m.v, "v"))) + (None,)


def init_weights(m, std):
    pass  # zeros: every head starts as the shared head
