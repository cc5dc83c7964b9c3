"""Trains Hugging Face's BertForQuestionAnswering on a SQuAD v2.0 file (the blank task of
tests/finetune/make_tasks.py) with the windows and optimizer `mhetrain finetune` uses, so a task
that mhetrain does not learn can be blamed on the task and budget or on the trainer: run both
with the same settings and compare the dev loss and scores.

  .venv/bin/python tests/recipe/hf_span_reference.py --tokenizer corpus/tokenizer/tokenizer.json \
      --train tasks/blank/train.json --dev tasks/blank/dev.json --epochs 1 --lr 1e-3
  ... --init EXPORT_DIR     start from an exported pretrained model (`mhetrain export`; remote
                            code for the non-mha types) instead of random weights

Features as trainer/task builds them: [CLS] question (<= max_query_len tokens) [SEP] context
window [SEP], windows of max_seq - query - 3 context tokens every doc_stride tokens (half a
window), a window without the answer labelled [CLS].  Prediction: the best span (start <= end,
length <= 30) over the windows, "" when the smallest [CLS] score beats it (squad2).  Exact match
and F1 as SQuAD's v2.0 script computes them.  Post-LN (Hugging Face's BERT), dropout 0, AdamW
without decay on biases and LayerNorm, clip 1.0, linear warmup then decay.
"""
import argparse, collections, json, re, string, sys, time
import torch
from transformers import BertConfig, BertForQuestionAnswering, AutoModelForQuestionAnswering, PreTrainedTokenizerFast

