"""The remote code of mhetrain exports (trainer/hf/modeling_mhe.py) against transformers 4.41 (venv).

For bert and gpt x every registered attention type (items marked * on mha, mhe_mul, mhe_add, gqa
and collab only: their code is shared by every type): a small random checkpoint
(hf_make_checkpoint: every tensor non-trivial) is exported by `mhetrain export`, then
  - auto_map lists AutoModel, AutoModelFor{MaskedLM|CausalLM}, …SequenceClassification,
    …TokenClassification, …QuestionAnswering, and each loads with trust_remote_code, building the
    expected class with exactly the expected missing keys (the heads it does not hold: pooler,
    classifier / score, qa_outputs) and unexpected keys (the MLM head, for non-LM classes);
  - AutoModel's hidden states and last_hidden_state equal, bit for bit, those of the LM model
    and of every head class (same weights, eval mode);
  - get_input_embeddings() is an nn.Embedding holding the exported `mhe.embed.word.weight`;
    get_output_embeddings() of the LM class is the same Parameter (tied);
    * resize_token_embeddings(V + 8): input and output embeddings V + 8 rows and still one
    Parameter, the MLM bias padded, the logits of the old ids unchanged (≤ 1e-6 abs), a new id
    usable, config.vocab_size updated; also on the sequence classifier (outputs unchanged);
  - output_attentions=True: one [B, n, T, T] tensor per layer, every row sums to 1 (≤ 1e-5),
    padded keys (and, gpt, future keys) get probability < 1e-9, and the layer output recomputed
    from the returned probabilities and the variant's V equals the model's hidden state (≤ 1e-5);
  - * the heads: bert sequence logits = classifier(tanh(pooler(h[CLS]))) from AutoModel's output;
    gpt sequence logits of a right-padded batch = each row run alone (its last token); the losses
    of regression (MSE), single-label (CE), multi-label (BCE), token classification and QA equal
    the formulas written here with torch.nn.functional;
  - * low_cpu_mem_usage loading gives the same logits and the tie; pipeline("fill-mask" /
    "text-generation") finds the export's tokenizer by itself (config.json's tokenizer_class);
  - return_dict=False gives tuples with the same tensors; inputs_embeds = the ids' embeddings;
    * gradient_checkpointing_enable() leaves the training loss and every gradient unchanged.
For mha the same checkpoint is also exported to the stock classes: MheModel (--format mhetrain)
gives the same attentions and hidden states as transformers' own BertModel / GPT2Model
(≤ 1e-5), and AutoModelForSequenceClassification / QuestionAnswering load the stock export as
Bert… / GPT2… classes.
"""
import json
import os
import shutil

from hf_harness import check, finish, make_workdir, registered_types, sh

WORK = make_workdir("mhe_hf_auto_")  # before transformers is imported

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf
from safetensors.numpy import load_file

MHETRAIN = os.environ["MHETRAIN"]
MAKE = os.environ["MHE_MAKE_CHECKPOINT"]
# Accessors, resizing, checkpointing, pipelines and the heads' losses live in code every type
# shares: checked on these (one per family of Q/K/V sharing), the rest on every type.
DEEP = {"mha", "mhe_mul", "mhe_add", "gqa", "collab"}
torch.set_num_threads(2)




def module_types():
    """The attention modules of trainer/hf/attention: every registered type needs one."""
    src = os.environ["MHE_SOURCE_DIR"]
    return sorted(f[:-3] for f in os.listdir(os.path.join(src, "trainer/hf/attention")) if f.endswith(".py"))


def batch(arch, V, seed):
    """Three rows of lengths 11, 7, 9, right-padded, bert token types 0/1."""
    g = torch.Generator().manual_seed(seed)
    lens = [11, 7, 9]
    T = max(lens)
    ids = torch.randint(5, V, (3, T), generator=g)
    mask = torch.zeros(3, T, dtype=torch.long)
    for b, n in enumerate(lens):
        mask[b, :n] = 1
        ids[b, n:] = 0
    extra = {}
    if arch == "bert":
        tt = torch.zeros(3, T, dtype=torch.long)
        tt[:, 4:] = 1
        extra["token_type_ids"] = tt
    return ids, mask, extra, lens


def load(auto, d):
    m, info = auto.from_pretrained(d, trust_remote_code=True, output_loading_info=True)
    return m.eval(), {k: sorted(str(x) for x in info.get(k, [])) for k in ("missing_keys", "unexpected_keys",
                                                                           "mismatched_keys")}


