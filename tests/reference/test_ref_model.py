#!/usr/bin/python3
"""Self-checks of the PyTorch oracle: exact identities between attention variants, identity
(fast-path) forms of mhe_add/mhe_mul, a loop-per-head collab, finite differences, masks, the
loss, the safetensors files and the command line; optionally Hugging Face BERT/GPT-2."""
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ref_model as R  # noqa: E402
import st_io  # noqa: E402

F64 = torch.float64


def make_cfg(**kw):
    raw = dict(arch="bert", layers=2, hidden=8, heads=2, head_dim=3, ffn=12, vocab_size=11,
               max_seq=7, type_vocab=2, attention="mha", groups=1, collab_dim=5)
    raw.update(kw)
    return R.Cfg(raw)


def random_weights(cfg, seed, scale=0.4):
    """Random weights under the canonical names; LayerNorm gains near 1 so no layer is degenerate."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, p in R.named_params(R.build(cfg)):
        w = rng.standard_normal(tuple(p.shape)) * scale
        if (".ln" in name or "final_ln" in name or name.startswith("embed.ln")) and name.endswith(".weight"):
            w = 1.0 + 0.1 * w
        out[name] = w
    return out


def model_from(cfg, weights, dtype=F64):
    m = R.build(cfg, dtype)
    R.load_weights(m, weights)
    return m


def make_inputs(cfg, B=2, T=6, seed=1, pad=True):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32)
    labels = np.where(rng.random((B, T)) < 0.5, rng.integers(0, cfg.vocab_size, (B, T)), -100).astype(np.int32)
    labels[:, 0] = ids[:, 0]  # every sequence has a scored position
    mask = np.ones((B, T), np.int32)
    if pad and B > 1:
        mask[1, T - 2:] = 0
        labels[1, T - 2:] = -100
    inp = {"input_ids": ids, "labels": labels, "attention_mask": mask}
    if cfg.arch == "bert":
        inp["token_type_ids"] = rng.integers(0, cfg.type_vocab, (B, T)).astype(np.int32)
    return inp


def grad_err(out, want, name, floor_frac=1e-6):
    """Relative error of one gradient, floored at floor_frac of the global gradient norm: some
    gradients are analytically zero (attn.k.bias, mhe_add's e^K) and hold only rounding noise."""
    G = math.sqrt(sum(float((v.astype(np.float64) ** 2).sum()) for k, v in want.items() if k.startswith("grad.")))
    a, b = np.asarray(out[name], np.float64), np.asarray(want[name], np.float64)
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), floor_frac * G, 1e-300)


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    nb = np.linalg.norm(b)
    return np.linalg.norm(a - b) / (nb if nb > 0 else 1.0)


