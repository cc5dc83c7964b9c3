"""mhetrain convert against independent oracles (venv: transformers 4.41.2, tensorly 0.10.0, numpy).

A small random BertForMaskedLM built by transformers (D=32, n=4, d=8, L=2; biases non-zero) is
imported (`mhetrain import`) and converted:
  - collab at D~ = n·d (exact concatenate layout): exported and loaded with transformers
    (trust_remote_code), its logits equal the original BertForMaskedLM's: rel ≤ 1e-5.  The query
    bias went into the content bias, so this also checks W_cb = s·W_K^(h) b_Q^(h).
  - gqa with g = n (one head per group: pooling is the identity): same logits, rel ≤ 1e-5.
  - collab at D~ = 16: per layer, T[:, h, :] = W_Q^(h) W_K^(h)ᵀ is formed in numpy from the
    original weights; the converted checkpoint's q/k/mix give T^, and ‖T − T^‖/‖T‖ must equal
    the error `convert` printed (to 1e-4) and be within 5% of tensorly's parafac (rank 16, SVD
    init, 500 sweeps, tol 1e-10) on the same T: ours ≤ 1.05 · tensorly's.
  - gqa g=2 and mqa: K and V are the means of the heads of each group (numpy, 1e-6), and the
    exported model loads with transformers and gives finite logits.
  - bad input: converting a collab checkpoint again exits 2 with one line.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import tensorly as tl
import torch
import transformers as tf
from safetensors.numpy import load_file
from tensorly.decomposition import parafac

MHETRAIN = os.environ["MHETRAIN"]
D, N, DH, L = 32, 4, 8, 2
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args):
    p = subprocess.run([MHETRAIN, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def ckpt(run_dir):
    return load_file(os.path.join(run_dir, "checkpoints", "step_00000000", "model.safetensors"))


def logits(model):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (2, 17), generator=g)
    tt = torch.zeros_like(ids)
    tt[:, 9:] = 1
    with torch.no_grad():
        return model(input_ids=ids, token_type_ids=tt).logits


def exported_logits(run_dir, work, name):
    out = os.path.join(work, name + "_export")
    rc, _, err = run("export", run_dir, "--out", out, "--no-tokenizer")
    check(rc == 0, f"{name}: export exits 0 ({err.strip()})")
    m = tf.AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True).eval()
    return logits(m)


def convert(src, work, name, *args):
    out = os.path.join(work, name)
    rc, stdout, err = run("convert", src, "--out", out, *args)
    check(rc == 0, f"{name}: convert exits 0 ({err.strip()})")
    rc2, _, err2 = run("params", os.path.join(out, "config.yaml"))
    check(rc2 == 0, f"{name}: params accepts the converted config ({err2.strip()})")
    return out, stdout


def main():
    work = tempfile.mkdtemp(prefix="mhe_convert_")
    try:
        cfg = tf.BertConfig(vocab_size=120, hidden_size=D, num_hidden_layers=L, num_attention_heads=N,
                            intermediate_size=48, max_position_embeddings=40, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0)
        torch.manual_seed(0)
        model = tf.BertForMaskedLM(cfg)
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(0.3 * torch.randn(p.shape, generator=g) + (1.0 if "LayerNorm.weight" in name else 0.0))
        model.tie_weights()
        model.eval()
        hf = os.path.join(work, "hf")
        model.save_pretrained(hf, safe_serialization=True)
        mha = os.path.join(work, "mha")
        rc, _, err = run("import", hf, "--out", mha)
        check(rc == 0, f"import exits 0 ({err.strip()})")
        ref = logits(model)
        W = ckpt(mha)

        exact, out = convert(mha, work, "collab_exact", "--to", "collab", "--collab-dim", str(N * DH))
        check("exact concatenate layout" in out and "score scale kept" in out, "collab_exact: says exact layout and the kept scale")
        x = exported_logits(exact, work, "collab_exact")
        rel = float((x - ref).norm() / ref.norm())
        check(rel <= 1e-5, f"collab_exact: logits equal the original BertForMaskedLM, rel {rel:.2e} <= 1e-5")

        g4, _ = convert(mha, work, "gqa_n", "--to", "gqa", "--groups", str(N))
        x = exported_logits(g4, work, "gqa_n")
        rel = float((x - ref).norm() / ref.norm())
        check(rel <= 1e-5, f"gqa_n: g = n is the identity, rel {rel:.2e} <= 1e-5")

        R = 16
        cp, out = convert(mha, work, "collab16", "--to", "collab", "--collab-dim", str(R), "--seed", "7")
        printed = [float(v) for v in re.findall(r"relative reconstruction error ([0-9.e+-]+)", out)]
        check(len(printed) == L, f"collab16: one error line per layer ({out.strip()})")
        C = ckpt(cp)
        for l in range(L):
            wq = W[f"layers.{l}.attn.q.weight"].astype(np.float64).reshape(N, DH, D)
            wk = W[f"layers.{l}.attn.k.weight"].astype(np.float64).reshape(N, DH, D)
            T = np.einsum("hca,hcb->ahb", wq, wk)  # T[:, h, :] = W_Q^(h) W_K^(h)ᵀ  (D × n × D)
            A = C[f"layers.{l}.attn.q.weight"].astype(np.float64).T       # D × R
            M = C[f"layers.{l}.attn.mix"].astype(np.float64)              # n × R
            K = C[f"layers.{l}.attn.k.weight"].astype(np.float64).T       # D × R
            That = np.einsum("ar,hr,br->ahb", A, M, K)
            ours = np.linalg.norm(T - That) / np.linalg.norm(T)
            check(len(printed) == L and abs(ours - printed[l]) <= 1e-4,
                  f"collab16 layer {l}: error from the checkpoint {ours:.6f} = printed {printed[l] if printed else None}")
            tl.set_backend("numpy")
            cpt = parafac(tl.tensor(T), rank=R, init="svd", n_iter_max=500, tol=1e-10, random_state=0)
            theirs = np.linalg.norm(T - tl.cp_to_tensor(cpt)) / np.linalg.norm(T)
            check(ours <= 1.05 * theirs, f"collab16 layer {l}: ours {ours:.6f} <= 1.05 x tensorly parafac {theirs:.6f}")
            bq = W[f"layers.{l}.attn.q.bias"].astype(np.float64).reshape(N, DH)
            cb = np.einsum("hc,hcb->hb", bq, wk) / np.sqrt(DH)
            check(np.allclose(C[f"layers.{l}.attn.content_bias"], cb, atol=1e-6), f"collab16 layer {l}: content bias")

        for name, args, g in (("gqa2", ("--to", "gqa", "--groups", "2"), 2), ("mqa", ("--to", "mqa"), 1)):
            out_dir, _ = convert(mha, work, name, *args)
            C = ckpt(out_dir)
            ok = True
            for l in range(L):
                for part in ("k", "v"):
                    w = W[f"layers.{l}.attn.{part}.weight"].reshape(g, N // g, DH, D).mean(axis=1).reshape(g * DH, D)
                    b = W[f"layers.{l}.attn.{part}.bias"].reshape(g, N // g, DH).mean(axis=1).reshape(g * DH)
                    ok &= np.allclose(C[f"layers.{l}.attn.{part}.weight"], w, atol=1e-6)
                    ok &= np.allclose(C[f"layers.{l}.attn.{part}.bias"], b, atol=1e-6)
                ok &= np.array_equal(C[f"layers.{l}.attn.q.weight"], W[f"layers.{l}.attn.q.weight"])
            check(ok, f"{name}: K/V are the group means of the heads, Q copied")
            x = exported_logits(out_dir, work, name)
            check(bool(torch.isfinite(x).all()), f"{name}: exported model loads in transformers, finite logits")

        rc, _, err = run("convert", cp, "--out", os.path.join(work, "again"), "--to", "mqa")
        check(rc == 2 and len(err.strip().splitlines()) == 1 and "mha" in err,
              f"converting a collab checkpoint exits 2 with one line ({err.strip()})")
    finally:
        if not failures and not os.environ.get("MHE_KEEP_CONVERT_TEST"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work dir kept:", work)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