def expected_keys(arch, cls):
    """(missing, unexpected) when an LM export loads into `cls`."""
    lm_head = ["head.bias", "head.dense.bias", "head.dense.weight", "head.ln.bias", "head.ln.weight"] if arch == "bert" else []
    pooler = ["mhe.pooler.dense.bias", "mhe.pooler.dense.weight"] if arch == "bert" else []
    table = {
        "MheForMaskedLM": ([], []),
        "MheForCausalLM": ([], []),
        "MheModel": (pooler, lm_head),  # transformers names them with the prefix
        "MheForSequenceClassification": (pooler + (["classifier.bias", "classifier.weight"] if arch == "bert"
                                                   else ["score.weight"]), lm_head),
        "MheForTokenClassification": (["classifier.bias", "classifier.weight"], lm_head),
        "MheForQuestionAnswering": (["qa_outputs.bias", "qa_outputs.weight"], lm_head),
    }
    return table[cls]


def close(a, b, tol):
    return float((a.double() - b.double()).abs().max()) <= tol


def check_attentions(name, model, out, arch, mask, lens):
    cfg = model.config
    att = out.attentions
    L, n = cfg.num_hidden_layers, cfg.num_attention_heads
    B, T = mask.shape
    check(att is not None and len(att) == L and all(tuple(a.shape) == (B, n, T, T) for a in att),
          f"{name}: output_attentions gives {L} tensors [B, n, T, T]")
    if att is None:
        return
    allowed = mask.bool()[:, None, None, :].expand(B, n, T, T)
    if arch == "gpt":
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    rows = max(float((a.sum(-1) - 1).abs().max()) for a in att)
    check(rows <= 1e-5, f"{name}: every attention row sums to 1 (max |sum - 1| {rows:.2e})")
    leak = max(float(a.masked_select(~allowed).abs().max()) for a in att)
    check(leak < 1e-9, f"{name}: padded{' and future' if arch == 'gpt' else ''} keys get probability 0 ({leak:.1e})")
    # The layer outputs, rebuilt from the returned probabilities and the variant's values.
    base = model.mhe if hasattr(model, "mhe") else model
    worst = 0.0
    with torch.no_grad():
        for l, layer in enumerate(base.layers):
            x = out.hidden_states[l]
            a_in = layer.ln1(x) if layer.pre_norm else x
            attn = layer.attn
            _, _, v, _ = attn.variant.per_head(attn, a_in, attn.heads, attn.head_dim, attn.options)
            v = v.expand(B, n, T, -1) if v.shape[1] == 1 else v
            a = attn.o(torch.matmul(att[l], v).transpose(1, 2).reshape(B, T, -1))
            if layer.pre_norm:
                h = x + a
                y = h + layer.ffn(layer.ln2(h))
            else:
                h = layer.ln1(x + a)
                y = layer.ln2(h + layer.ffn(h))
            if l == L - 1 and getattr(base, "final_ln", None) is not None:
                y = base.final_ln(y)
            # Padded query rows are excluded: nothing reads them.
            real = mask.bool()[:, :, None].expand_as(y)
            worst = max(worst, float((y - out.hidden_states[l + 1]).masked_select(real).abs().max()))
    check(worst <= 1e-5, f"{name}: layer outputs rebuilt from the returned attentions match (max abs {worst:.2e})")


