"""mhetrain import against Hugging Face transformers (venv 4.41.2), the oracle nobody here wrote.

Per case a small random model is built by transformers (no download), saved with
save_pretrained (safetensors; one case sharded with an index), imported with `mhetrain import`,
exported again with `mhetrain export`, then:
  - every tensor of the export equals the original's bit for bit (same names, dtypes, shapes;
    tied / non-persistent tensors aside), and
  - transformers' logits of the export equal the original model's: rel = ‖a − b‖/‖b‖ ≤ 1e-5
    (bit-equal tensors give 0; the bound is the issue's).
  - `mhetrain eval`-style use: `mhetrain params RUN/config.yaml` accepts the written config.
Bad inputs (pickled pytorch_model.bin only, relative position embeddings, a missing tensor,
a misshapen tensor): exit 2 and one stderr line naming the file and the tensor / key.
Half precision: fp16 and bf16 folders (as many public checkpoints are) import, the summary names
the dtype, and every weight equals the half value widened by torch (bit for bit, fp16 subnormals
and the largest half included).  Output folders: a non-empty --out is refused without --force
and left as it was; --force replaces it whole; --out holding the source is refused.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.numpy import load_file, save_file
import transformers as tf

MHETRAIN = os.environ["MHETRAIN"]
SHARED = os.path.join(os.environ.get("MHE_SOURCE_DIR", "."), "..", "shared", "data", "tokenizers")
REL_TOL = 1e-5
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(*args):
    p = subprocess.run([MHETRAIN, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            # Non-trivial everywhere (biases, LayerNorms too) so a misplaced tensor shows.
            p.copy_(0.2 * torch.randn(p.shape, generator=g) + (1.0 if "LayerNorm.weight" in name or "ln_" in name and name.endswith("weight") else 0.0))
    model.tie_weights()
    return model


def bert(kind="mlm"):
    cfg = tf.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=48, max_position_embeddings=40, type_vocab_size=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return randomize((tf.BertForMaskedLM if kind == "mlm" else tf.BertModel)(cfg), 1)


def gpt2(act="gelu_new"):
    cfg = tf.GPT2Config(vocab_size=50257, n_positions=40, n_embd=32, n_layer=2, n_head=4, n_inner=None,
                        activation_function=act, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return randomize(tf.GPT2LMHeadModel(cfg), 2)


def save(model, d, arch, **kw):
    model.save_pretrained(d, safe_serialization=True, **kw)
    if arch == "bert":
        tok = tf.BertTokenizerFast(os.path.join(SHARED, "bert-base-uncased-vocab.txt"))
    else:
        tok = tf.GPT2TokenizerFast(os.path.join(SHARED, "gpt2-vocab.json"), os.path.join(SHARED, "gpt2-merges.txt"))
    tok.save_pretrained(d)


def all_tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def logits(model, arch):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, model.config.vocab_size, (2, 17), generator=g)
    with torch.no_grad():
        if arch == "bert":
            tt = torch.zeros_like(ids)
            tt[:, 9:] = 1
            return model(input_ids=ids, token_type_ids=tt).logits
        return model(input_ids=ids).logits


def roundtrip(name, model, arch, work, **save_kw):
    src, run_dir, exp = (os.path.join(work, name, x) for x in ("hf", "run", "export"))
    save(model, src, arch, **save_kw)
    rc, out, err = run("import", src, "--out", run_dir)
    check(rc == 0, f"{name}: import exits 0 ({err.strip()})")
    if rc:
        return
    rc, out, err = run("params", os.path.join(run_dir, "config.yaml"))
    check(rc == 0, f"{name}: params accepts the imported config.yaml ({err.strip()})")
    rc, out, err = run("export", run_dir, "--out", exp)
    check(rc == 0, f"{name}: export of the import exits 0 ({err.strip()})")
    if rc:
        return
    a, b = all_tensors(src), all_tensors(exp)
    skip = lambda k: k.startswith("pooler.") or k.endswith("position_ids")
    a = {k: v for k, v in a.items() if not skip(k)}
    if arch == "bert" and not any(k.startswith("bert.") for k in a):  # BertModel: no prefix
        a = {"bert." + k: v for k, v in a.items()}
        b = {k: v for k, v in b.items() if not k.startswith("cls.")}  # head initialised fresh
    check(set(a) == set(b), f"{name}: same tensor names (only in HF: {sorted(set(a) - set(b))[:3]}, "
                            f"only in export: {sorted(set(b) - set(a))[:3]})")
    same = all(k in b and a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
               for k in a)
    check(same, f"{name}: every tensor bit-identical after import + export")
    if isinstance(model, tf.BertModel):
        return
    cls = tf.BertForMaskedLM if arch == "bert" else tf.GPT2LMHeadModel
    theirs = cls.from_pretrained(exp).eval()
    x, y = logits(theirs, arch), logits(model.eval(), arch)
    rel = float((x - y).norm() / y.norm())
    check(rel <= REL_TOL, f"{name}: logits of the export vs the original, rel {rel:.2e} <= {REL_TOL}")


def half_roundtrip(name, arch, dtype, work):
    from safetensors.torch import load_file as load_torch
    src, run_dir, exp = (os.path.join(work, name, x) for x in ("hf", "run", "export"))
    model = (bert() if arch == "bert" else gpt2()).to(dtype)
    if dtype == torch.float16:  # the conversion's edge cases: subnormals, -0, the largest half
        special = torch.tensor([2.0 ** -24, -(2.0 ** -24) * 3, 2.0 ** -15, -0.0, 65504.0, 2.0 ** -14],
                               dtype=dtype)
        name_b = "bert.embeddings.LayerNorm.bias" if arch == "bert" else "transformer.ln_f.bias"
        with torch.no_grad():
            model.get_parameter(name_b)[:len(special)] = special
    save(model, src, arch)
    rc, out, err = run("import", src, "--out", run_dir)
    tag = "F16" if dtype == torch.float16 else "BF16"
    check(rc == 0 and f"weights: {tag}, widened to fp32 exactly" in out,
          f"{name}: import exits 0 and names {tag} ({rc}: {err.strip()} {out.strip()[-120:]})")
    if rc:
        return
    rc, out, err = run("export", run_dir, "--out", exp)
    check(rc == 0, f"{name}: export of the import exits 0 ({err.strip()})")
    if rc:
        return
    a, b = load_torch(os.path.join(src, "model.safetensors")), load_torch(os.path.join(exp, "model.safetensors"))
    a = {k: v for k, v in a.items() if not k.endswith("position_ids")}
    same = set(a) <= set(b) and all(b[k].dtype == torch.float32 and torch.equal(a[k].float(), b[k]) and
                                    torch.equal(torch.signbit(a[k].float()), torch.signbit(b[k])) for k in a)
    check(same, f"{name}: every exported fp32 tensor equals the {tag} value widened by torch, bit for bit")


def out_folders(work):
    src, run_dir = os.path.join(work, "force", "hf"), os.path.join(work, "force", "run")
    save(bert(), src, "bert")
    os.makedirs(run_dir)
    with open(os.path.join(run_dir, "notes.txt"), "w") as f:
        f.write("mine")
    rc, out, err = run("import", src, "--out", run_dir)
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 2 and len(lines) == 1 and "not empty" in err and "--force" in err and run_dir in err,
          f"force: a non-empty --out is refused with one line naming it and --force ({rc}: {err.strip()})")
    check(sorted(os.listdir(run_dir)) == ["notes.txt"] and
          not [f for f in os.listdir(os.path.dirname(run_dir)) if ".partial" in f],
          "force: the refused folder is untouched and no staging folder is left")
    rc, out, err = run("import", src, "--out", run_dir, "--force")
    check(rc == 0 and not os.path.exists(os.path.join(run_dir, "notes.txt")) and
          os.path.isfile(os.path.join(run_dir, "checkpoints", "step_00000000", "model.safetensors")),
          f"force: --force replaces the folder whole ({rc}: {err.strip()})")
    rc, out, err = run("import", src, "--out", os.path.dirname(src), "--force")
    check(rc == 2 and "holds the folder being imported" in err and os.path.isfile(os.path.join(src, "config.json")),
          f"force: --out holding the source is refused and the source kept ({rc}: {err.strip()})")


def bad(name, work, mutate, expect):
    src, run_dir = os.path.join(work, name, "hf"), os.path.join(work, name, "run")
    save(gpt2() if "gpt" in name else bert(), src, "gpt" if "gpt" in name else "bert")
    mutate(src)
    rc, out, err = run("import", src, "--out", run_dir)
    lines = [l for l in err.splitlines() if l.strip()]
    check(rc == 2 and len(lines) == 1 and all(e in err for e in expect),
          f"{name}: exit 2 with one line naming {expect} (got {rc}: {err.strip()})")


def to_pickle(d):
    m = tf.GPT2LMHeadModel.from_pretrained(d)
    os.remove(os.path.join(d, "model.safetensors"))
    torch.save(m.state_dict(), os.path.join(d, "pytorch_model.bin"))


def dup_vocab(d):
    os.remove(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "vocab.txt"), "a") as f:
        f.write("[PAD]\n")


def edit_config(key, value):
    def f(d):
        p = os.path.join(d, "config.json")
        c = json.load(open(p))
        c[key] = value
        json.dump(c, open(p, "w"))
    return f


def edit_tensor(name, fn):
    def f(d):
        p = os.path.join(d, "model.safetensors")
        t = load_file(p)
        fn(t, name)
        save_file(t, p, metadata={"format": "pt"})
    return f


def main():
    work = tempfile.mkdtemp(prefix="mhe_import_")
    try:
        torch.manual_seed(0)
        roundtrip("bert_mlm", bert(), "bert", work)
        roundtrip("bert_model", bert("model"), "bert", work)
        roundtrip("gpt2", gpt2(), "gpt", work)
        roundtrip("gpt2_erf_sharded", gpt2("gelu"), "gpt", work, max_shard_size="2MB")
        check(os.path.exists(os.path.join(work, "gpt2_erf_sharded", "hf", "model.safetensors.index.json")),
              "gpt2_erf_sharded: the source really is sharded")
        half_roundtrip("bert_fp16", "bert", torch.float16, work)
        half_roundtrip("gpt2_bf16", "gpt", torch.bfloat16, work)
        out_folders(work)
        bad("bad_gpt_pickle", work, to_pickle, ["pytorch_model.bin", "safetensors"])
        # The tokenizer is checked in the user's folder: the message names that file, not a copy.
        bad("bad_bert_vocab", work, dup_vocab, [os.path.join(work, "bad_bert_vocab", "hf", "vocab.txt"),
                                                "duplicate token"])
        bad("bad_bert_relative", work, edit_config("position_embedding_type", "relative_key"),
            ["config.json", "position_embedding_type"])
        bad("bad_bert_missing", work,
            edit_tensor("bert.encoder.layer.1.attention.self.key.bias", lambda t, n: t.pop(n)),
            ["model.safetensors", "bert.encoder.layer.1.attention.self.key.bias", "missing"])
        bad("bad_gpt_misshapen", work,
            edit_tensor("transformer.h.0.mlp.c_fc.weight", lambda t, n: t.__setitem__(n, t[n][:, :-1].copy())),
            ["model.safetensors", "transformer.h.0.mlp.c_fc.weight", "shape"])
    finally:
        if not failures and not os.environ.get("MHE_KEEP_IMPORT_TEST"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("work dir kept:", work)
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