class Identities(unittest.TestCase):
    """Equalities between attention types that hold exactly, checked in float64."""

    def assert_same(self, out_a, out_b, names=None, tol=1e-12):
        for k in names if names is not None else [k for k in out_b if k in out_a]:
            self.assertLess(rel(out_a[k], out_b[k]), tol, k)

    def test_sha_equals_mhe_at_zero_embeddings(self):
        for arch in ("bert", "gpt"):
            sha = make_cfg(arch=arch, attention="sha")
            w = random_weights(sha, 10)
            inp = make_inputs(sha)
            ref = R.run(model_from(sha, w), inp)
            for t in ("mhe_add", "mhe_mul"):
                cfg = make_cfg(arch=arch, attention=t)
                w2 = dict(w)
                for l in range(cfg.layers):
                    for x in "qkv":
                        w2[f"layers.{l}.attn.head_embed.{x}"] = np.zeros((cfg.heads, cfg.head_dim))
                out = R.run(model_from(cfg, w2), inp)
                self.assert_same(out, ref)  # logits, loss and every shared parameter's gradient

    def test_gqa_generalises_mha_and_mqa(self):
        for arch in ("bert", "gpt"):
            for other, groups in (("mha", 4), ("mqa", 1)):
                c1 = make_cfg(arch=arch, heads=4, attention="gqa", groups=groups)
                c2 = make_cfg(arch=arch, heads=4, attention=other)
                w = random_weights(c1, 11)
                inp = make_inputs(c1)
                self.assert_same(R.run(model_from(c1, w), inp), R.run(model_from(c2, w), inp))

    def test_gqa_group_order(self):
        # gqa with g=2 of n=4 is mha whose K/V head i copies K/V head i // 2.
        n, d, g = 4, 3, 2
        c1 = make_cfg(heads=n, head_dim=d, attention="gqa", groups=g)
        c2 = make_cfg(heads=n, head_dim=d, attention="mha")
        w = random_weights(c1, 12)
        w2 = dict(w)
        for l in range(2):
            for x in "kv":
                W = w[f"layers.{l}.attn.{x}.weight"].reshape(g, d, -1)
                b = w[f"layers.{l}.attn.{x}.bias"].reshape(g, d)
                w2[f"layers.{l}.attn.{x}.weight"] = np.repeat(W, n // g, axis=0).reshape(n * d, -1)
                w2[f"layers.{l}.attn.{x}.bias"] = np.repeat(b, n // g, axis=0).reshape(n * d)
        inp = make_inputs(c1)
        a, b = R.run(model_from(c1, w), inp), R.run(model_from(c2, w2), inp)
        self.assert_same(a, b, ["logits", "loss"])
        # gqa's K gradient is the sum over the query heads each group serves.
        gk = b["grad.layers.0.attn.k.weight"].reshape(g, n // g, d, -1).sum(axis=1).reshape(g * d, -1)
        self.assertLess(rel(a["grad.layers.0.attn.k.weight"], gk), 1e-12)

    def test_el_att_is_mha_with_identity_kv(self):
        for arch in ("bert", "gpt"):
            D, n = 8, 2
            c1 = make_cfg(arch=arch, hidden=D, heads=n, head_dim=D // n, attention="el_att")
            c2 = make_cfg(arch=arch, hidden=D, heads=n, head_dim=D // n, attention="mha")
            w = random_weights(c1, 13)
            w2 = dict(w)
            for l in range(2):
                for x in "kv":
                    w2[f"layers.{l}.attn.{x}.weight"] = np.eye(D)
                    w2[f"layers.{l}.attn.{x}.bias"] = np.zeros(D)
            inp = make_inputs(c1)
            self.assert_same(R.run(model_from(c1, w), inp), R.run(model_from(c2, w2), inp))
        with self.assertRaises(R.ConfigError):
            make_cfg(hidden=8, heads=2, head_dim=3, attention="el_att")

    def test_skv_is_mha_with_tied_kv(self):
        c1 = make_cfg(arch="gpt", attention="skv")
        c2 = make_cfg(arch="gpt", attention="mha")
        w = random_weights(c1, 14)
        w2 = {k: v for k, v in w.items() if ".attn.kv." not in k}
        for l in range(2):
            for x in "kv":
                for p in ("weight", "bias"):
                    w2[f"layers.{l}.attn.{x}.{p}"] = w[f"layers.{l}.attn.kv.{p}"]
        inp = make_inputs(c1)
        a, b = R.run(model_from(c1, w), inp), R.run(model_from(c2, w2), inp)
        self.assert_same(a, b, ["logits", "loss"])
        for p in ("weight", "bias"):
            tied = b[f"grad.layers.1.attn.k.{p}"] + b[f"grad.layers.1.attn.v.{p}"]
            self.assertLess(rel(a[f"grad.layers.1.attn.kv.{p}"], tied), 1e-12)


def attn_input(cfg, seed, B=2, T=6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, cfg.hidden, generator=g, dtype=F64)
    mask = torch.ones(B, T, dtype=torch.long)
    mask[1, T - 2:] = 0
    return x, mask


def randomise(module, seed, scale=0.5):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) * scale)


def masked_softmax(scores, allowed):
    return torch.softmax(scores.masked_fill(~allowed.unsqueeze(1), R.MASKED_SCORE), dim=-1)


class FastPathForms(unittest.TestCase):
    """The identity forms of DESIGN.md §1 computed separately, against the materialised oracle."""

    def setUp(self):
        self.cases = [(arch, n, d) for arch in ("bert", "gpt") for (n, d) in ((2, 3), (4, 2))]

    def run_case(self, t, identity):
        for arch, n, d in self.cases:
            cfg = make_cfg(arch=arch, heads=n, head_dim=d, attention=t)
            model = R.build(cfg, F64)
            att = model.layers[0].attn
            randomise(att, 20 + n)
            x, mask = attn_input(cfg, 21)
            allowed = model.allowed(mask)
            got = att(x, allowed)
            want = identity(att, x, allowed, n, d)
            self.assertLess(rel(got.detach(), want.detach()), 1e-12, (t, arch, n, d))

    def test_mhe_add_shared_scores_and_key_bias(self):
        def identity(att, x, allowed, n, d):
            Q, K, V = att.q(x), att.k(x), att.v(x)  # [B,T,d]
            e = att.head_embed
            shared = (Q @ K.transpose(1, 2)).unsqueeze(1)  # one T×T×d product for all heads
            key_bias = torch.einsum("btd,nd->bnt", K, e.q).unsqueeze(2)  # e_i^Q·k_j
            A = masked_softmax((shared + key_bias) / math.sqrt(d), allowed)
            heads = A @ V.unsqueeze(1) + e.v.view(1, n, 1, d)  # A_i V + e_i^V
            B, _, T, _ = heads.shape
            return att.o(heads.transpose(1, 2).reshape(B, T, n * d))
        self.run_case("mhe_add", identity)

    def test_mhe_mul_diagonal_form(self):
        def identity(att, x, allowed, n, d):
            Q, K, V = att.q(x), att.k(x), att.v(x)
            e = att.head_embed
            m = (1 + e.q) * (1 + e.k)  # [n,d]
            scores = torch.einsum("brd,nd,bjd->bnrj", Q, m, K) / math.sqrt(d)
            A = masked_softmax(scores, allowed)
            heads = (A @ V.unsqueeze(1)) * (1 + e.v).view(1, n, 1, d)
            B, _, T, _ = heads.shape
            return att.o(heads.transpose(1, 2).reshape(B, T, n * d))
        self.run_case("mhe_mul", identity)

    def test_mhe_add_ek_gradient_vanishes(self):
        # fp32 autograd leaves rounding noise (~3e-6 of |grad e^Q|) where the exact answer is 0.
        for dtype, tol in ((F64, 1e-12), (torch.float32, 2e-5)):
            cfg = make_cfg(arch="bert", heads=4, head_dim=3, attention="mhe_add")
            w = random_weights(cfg, 22)
            m = model_from(cfg, w, dtype)
            out = R.run(m, make_inputs(cfg))
            for l in range(cfg.layers):
                gq = np.linalg.norm(out[f"grad.layers.{l}.attn.head_embed.q"])
                gk = np.linalg.norm(out[f"grad.layers.{l}.attn.head_embed.k"])
                self.assertGreater(gq, 1e-3)
                self.assertLess(gk / gq, tol, (dtype, l))

    def test_collab_against_loops(self):
        for arch, Dt in (("bert", 5), ("gpt", 7)):
            n, d = 3, 2
            cfg = make_cfg(arch=arch, heads=n, head_dim=d, attention="collab", collab_dim=Dt)
            model = R.build(cfg, F64)
            att = model.layers[0].attn
            randomise(att, 23)
            x, mask = attn_input(cfg, 24, T=5)
            got = att(x, model.allowed(mask)).detach().numpy()
            W = {k: v.detach().numpy() for k, v in att.named_parameters()}
            X = x.numpy()
            B, T, D = X.shape
            want = np.zeros((B, T, D))
            for b in range(B):
                Qt = X[b] @ W["q.weight"].T + W["q.bias"]
                Kt = X[b] @ W["k.weight"].T + W["k.bias"]
                Vall = X[b] @ W["v.weight"].T + W["v.bias"]
                cat = np.zeros((T, n * d))
                for i in range(n):
                    for r in range(T):
                        s = np.full(T, -np.inf)
                        for j in range(T):
                            if mask[b, j] and (arch == "bert" or j <= r):
                                s[j] = (Qt[r] * W["mix"][i]) @ Kt[j] / math.sqrt(d) + X[b, j] @ W["content_bias"][i]
                        p = np.exp(s - s.max())
                        p /= p.sum()
                        cat[r, i * d:(i + 1) * d] = p @ Vall[:, i * d:(i + 1) * d]
                want[b] = cat @ W["o.weight"].T + W["o.bias"]
            self.assertLess(rel(got, want), 1e-12, arch)


class ZeroGradients(unittest.TestCase):
    def test_analytically_zero(self):
        """A key bias (and mhe_add's e^K) shifts a whole softmax row by a constant: zero gradient.
        Everything else gets a gradient. (README tells the C test to compare these absolutely.)"""
        for arch in ("bert", "gpt"):
            for t in R.ATTENTION_TYPES:
                cfg = make_cfg(arch=arch, attention=t, heads=4, groups=2, head_dim=2 if t == "el_att" else 3)
                out = R.run(model_from(cfg, random_weights(cfg, 70)), make_inputs(cfg))
                grads = {k[len("grad."):]: v for k, v in out.items() if k.startswith("grad.")}
                G = math.sqrt(sum(float((v ** 2).sum()) for v in grads.values()))
                for name, g in grads.items():
                    zero = name.endswith(".attn.k.bias") or (t == "mhe_add" and name.endswith("head_embed.k"))
                    r = np.linalg.norm(g) / G
                    if zero:
                        self.assertLess(r, 1e-14, (arch, t, name))
                    else:
                        self.assertGreater(r, 1e-6, (arch, t, name))


def loss_of(model, inp):
    with torch.no_grad():
        ids = torch.from_numpy(inp["input_ids"].astype(np.int64))
        mask = torch.from_numpy(inp["attention_mask"].astype(np.int64))
        tt = inp.get("token_type_ids")
        tt = torch.from_numpy(tt.astype(np.int64)) if tt is not None else None
        logits = model(ids, mask, tt)
        return R.cross_entropy(logits, torch.from_numpy(inp["labels"].astype(np.int64))).item()


class Gradients(unittest.TestCase):
    """Autograd against central finite differences in float64, along random directions per tensor
    (and coordinate-wise for the head embeddings and collab mixing vectors)."""

    CASES = [("bert", "mha", {}), ("gpt", "mha", {}), ("gpt", "mhe_mul", {}), ("bert", "mhe_add", {}),
             ("bert", "collab", {"collab_dim": 5}), ("gpt", "gqa", {"heads": 4, "groups": 2}),
             ("bert", "el_att", {"head_dim": 4}), ("gpt", "skv", {}), ("bert", "mqa", {}),
             ("gpt", "sha", {"norm": "post"}), ("bert", "mha", {"norm": "pre", "activation": "gelu_tanh"})]

    def test_finite_differences(self):
        eps = 1e-5
        for arch, t, extra in self.CASES:
            cfg = make_cfg(arch=arch, attention=t, **extra)
            w = random_weights(cfg, 30)
            m = model_from(cfg, w)
            inp = make_inputs(cfg, T=5)
            out = R.run(m, inp)
            params = dict(R.named_params(m))
            rng = np.random.default_rng(31)
            for name, p in params.items():
                g = out["grad." + name]
                coords = name.endswith(("head_embed.q", "head_embed.k", "head_embed.v", ".mix"))
                dirs = []
                if coords:
                    for idx in np.ndindex(*p.shape):
                        e = np.zeros(p.shape)
                        e[idx] = 1.0
                        dirs.append(e)
                else:
                    dirs = [rng.standard_normal(tuple(p.shape)) for _ in range(2)]
                for v in dirs:
                    vt = torch.from_numpy(v)
                    with torch.no_grad():
                        p.add_(eps * vt)
                        lp = loss_of(m, inp)
                        p.sub_(2 * eps * vt)
                        lm = loss_of(m, inp)
                        p.add_(eps * vt)
                    fd = (lp - lm) / (2 * eps)
                    an = float((g * v).sum())
                    err = abs(fd - an)
                    self.assertLess(err, 1e-7 * max(1.0, abs(an)) + 1e-9,
                                    f"{arch}/{t} {name}: autograd {an:.12g} vs fd {fd:.12g}")


class Masks(unittest.TestCase):
    def test_causal(self):
        for t in ("mha", "mhe_add", "collab", "el_att"):
            cfg = make_cfg(arch="gpt", attention=t, head_dim=4 if t == "el_att" else 3)
            m = model_from(cfg, random_weights(cfg, 40))
            inp = make_inputs(cfg, pad=False)
            a = R.run(m, inp)["logits"]
            inp2 = {k: v.copy() for k, v in inp.items()}
            pos = 3
            inp2["input_ids"][:, pos] = (inp2["input_ids"][:, pos] + 1) % cfg.vocab_size
            b = R.run(m, inp2)["logits"]
            self.assertLess(np.abs(a[:, :pos] - b[:, :pos]).max(), 1e-12, t)
            self.assertGreater(np.abs(a[:, pos:] - b[:, pos:]).min(axis=-1).min(), 1e-6, t)

    def test_padding(self):
        for t in ("mha", "mhe_mul", "skv", "gqa"):
            cfg = make_cfg(arch="bert", attention=t, groups=2)
            m = model_from(cfg, random_weights(cfg, 41))
            inp = make_inputs(cfg)
            a = R.run(m, inp)
            inp2 = {k: v.copy() for k, v in inp.items()}
            pad = inp["attention_mask"] == 0
            self.assertTrue(pad.any())
            inp2["input_ids"][pad] = (inp2["input_ids"][pad] + 3) % cfg.vocab_size
            inp2["token_type_ids"][pad] = 1 - inp2["token_type_ids"][pad]
            b = R.run(m, inp2)
            real = ~pad
            self.assertLess(np.abs(a["logits"][real] - b["logits"][real]).max(), 1e-12, t)
            self.assertGreater(np.abs(a["logits"][pad] - b["logits"][pad]).max(), 1e-6, t)
            self.assertLess(abs(a["loss"][0] - b["loss"][0]), 1e-12)
            # Without the mask the real positions would see the padded tokens.
            inp3 = {k: v for k, v in inp2.items() if k != "attention_mask"}
            c = R.run(m, inp3)
            self.assertGreater(np.abs(a["logits"][real] - c["logits"][real]).max(), 1e-6, t)


class LossAndFiles(unittest.TestCase):
    def test_loss_is_mean_cross_entropy(self):
        cfg = make_cfg(arch="gpt")
        m = model_from(cfg, random_weights(cfg, 50))
        inp = make_inputs(cfg, B=3)
        out = R.run(m, inp)
        logits, labels = out["logits"].reshape(-1, cfg.vocab_size), inp["labels"].reshape(-1)
        terms = []
        for row, lab in zip(logits, labels):
            if lab != -100:
                mx = row.max()
                terms.append(mx + math.log(np.exp(row - mx).sum()) - row[lab])
        self.assertGreater(len(terms), 3)
        self.assertLess(abs(out["loss"][0] - np.mean(terms)), 1e-12)
        torch_ce = torch.nn.functional.cross_entropy(torch.from_numpy(logits), torch.from_numpy(labels.astype(np.int64)),
                                                     ignore_index=-100)
        self.assertLess(abs(out["loss"][0] - torch_ce.item()), 1e-12)

    def test_safetensors_round_trip(self):
        rng = np.random.default_rng(51)
        data = {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(5),
                "c": rng.integers(-5, 5, (2, 3)).astype(np.int32), "d": np.arange(7, dtype=np.int64),
                "e": np.zeros((0, 3), np.float32), "s": np.float32(1.5).reshape(())}
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.safetensors")
            st_io.write(path, data, {"k": "v"})
            back, meta = st_io.read(path)
            self.assertEqual(meta, {"k": "v"})
            self.assertEqual(set(back), set(data))
            for k in data:
                self.assertEqual(back[k].dtype, data[k].dtype, k)
                np.testing.assert_array_equal(back[k], data[k])
            with open(path, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
            self.assertEqual(n % 8, 0)
            try:
                from safetensors.numpy import load_file, save_file
            except ImportError:
                return
            theirs = load_file(path)
            for k in data:
                np.testing.assert_array_equal(theirs[k], data[k])
            p2 = os.path.join(tmp, "y.safetensors")
            save_file({k: v for k, v in data.items() if k != "e"}, p2)
            back2, _ = st_io.read(p2)
            for k in back2:
                np.testing.assert_array_equal(back2[k], data[k])

    def test_command_line(self):
        cfg_raw = dict(arch="bert", layers=1, hidden=8, heads=2, head_dim=3, ffn=12, vocab_size=11,
                       max_seq=7, type_vocab=2, norm="post", activation="gelu", ln_eps=1e-12,
                       attention="collab", groups=1, collab_dim=5)
        cfg = R.Cfg(cfg_raw)
        w = {k: v.astype(np.float32) for k, v in random_weights(cfg, 52).items()}
        inp = make_inputs(cfg)
        with tempfile.TemporaryDirectory() as tmp:
            paths = {k: os.path.join(tmp, k) for k in ("cfg.json", "w.st", "in.st", "out32.st", "out64.st", "bad.st")}
            with open(paths["cfg.json"], "w") as f:
                json.dump(cfg_raw, f)
            st_io.write(paths["w.st"], w)
            st_io.write(paths["in.st"], inp)
            base = [sys.executable, os.path.join(HERE, "ref_model.py"), "--config", paths["cfg.json"],
                    "--weights", paths["w.st"], "--inputs", paths["in.st"]]
            subprocess.run(base + ["--out", paths["out32.st"]], check=True)
            subprocess.run(base + ["--out", paths["out64.st"], "--dtype", "float64"], check=True)
            o32, _ = st_io.read(paths["out32.st"])
            o64, _ = st_io.read(paths["out64.st"])
            names = {"logits", "loss"} | {"grad." + k for k in w}
            self.assertEqual(set(o32), names)
            self.assertEqual(o32["logits"].dtype, np.float32)
            self.assertEqual(o64["logits"].dtype, np.float64)
            self.assertEqual(o32["logits"].shape, (2, 6, 11))
            self.assertEqual(o32["loss"].shape, (1,))
            for k in w:
                self.assertEqual(o32["grad." + k].shape, w[k].shape, k)
            want = R.run(model_from(cfg, w), inp)
            # attn.k.bias has an analytically zero gradient (it shifts a whole softmax row), so
            # fp32 gives pure rounding noise there: measure errors against the global gradient norm.
            for k in names:
                self.assertLess(rel(o64[k], want[k]), 1e-12, k)
                err = grad_err(o32, want, k, 1e-3) if k.startswith("grad.") else rel(o32[k], want[k])
                self.assertLess(err, 1e-5, k)
            # A missing weight is a user error: exit status 2 and a message.
            st_io.write(paths["bad.st"], {k: v for k, v in w.items() if k != "head.bias"})
            r = subprocess.run(base[:5] + [paths["bad.st"], "--inputs", paths["in.st"], "--out", paths["out32.st"]],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2)
            self.assertIn("head.bias", r.stderr)


def import_transformers():
    try:
        import transformers  # noqa: F401
        return transformers
    except ImportError:
        pass
    src = os.environ.get("MHE_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
    for site in glob.glob(os.path.join(src, ".venv", "lib", "python3*", "site-packages")):
        if site not in sys.path:
            sys.path.append(site)
    try:
        import transformers  # noqa: F401
        return transformers
    except Exception:
        return None


class HuggingFace(unittest.TestCase):
    """bert+mha = BertForMaskedLM and gpt+mha = GPT2LMHeadModel (skipped without transformers)."""

    @classmethod
    def setUpClass(cls):
        cls.tf = import_transformers()
        if cls.tf is None:
            raise unittest.SkipTest("transformers not importable")

    def compare(self, ours, theirs, names, inp, tol=1e-10):
        ids = torch.from_numpy(inp["input_ids"].astype(np.int64))
        mask = torch.from_numpy(inp["attention_mask"].astype(np.int64))
        labels = torch.from_numpy(inp["labels"].astype(np.int64))
        kw = {"token_type_ids": torch.from_numpy(inp["token_type_ids"].astype(np.int64))} if "token_type_ids" in inp else {}
        theirs.eval()
        res = theirs(input_ids=ids, attention_mask=mask, labels=labels, **kw)
        res.loss.backward()
        out = R.run(ours, inp)
        self.assertLess(rel(out["logits"], res.logits.detach().numpy()), tol)
        self.assertLess(abs(out["loss"][0] - res.loss.item()), tol)
        hp = dict(theirs.named_parameters())
        want = {}
        for ours_name, (their_name, transpose) in names.items():
            g = hp[their_name].grad.detach().numpy()
            want["grad." + ours_name] = g.T if transpose else g
        for k in want:
            self.assertLess(grad_err(out, want, k), 1e-9, k)

    def test_bert(self):
        tf = self.tf
        cfg = make_cfg(arch="bert", hidden=8, heads=2, head_dim=4, ffn=12, layers=2)
        w = random_weights(cfg, 60)
        hf = tf.BertForMaskedLM(tf.BertConfig(
            vocab_size=11, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=12,
            hidden_act="gelu", max_position_embeddings=7, type_vocab_size=2, layer_norm_eps=1e-12,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, attn_implementation="eager")).double()
        names = {"embed.word": ("bert.embeddings.word_embeddings.weight", False),
                 "embed.pos": ("bert.embeddings.position_embeddings.weight", False),
                 "embed.type": ("bert.embeddings.token_type_embeddings.weight", False),
                 "embed.ln.weight": ("bert.embeddings.LayerNorm.weight", False),
                 "embed.ln.bias": ("bert.embeddings.LayerNorm.bias", False),
                 "head.dense.weight": ("cls.predictions.transform.dense.weight", False),
                 "head.dense.bias": ("cls.predictions.transform.dense.bias", False),
                 "head.ln.weight": ("cls.predictions.transform.LayerNorm.weight", False),
                 "head.ln.bias": ("cls.predictions.transform.LayerNorm.bias", False),
                 "head.bias": ("cls.predictions.bias", False)}
        for l in range(2):
            p, h = f"layers.{l}.", f"bert.encoder.layer.{l}."
            for ours, theirs in (("attn.q", "attention.self.query"), ("attn.k", "attention.self.key"),
                                 ("attn.v", "attention.self.value"), ("attn.o", "attention.output.dense"),
                                 ("ln1", "attention.output.LayerNorm"), ("ffn.up", "intermediate.dense"),
                                 ("ffn.down", "output.dense"), ("ln2", "output.LayerNorm")):
                for s in ("weight", "bias"):
                    names[p + ours + "." + s] = (h + theirs + "." + s, False)
        hp = dict(hf.named_parameters())
        with torch.no_grad():
            for ours, (theirs, _) in names.items():
                hp[theirs].copy_(torch.from_numpy(w[ours]))
        # HF's word embedding has padding_idx=0 (no gradient through the lookup of id 0); we have none.
        inp = make_inputs(cfg)
        inp["input_ids"] = np.where(inp["input_ids"] == 0, 1, inp["input_ids"]).astype(np.int32)
        self.compare(model_from(cfg, w), hf, names, inp)

    def test_gpt2(self):
        tf = self.tf
        D, L = 8, 2
        cfg = make_cfg(arch="gpt", hidden=D, heads=2, head_dim=4, ffn=4 * D, layers=L)
        w = random_weights(cfg, 61)
        hf = tf.GPT2LMHeadModel(tf.GPT2Config(
            vocab_size=11, n_positions=7, n_embd=D, n_layer=L, n_head=2, n_inner=4 * D,
            activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            layer_norm_epsilon=1e-5, attn_implementation="eager")).double()
        hp = dict(hf.named_parameters())
        names = {"embed.word": ("transformer.wte.weight", False), "embed.pos": ("transformer.wpe.weight", False),
                 "final_ln.weight": ("transformer.ln_f.weight", False), "final_ln.bias": ("transformer.ln_f.bias", False)}
        for l in range(L):
            p, h = f"layers.{l}.", f"transformer.h.{l}."
            for ours, theirs in (("ln1", "ln_1"), ("ln2", "ln_2")):
                for s in ("weight", "bias"):
                    names[p + ours + "." + s] = (h + theirs + "." + s, False)
            for ours, theirs in (("attn.o", "attn.c_proj"), ("ffn.up", "mlp.c_fc"), ("ffn.down", "mlp.c_proj")):
                names[p + ours + ".weight"] = (h + theirs + ".weight", True)  # Conv1D stores [in, out]
                names[p + ours + ".bias"] = (h + theirs + ".bias", False)
        with torch.no_grad():
            for ours, (theirs, tr) in names.items():
                hp[theirs].copy_(torch.from_numpy(w[ours].T if tr else w[ours]))
            for l in range(L):
                qkv_w = np.concatenate([w[f"layers.{l}.attn.{x}.weight"] for x in "qkv"], axis=0)
                qkv_b = np.concatenate([w[f"layers.{l}.attn.{x}.bias"] for x in "qkv"])
                hp[f"transformer.h.{l}.attn.c_attn.weight"].copy_(torch.from_numpy(qkv_w.T))
                hp[f"transformer.h.{l}.attn.c_attn.bias"].copy_(torch.from_numpy(qkv_b))
        # HF GPT-2 computes the loss itself with a shift; ours takes labels as given.
        inp = make_inputs(cfg, pad=False)
        ids = inp["input_ids"]
        inp["labels"] = np.concatenate([ids[:, 1:], np.full((ids.shape[0], 1), -100)], axis=1).astype(np.int32)
        hf_inp = dict(inp, labels=ids)
        self.compare_gpt(model_from(cfg, w), hf, names, inp, hf_inp)

    def compare_gpt(self, ours, theirs, names, inp, hf_inp):
        theirs.eval()
        res = theirs(input_ids=torch.from_numpy(hf_inp["input_ids"].astype(np.int64)),
                     attention_mask=torch.from_numpy(hf_inp["attention_mask"].astype(np.int64)),
                     labels=torch.from_numpy(hf_inp["labels"].astype(np.int64)))
        res.loss.backward()
        out = R.run(ours, inp)
        self.assertLess(rel(out["logits"], res.logits.detach().numpy()), 1e-10)
        self.assertLess(abs(out["loss"][0] - res.loss.item()), 1e-10)
        hp = dict(theirs.named_parameters())
        want = {}
        for ours_name, (their_name, tr) in names.items():
            g = hp[their_name].grad.detach().numpy()
            want["grad." + ours_name] = g.T if tr else g
        for l in range(ours.cfg.layers):
            gw = hp[f"transformer.h.{l}.attn.c_attn.weight"].grad.detach().numpy().T
            gb = hp[f"transformer.h.{l}.attn.c_attn.bias"].grad.detach().numpy()
            for i, x in enumerate("qkv"):
                D = gw.shape[0] // 3
                want[f"grad.layers.{l}.attn.{x}.weight"] = gw[i * D:(i + 1) * D]
                want[f"grad.layers.{l}.attn.{x}.bias"] = gb[i * D:(i + 1) * D]
        self.assertEqual(set(want), {k for k in out if k.startswith("grad.")})
        for k in want:
            self.assertLess(grad_err(out, want, k), 1e-9, k)


if __name__ == "__main__":
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    unittest.main(verbosity=2)