def check_resize(name, d, auto, arch, ids, mask, extra):
    model, _ = load(auto, d)
    V = model.config.vocab_size
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask, **extra)
    lm = auto in (tf.AutoModelForMaskedLM, tf.AutoModelForCausalLM)
    emb = model.get_input_embeddings()
    check(isinstance(emb, torch.nn.Embedding) and emb.weight.shape[0] == V, f"{name}/{auto.__name__}: "
          "get_input_embeddings() is an nn.Embedding of the vocabulary")
    if lm:
        check(model.get_output_embeddings().weight is emb.weight, f"{name}: output embeddings tied to the input ones")
    else:
        check(model.get_output_embeddings() is None, f"{name}/{auto.__name__}: no output embeddings")
    model.resize_token_embeddings(V + 8)
    emb = model.get_input_embeddings()
    ok = emb.weight.shape[0] == V + 8 and model.config.vocab_size == V + 8
    if lm:
        out_emb = model.get_output_embeddings()
        ok = ok and out_emb.weight is emb.weight
        if arch == "bert":
            ok = ok and out_emb.bias is model.head.bias and out_emb.bias.shape[0] == V + 8
    check(ok, f"{name}/{auto.__name__}: resize_token_embeddings(V+8) resizes and keeps the tie")
    with torch.no_grad():
        after = model(input_ids=ids, attention_mask=mask, **extra)
        key = "logits" if "logits" in before else "start_logits"
        b, a = before[key], after[key]
        if lm:
            check(tuple(a.shape[:-1]) == tuple(b.shape[:-1]) and a.shape[-1] == V + 8,
                  f"{name}: logits over V+8 after the resize")
            a = a[..., :V]
        # The resized decoder is a product of another shape (V+8 columns), which may take another
        # kernel and summation order: equal to fp32 round-off of the largest logit, not absolutely.
        check(close(a, b, 1e-6 * max(1.0, float(b.abs().max()))),
              f"{name}/{auto.__name__}: outputs for the old ids unchanged by the resize")
        new_ids = ids.clone()
        new_ids[0, 1] = V + 3
        r = model(input_ids=new_ids, attention_mask=mask, **extra)[key]
        check(bool(torch.isfinite(r).all()), f"{name}/{auto.__name__}: a new token id runs")
        if lm:  # the tie holds: editing the input row changes the output column
            emb.weight[V + 3] += 1.0
            r2 = model(input_ids=ids, attention_mask=mask, **extra).logits[..., V + 3]
            check(not close(r2, after.logits[..., V + 3], 1e-3), f"{name}: output column follows the edited "
                  "input embedding row")


def check_checkpointing(name, d, ids, mask, extra):
    """gradient_checkpointing_enable(): the same loss and gradients in training mode (no dropout)."""
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)  # the same new pooler (bert) and classifier for both
        m = tf.AutoModelForSequenceClassification.from_pretrained(
            d, trust_remote_code=True, num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        if ckpt:
            m.gradient_checkpointing_enable()
        m.train()
        out = m(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 1]), **extra)
        out.loss.backward()
        grads.append((out.loss.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]))
    (l0, g0), (l1, g1) = grads
    same = len(g0) == len(g1) and all(torch.allclose(a, b, rtol=1e-5, atol=1e-7) for a, b in zip(g0, g1))
    check(torch.equal(l0, l1) and same, f"{name}: gradient checkpointing gives the same loss and gradients")


def check_heads(name, d, arch, ids, mask, extra, lens, base_out):
    g = torch.Generator().manual_seed(9)
    B, T = ids.shape
    # Sequence classification, three problem types.
    for num_labels, problem, labels in (
            (3, None, torch.tensor([0, 2, 1])),
            (1, None, torch.randn(B, generator=g)),
            (4, "multi_label_classification", (torch.rand(B, 4, generator=g) > 0.5).float())):
        kw = {"num_labels": num_labels}
        if problem:
            kw["problem_type"] = problem
        m = tf.AutoModelForSequenceClassification.from_pretrained(d, trust_remote_code=True, **kw).eval()
        with torch.no_grad():
            out = m(input_ids=ids, attention_mask=mask, labels=labels, **extra)
            h = base_out.last_hidden_state
            if arch == "bert":
                want = m.classifier(torch.tanh(m.mhe.pooler.dense(h[:, 0])))
            else:
                want = m.score(h)[torch.arange(B), torch.tensor(lens) - 1]
                # each row alone, unpadded: its last token is its end
                alone = torch.cat([m(input_ids=ids[b:b + 1, :lens[b]]).logits for b in range(B)])
                check(close(out.logits, alone, 1e-5), f"{name}: gpt sequence logits of the padded batch = each row alone")
            check(close(out.logits, want, 1e-6), f"{name}: sequence logits ({num_labels} labels) = head of AutoModel's output")
            if num_labels == 1:
                loss = F.mse_loss(out.logits.squeeze(), labels)
                kind = "regression"
            elif problem:
                loss = F.binary_cross_entropy_with_logits(out.logits, labels)
                kind = "multi-label"
            else:
                loss = F.cross_entropy(out.logits, labels)
                kind = "single-label"
            check(m.config.problem_type == (problem or ("regression" if num_labels == 1 else "single_label_classification")),
                  f"{name}: problem_type {m.config.problem_type}")
            check(close(out.loss, loss, 1e-6), f"{name}: {kind} loss as transformers defines it")
    m = tf.AutoModelForTokenClassification.from_pretrained(d, trust_remote_code=True, num_labels=5).eval()
    labels = torch.randint(0, 5, (B, T), generator=g).masked_fill(mask == 0, -100)
    with torch.no_grad():
        out = m(input_ids=ids, attention_mask=mask, labels=labels, **extra)
        want = m.classifier(base_out.last_hidden_state)
        check(close(out.logits, want, 1e-6), f"{name}: token classification logits")
        check(close(out.loss, F.cross_entropy(want.reshape(-1, 5), labels.reshape(-1), ignore_index=-100), 1e-6),
              f"{name}: token classification loss (padding ignored)")
    m = tf.AutoModelForQuestionAnswering.from_pretrained(d, trust_remote_code=True).eval()
    sp, ep = torch.tensor([1, 2, 3]), torch.tensor([4, 2, 30])  # 30 > T: ignored, as transformers does
    with torch.no_grad():
        out = m(input_ids=ids, attention_mask=mask, start_positions=sp, end_positions=ep, **extra)
        want = m.qa_outputs(base_out.last_hidden_state)
        check(close(out.start_logits, want[..., 0], 1e-6) and close(out.end_logits, want[..., 1], 1e-6),
              f"{name}: QA start/end logits")
        ref = (F.cross_entropy(want[..., 0], sp) + F.cross_entropy(want[..., 1], ep.clamp(0, T), ignore_index=T)) / 2
        check(close(out.loss, ref, 1e-6), f"{name}: QA loss (positions beyond T ignored)")
        tup = m(input_ids=ids, attention_mask=mask, return_dict=False, **extra)
        check(isinstance(tup, tuple) and torch.equal(tup[0], out.start_logits), f"{name}: return_dict=False tuple")