ap = argparse.ArgumentParser()
ap.add_argument("--tokenizer", required=True); ap.add_argument("--train", required=True); ap.add_argument("--dev", required=True)
ap.add_argument("--init", default=""); ap.add_argument("--epochs", type=float, default=1); ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--warmup", type=int, default=30); ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--eval-every", type=int, default=400); ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--layers", type=int, default=4); ap.add_argument("--hidden", type=int, default=128)
ap.add_argument("--max-seq", type=int, default=128); ap.add_argument("--max-query", type=int, default=32)
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(0)
tok = PreTrainedTokenizerFast(tokenizer_file=a.tokenizer)
V = tok.backend_tokenizer.get_vocab_size()
CLS, SEP, PAD = (tok.backend_tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
T, window = a.max_seq, a.max_seq - a.max_query - 3
stride = max(1, window // 2)

def examples(path):
    out = []
    for art in json.load(open(path))["data"]:
        for p in art["paragraphs"]:
            for qa in p["qas"]:
                ans = qa["answers"][0] if qa["answers"] else None
                out.append((p["context"], qa["question"], ans, [x["text"] for x in qa["answers"]]))
    return out

def features(exs):
    feats = []  # (example index, ids, type ids, start, end, context offsets of the window's tokens)
    for k, (ctx, q, ans, _) in enumerate(exs):
        qi = tok.backend_tokenizer.encode(q, add_special_tokens=False).ids[: a.max_query]
        ce = tok.backend_tokenizer.encode(ctx, add_special_tokens=False)
        cids, offs = ce.ids, ce.offsets
        a0 = a1 = None
        if ans:
            cs, c_e = ans["answer_start"], ans["answer_start"] + len(ans["text"])
            inside = [i for i, (s, e) in enumerate(offs) if s < c_e and e > cs]
            a0, a1 = inside[0], inside[-1]
        start = 0
        while True:
            n = min(window, len(cids) - start)
            ids = [CLS] + qi + [SEP] + cids[start:start + n] + [SEP]
            types = [0] * (len(qi) + 2) + [1] * (n + 1)
            off0 = len(qi) + 2
            s = e = 0
            if a0 is not None and start <= a0 and a1 < start + n:
                s, e = off0 + a0 - start, off0 + a1 - start
            feats.append((k, ids + [PAD] * (T - len(ids)), types + [0] * (T - len(types)), s, e,
                          [None] * off0 + offs[start:start + n] + [None] * (T - off0 - n), len(ids)))
            if start + n >= len(cids): break
            start += stride
    return feats

def normalize(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())

def f1(pred, gold):
    p, g = normalize(pred).split(), normalize(gold).split()
    if not p or not g: return float(p == g)
    common = sum((collections.Counter(p) & collections.Counter(g)).values())
    if common == 0: return 0.0
    pr, rc = common / len(p), common / len(g)
    return 2 * pr * rc / (pr + rc)

def tensors(feats):
    return (torch.tensor([f[1] for f in feats]), torch.tensor([f[2] for f in feats]),
            torch.tensor([f[3] for f in feats]), torch.tensor([f[4] for f in feats]),
            torch.tensor([[1] * f[6] + [0] * (T - f[6]) for f in feats]))

tr_ex, dv_ex = examples(a.train), examples(a.dev)
tr_f, dv_f = features(tr_ex), features(dv_ex)
tr, dv = tensors(tr_f), tensors(dv_f)
print(f"hf_span_reference: {len(tr_ex)} train examples -> {len(tr_f)} features, {len(dv_ex)} dev -> {len(dv_f)}", flush=True)

def evaluate(m):
    m.eval(); loss = 0.0; best = {}
    with torch.no_grad():
        for i in range(0, len(dv_f), 64):
            out = m(input_ids=dv[0][i:i+64], token_type_ids=dv[1][i:i+64], attention_mask=dv[4][i:i+64],
                    start_positions=dv[2][i:i+64], end_positions=dv[3][i:i+64])
            loss += out.loss.item() * len(dv[0][i:i+64])
            for j in range(len(dv[0][i:i+64])):
                f = dv_f[i + j]; st, en = out.start_logits[j].tolist(), out.end_logits[j].tolist()
                k = f[0]; b = best.setdefault(k, [None, -1e30, ""])
                null = st[0] + en[0]
                b[0] = null if b[0] is None else min(b[0], null)
                ctx_pos = [p for p in range(T) if f[5][p] is not None]
                for x in ctx_pos:
                    for y in ctx_pos:
                        if x <= y < x + 30 and st[x] + en[y] > b[1]:
                            b[1] = st[x] + en[y]; b[2] = dv_ex[k][0][f[5][x][0]:f[5][y][1]]
    em = f1s = 0.0; has_em = n_has = 0
    for k, (ctx, q, ans, golds) in enumerate(dv_ex):
        null, score, text = best[k]
        pred = "" if null > score else text
        gs = golds or [""]
        e = max(float(normalize(pred) == normalize(g)) for g in gs); em += e
        f1s += max(f1(pred, g) for g in gs)
        if golds: has_em += e; n_has += 1
    m.train(); n = len(dv_ex)
    return loss / len(dv_f), 100 * em / n, 100 * f1s / n, 100 * has_em / max(1, n_has)

if a.init:
    m = AutoModelForQuestionAnswering.from_pretrained(a.init, trust_remote_code=True)
else:
    m = BertForQuestionAnswering(BertConfig(vocab_size=V, hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=4,
                                            intermediate_size=4 * a.hidden, max_position_embeddings=T, hidden_dropout_prob=0.0,
                                            attention_probs_dropout_prob=0.0, type_vocab_size=2))
dec = [p for n, p in m.named_parameters() if not ("bias" in n or "LayerNorm" in n or "norm" in n.lower())]
nod = [p for n, p in m.named_parameters() if ("bias" in n or "LayerNorm" in n or "norm" in n.lower())]
opt = torch.optim.AdamW([{"params": dec, "weight_decay": 0.01}, {"params": nod, "weight_decay": 0.0}], lr=a.lr)
steps = int(a.epochs * len(tr_f) / a.batch)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / a.warmup if s < a.warmup else max(0.0, (steps - s) / (steps - a.warmup)))
g = torch.Generator().manual_seed(1); t0 = time.time(); order = torch.randperm(len(tr_f), generator=g); pos = 0
for step in range(1, steps + 1):
    if pos + a.batch > len(order): order = torch.randperm(len(tr_f), generator=g); pos = 0
    idx = order[pos:pos + a.batch]; pos += a.batch
    loss = m(input_ids=tr[0][idx], token_type_ids=tr[1][idx], attention_mask=tr[4][idx],
             start_positions=tr[2][idx], end_positions=tr[3][idx]).loss
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); sched.step()
    if step % 50 == 0: print(f"step {step}/{steps} loss {loss.item():.4f} {time.time() - t0:.0f} s", flush=True)
    if step % a.eval_every == 0 or step == steps:
        l, em, f, hem = evaluate(m)
        print(f"eval step {step}: dev loss {l:.4f} | squad_em {em:.2f} squad_f1 {f:.2f} has_ans_em {hem:.2f}", flush=True)
