"""mhe_mul: shared Q, K, V (width d) scaled per head: Q_i = Q ⊙ (1 + e_i^Q), K_i = K ⊙ (1 + e_i^K),
V_i = V ⊙ (1 + e_i^V), e ∈ R^{n×d}.  Materialised per head."""
import torch
from torch import nn

NAME = "mhe_mul"
OPTIONS = {}
HF_KEYS = {}


def resolve(o, D, n, d):
    return dict(o)


def build(m, D, n, d, o):
    m.q, m.k, m.v = nn.Linear(D, d), nn.Linear(D, d), nn.Linear(D, d)
    m.head_embed = nn.ParameterDict({w: nn.Parameter(torch.zeros(n, d)) for w in "qkv"})


def per_head(m, x, n, d, o):
    e = m.head_embed
    return tuple(f(x).unsqueeze(1) * (1 + e[w].view(1, n, 1, d)) for f, w in ((m.q, "q"), (m.k, "k"), (m.v, "v"))) + (None,)


def init_weights(m, std):
    pass  # zeros: every head starts as the shared head