def check_export(name, d, arch):
    cfg = json.load(open(os.path.join(d, "config.json")))
    lm_auto = "AutoModelForMaskedLM" if arch == "bert" else "AutoModelForCausalLM"
    autos = ["AutoModel", lm_auto, "AutoModelForSequenceClassification", "AutoModelForTokenClassification",
             "AutoModelForQuestionAnswering"]
    check(sorted(cfg["auto_map"]) == sorted(autos + ["AutoConfig"]), f"{name}: auto_map lists the six classes")
    weights = load_file(os.path.join(d, "model.safetensors"))
    V = cfg["vocab_size"]
    ids, mask, extra, lens = batch(arch, V, 5)
    models = {}
    for auto in autos:
        m, info = load(getattr(tf, auto), d)
        cls = type(m).__name__
        models[cls] = m
        want_cls = cfg["auto_map"][auto].split(".")[1]
        miss, unexp = expected_keys(arch, cls)
        check(cls == want_cls, f"{name}: {auto} builds {cls}")
        check(info["missing_keys"] == sorted(miss) and info["unexpected_keys"] == sorted(unexp)
              and not info["mismatched_keys"],
              f"{name}: {auto} keys: missing {info['missing_keys']} unexpected {info['unexpected_keys']}")
    base = models["MheModel"]
    with torch.no_grad():
        out = base(input_ids=ids, attention_mask=mask, output_hidden_states=True, output_attentions=True, **extra)
        emb = base.get_input_embeddings()
        check(isinstance(emb, torch.nn.Embedding) and np.array_equal(emb.weight.numpy(), weights["mhe.embed.word.weight"]),
              f"{name}: AutoModel's input embeddings are the exported word embeddings")
        L = cfg["num_hidden_layers"]
        check(len(out.hidden_states) == L + 1 and torch.equal(out.hidden_states[-1], out.last_hidden_state),
              f"{name}: hidden_states = embeddings + {L} layers, the last = last_hidden_state")
        if arch == "bert":
            check(out.pooler_output is not None and tuple(out.pooler_output.shape) == (3, cfg["hidden_size"]),
                  f"{name}: AutoModel gives pooler_output")
        for cls, m in models.items():
            if cls == "MheModel":
                continue
            o = m(input_ids=ids, attention_mask=mask, output_hidden_states=True, **extra)
            same = all(torch.equal(a, b) for a, b in zip(o.hidden_states, out.hidden_states))
            check(same and len(o.hidden_states) == L + 1, f"{name}: {cls} hidden states equal AutoModel's")
        tup = base(input_ids=ids, attention_mask=mask, return_dict=False, **extra)
        check(torch.equal(tup[0], out.last_hidden_state), f"{name}: AutoModel return_dict=False")
        by_vectors = base(inputs_embeds=emb(ids), attention_mask=mask, **extra).last_hidden_state
        check(torch.equal(by_vectors, out.last_hidden_state), f"{name}: inputs_embeds = input_ids")
    check_attentions(name, base, out, arch, mask, lens)
    lm_cls = "MheForMaskedLM" if arch == "bert" else "MheForCausalLM"
    with torch.no_grad():
        o = models[lm_cls](input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True,
                           **extra)
    check_attentions(name + "/" + lm_cls, models[lm_cls], o, arch, mask, lens)
    if name.split("_", 1)[1] not in DEEP:
        return
    for auto in (getattr(tf, lm_auto), tf.AutoModelForSequenceClassification):
        check_resize(name, d, auto, arch, ids, mask, extra)
    lazy = getattr(tf, lm_auto).from_pretrained(d, trust_remote_code=True, low_cpu_mem_usage=True).eval()
    with torch.no_grad():
        same = torch.equal(lazy(input_ids=ids, attention_mask=mask, **extra).logits,
                           models[lm_cls](input_ids=ids, attention_mask=mask, **extra).logits)
    check(same and lazy.get_output_embeddings().weight is lazy.get_input_embeddings().weight,
          f"{name}: low_cpu_mem_usage loading gives the same model, tied")
    task = "fill-mask" if arch == "bert" else "text-generation"
    text = "the cat sat on the [MASK]." if arch == "bert" else "the cat sat on the"
    pipe = tf.pipeline(task, model=d, trust_remote_code=True)  # finds the tokenizer by itself
    res = pipe(text, **({"max_new_tokens": 2, "do_sample": False} if arch == "gpt" else {}))
    check(bool(res), f"{name}: pipeline({task!r}) runs: {str(res[0])[:60]}")
    check_checkpointing(name, d, ids, mask, extra)
    check_heads(name, d, arch, ids, mask, extra, lens, out)


