"""collab: collaborative heads (Cordonnier et al. 2020): shared W̃_Q, W̃_K ∈ R^{D×D̃}, mixing
vectors m_i ∈ R^{D̃}, content bias W_cb ∈ R^{D×n} (stored as rows: content_bias[i] = W_cb[:, i]),
per-head values as mha:  S_i = (X W̃_Q ⊙ m_i)(X W̃_K)ᵀ/√d + 1·(X W_cb[:,i])ᵀ."""
import torch
from torch import nn

NAME = "collab"
OPTIONS = {"collab_dim": 0}
HF_KEYS = {}


def resolve(o, D, n, d):
    o = dict(o)
    o["collab_dim"] = int(o.get("collab_dim") or n * d)
    return o


def build(m, D, n, d, o):
    Dt = o["collab_dim"]
    m.q, m.k = nn.Linear(D, Dt), nn.Linear(D, Dt)
    m.mix = nn.Parameter(torch.ones(n, Dt))
    m.content_bias = nn.Parameter(torch.zeros(n, D))
    m.v = nn.Linear(D, n * d)


def per_head(m, x, n, d, o):
    B, T, _ = x.shape
    Dt = o["collab_dim"]
    q = m.q(x).unsqueeze(1) * m.mix.view(1, n, 1, Dt)  # [B, n, T, D̃]
    k = m.k(x).unsqueeze(1)                             # [B, 1, T, D̃]
    v = m.v(x).reshape(B, T, n, d).transpose(1, 2)
    # score_i(r, j) += x_j · W_cb[:, i]: a bias per key j and head i
    bias = torch.einsum("btc,nc->bnt", x, m.content_bias).unsqueeze(2)
    return q, k, v, bias


def init_weights(m, std):
    m.mix.data.fill_(1.0)
    m.content_bias.data.normal_(0.0, std)
