"""mla: multi-head latent attention (DeepSeek-V2, 2024) with learned positions.  One shared
latent c = X W_DKV + b (D × d_c, default d_c = 4d) gives the keys and values of every head:
K_i = c W_UK^(i), V_i = c W_UV^(i).  Queries per head as in mha, Q_i = X W_Q^(i), or with
q_latent_dim = d_q > 0 through their own latent: Q_i = (X W_DQ) W_UQ^(i).  Every projection
has a bias (as every mhetrain projection) except W_UK, whose bias would cancel in the softmax."""
from torch import nn

NAME = "mla"
OPTIONS = {"latent_dim": 0, "q_latent_dim": 0}
HF_KEYS = {}


def resolve(o, D, n, d):
    o = dict(o)
    o["latent_dim"] = int(o.get("latent_dim") or 4 * d)  # DeepSeek-V2: d_c = 4 d_h
    o["q_latent_dim"] = int(o.get("q_latent_dim") or 0)
    if o["latent_dim"] < 1:
        raise ValueError(f"mla needs latent_dim >= 1, got {o['latent_dim']}")
    if o["q_latent_dim"] < 0:
        raise ValueError(f"mla needs q_latent_dim >= 0, got {o['q_latent_dim']}")
    return o


def build(m, D, n, d, o):
    dc, dq = o["latent_dim"], o["q_latent_dim"]
    if dq:
        m.q_down, m.q_up = nn.Linear(D, dq), nn.Linear(dq, n * d)
    else:
        m.q = nn.Linear(D, n * d)
    m.kv_down = nn.Linear(D, dc)
    # No bias on the key up-projection: a key bias adds the same q·b to a whole softmax row,
    # which cancels (it would only ever receive a zero gradient).
    m.k_up, m.v_up = nn.Linear(dc, n * d, bias=False), nn.Linear(dc, n * d)


def _split(y, heads):
    B, T, _ = y.shape
    return y.reshape(B, T, heads, -1).transpose(1, 2)


def per_head(m, x, n, d, o):
    q = _split(m.q_up(m.q_down(x)) if o["q_latent_dim"] else m.q(x), n)
    c = m.kv_down(x)  # [B, T, d_c], shared by every head
    return q, _split(m.k_up(c), n), _split(m.v_up(c), n), None


def init_weights(m, std):
    pass  # only nn.Linear layers