def check_stock(name, d_hf, d_mhe, arch):
    """mha: the stock export (Bert/GPT-2 classes) against the remote code on the same weights."""
    V = json.load(open(os.path.join(d_hf, "config.json")))["vocab_size"]
    ids, mask, extra, lens = batch(arch, V, 6)
    stock = tf.AutoModel.from_pretrained(d_hf).eval()
    ours = tf.AutoModel.from_pretrained(d_mhe, trust_remote_code=True).eval()
    with torch.no_grad():
        s = stock(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True, **extra)
        o = ours(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True, **extra)
    real = mask.bool()[:, :, None]
    att = max(float((a - b).abs().max()) for a, b in zip(s.attentions, o.attentions))
    check(att <= 1e-5, f"{name}: attentions equal {type(stock).__name__}'s (max abs {att:.2e})")
    hid = max(float((a - b).masked_select(real).abs().max() / b.masked_select(real).abs().max())
              for a, b in zip(s.hidden_states, o.hidden_states))
    check(hid <= 1e-5, f"{name}: hidden states equal {type(stock).__name__}'s (max rel {hid:.2e})")
    for auto, want in ((tf.AutoModelForSequenceClassification, "ForSequenceClassification"),
                       (tf.AutoModelForQuestionAnswering, "ForQuestionAnswering")):
        m = auto.from_pretrained(d_hf)
        check(type(m).__name__.endswith(want), f"{name}: stock export loads as {type(m).__name__}")


def main():
    work = WORK
    types = registered_types(MHETRAIN)
    check(DEEP <= set(types), f"the deep-checked types are registered ({types})")
    check(set(types) <= set(module_types()), f"every registered type has a module in trainer/hf/attention ({module_types()})")
    try:
        for arch in ("bert", "gpt"):
            for i, t in enumerate(types):
                name = f"{arch}_{t}"
                run = os.path.join(work, "runs", name)
                sh(MAKE, arch, t, run, str(100 + i), "random")
                d = os.path.join(work, name)
                sh(MHETRAIN, "export", run, "--out", d, "--format", "mhetrain")
                check_export(name, d, arch)
                if t == "mha":
                    d_hf = d + "_stock"
                    sh(MHETRAIN, "export", run, "--out", d_hf)
                    check_stock(name, d_hf, d, arch)
                shutil.rmtree(d, ignore_errors=True)
                shutil.rmtree(run, ignore_errors=True)
    finally:
        finish(work)


if __name__ == "__main__":
    main()
