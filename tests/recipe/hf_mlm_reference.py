"""Trains Hugging Face's BertForMaskedLM on the same shards, windows and masking as mhetrain
(configs/README.md "The tiny recipe"), so a slow learning curve can be blamed on the recipe or on
the trainer: run it and `mhetrain train` with the same settings and compare the evaluations.

  .venv/bin/python tests/recipe/hf_mlm_reference.py --corpus corpus --steps 1000 --lr 1e-3
  .venv/bin/python tests/recipe/hf_mlm_reference.py --corpus corpus --eval-only EXPORT_DIR

Windows as data/loader.h builds them ([CLS] + 126 stream tokens + [SEP], documents joined by
[SEP]); 15% of the positions selected, 80/10/10; AdamW (weight decay off for biases and
LayerNorm), clip 1.0, linear warmup then decay; post-LN (Hugging Face's BERT), dropout 0.
Validation: every window of the split, masked once with a fixed seed; prints (loss, accuracy,
scored tokens).  --eval-only scores an exported model (`mhetrain export`) the same way.
"""
import sys, json, math, time, numpy as np, torch, argparse
from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM
ap = argparse.ArgumentParser()
ap.add_argument("--corpus", default="corpus", help="folder with tokenizer/tokenizer.json and shards/"); ap.add_argument("--steps", type=int, default=1000)
ap.add_argument("--lr", type=float, default=1e-3); ap.add_argument("--warmup", type=int, default=200)
ap.add_argument("--batch", type=int, default=32); ap.add_argument("--eval-every", type=int, default=250)
ap.add_argument("--eval-only", default=""); ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--layers", type=int, default=4); ap.add_argument("--hidden", type=int, default=128)
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
vocab = json.load(open(a.corpus + "/tokenizer/tokenizer.json"))["model"]["vocab"]
CLS, SEP, MASK, PAD = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"], vocab["[PAD]"]
V = len(vocab); T = 128
def stream(split):
    idx = open(f"{a.corpus}/shards/{split}_00000.idx", "rb").read()
    n = int(np.frombuffer(idx[18:26], np.uint64)[0])
    sizes = np.frombuffer(idx[34:34 + 4 * n], np.int32)
    toks = np.fromfile(f"{a.corpus}/shards/{split}_00000.bin", np.uint16).astype(np.int64)
    out, p = [], 0
    for s in sizes: out.append(toks[p:p + s]); out.append(np.array([SEP])); p += s
    return np.concatenate(out)
def windows(s):
    n = len(s) // (T - 2)
    w = s[: n * (T - 2)].reshape(n, T - 2)
    return np.concatenate([np.full((n, 1), CLS), w, np.full((n, 1), SEP)], 1)
def mask(x, g):
    x = x.clone(); lab = torch.full_like(x, -100)
    sel = (torch.rand(x.shape, generator=g) < 0.15); sel[:, 0] = False; sel[:, -1] = False
    lab[sel] = x[sel]; r = torch.rand(x.shape, generator=g)
    x[sel & (r < 0.8)] = MASK
    rnd = sel & (r >= 0.8) & (r < 0.9); x[rnd] = torch.randint(0, V, x.shape, generator=g)[rnd]
    return x, lab
tr = torch.from_numpy(windows(stream("train"))); va = torch.from_numpy(windows(stream("valid")))
gv = torch.Generator().manual_seed(7); vx, vl = mask(va, gv)
def evaluate(m):
    m.eval(); tot = cor = 0; loss = 0.0
    with torch.no_grad():
        for i in range(0, len(vx), 64):
            lo = m(input_ids=vx[i:i+64]).logits; l = vl[i:i+64]; s = l != -100
            loss += torch.nn.functional.cross_entropy(lo[s], l[s], reduction="sum").item()
            cor += (lo[s].argmax(-1) == l[s]).sum().item(); tot += s.sum().item()
    m.train(); return loss / tot, cor / tot, tot
if a.eval_only:
    m = AutoModelForMaskedLM.from_pretrained(a.eval_only, trust_remote_code=True); print("eval", a.eval_only, evaluate(m)); sys.exit()
cfg = BertConfig(vocab_size=V, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=4, intermediate_size=4*a.hidden,
                 max_position_embeddings=T, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, type_vocab_size=2)
m = BertForMaskedLM(cfg)
dec = [p for n, p in m.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
nod = [p for n, p in m.named_parameters() if ("bias" in n or "LayerNorm" in n)]
opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.01}, {"params": nod, "weight_decay": 0.0}], lr=a.lr)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (a.steps - s) / (a.steps - a.warmup)))
g = torch.Generator().manual_seed(1); t0 = time.time()
for step in range(1, a.steps + 1):
    b = tr[torch.randint(0, len(tr), (a.batch,), generator=g)]; x, l = mask(b, g)
    loss = m(input_ids=x, labels=l).loss; opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); sched.step()
    if step % 100 == 0: print(f"step {step} loss {loss.item():.4f} {a.batch*T*step/(time.time()-t0):.0f} tok/s", flush=True)
    if step % a.eval_every == 0: print("eval step", step, evaluate(m), flush=True)
