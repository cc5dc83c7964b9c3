"""SQuAD featurisation and span prediction against Hugging Face's reference implementation of
BERT's run_squad: transformers.data.processors.squad.squad_convert_examples_to_features with the
slow BertTokenizer on bert-base-uncased's vocab.txt (windows, input ids, token types, answer
start/end positions, max-context flags, token-to-word maps), and
transformers.data.metrics.squad_metrics.compute_predictions_logits (n_best = every position, so
its search is exhaustive as ours) on random logits: the predicted answer texts.  Then the pair
rows of classification (glue_convert_examples_to_features: [CLS] a [SEP] b [SEP], longest-first
truncation) and the GPT layouts (a <|endoftext|> b, question <|endoftext|> context)."""
import json
import os
import random
import struct
import warnings

warnings.simplefilter("ignore")
import transformers  # noqa: E402
from transformers.data.metrics import squad_metrics  # noqa: E402
from transformers.data.processors import glue as hf_glue  # noqa: E402
from transformers.data.processors import squad as hf_squad  # noqa: E402

transformers.logging.set_verbosity_error()
import ftlib  # noqa: E402
from ftlib import check, dump, write_config  # noqa: E402

rng = random.Random(3)
work = ftlib.workdir("squadfeat")
bert = transformers.BertTokenizer(ftlib.BERT_VOCAB, do_lower_case=True)
WORDS = [w for w in ftlib.WORDS if w not in ("emoji😀",)] + ["preposterously", "antidisestablishment",
                                                           "tokenization", "hippopotamus"]


def squad_data(v2, n_par, long_ctx):
    paras, qid = [], 0
    for _ in range(n_par):
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, long_ctx))]
        ctx = " ".join(words)
        qas = []
        for _ in range(rng.randint(1, 3)):
            qid += 1
            if v2 and rng.random() < 0.3:
                qas.append({"id": f"q{qid}", "question": ftlib.sentence(rng, 1, 30) + "?", "answers": [],
                            "is_impossible": True})
                continue
            i = rng.randrange(len(words))
            j = min(len(words), i + rng.randint(1, 5))
            start = len(" ".join(words[:i])) + (1 if i else 0)
            text = " ".join(words[i:j])
            if rng.random() < 0.3 and len(text) > 3:  # an answer inside a word: "(1895)." -> "1895"
                a, b = sorted(rng.sample(range(len(text) + 1), 2))
                text, start = text[a:b].strip(), start + a + (len(text[a:b]) - len(text[a:b].lstrip()))
                if not text:
                    text, start = words[i], len(" ".join(words[:i])) + (1 if i else 0)
            qa = {"id": f"q{qid}", "question": ftlib.sentence(rng, 1, 30) + "?",
                  "answers": [{"text": text, "answer_start": start}]}
            if v2:
                qa["is_impossible"] = False
            qas.append(qa)
        paras.append({"context": ctx, "qas": qas})
    return {"version": "v2.0" if v2 else "1.1", "data": [{"title": "t", "paragraphs": paras}]}


def f32(path, values):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


def ws(s):
    return " ".join(s.split())


for v2, max_seq, q_len, stride, max_ans in ((False, 64, 12, 16, 30), (True, 96, 20, 24, 8), (True, 48, 8, 30, 5)):
    fmt = "squad2" if v2 else "squad1"
    d = os.path.join(work, f"{fmt}-{max_seq}")
    os.makedirs(d)
    with open(os.path.join(d, "train.json"), "w") as f:
        json.dump(squad_data(v2, 12, 150), f, ensure_ascii=False)
    cfg = write_config(os.path.join(d, "c.yaml"), {
        "type": "span", "format": fmt, "train_file": os.path.join(d, "train.json"),
        "dev_file": os.path.join(d, "train.json"), "max_query_len": q_len, "doc_stride": stride,
        "max_answer_len": max_ans}, max_seq=max_seq)
    ours = dump("features", cfg, "train")["features"]
    proc = hf_squad.SquadV2Processor() if v2 else hf_squad.SquadV1Processor()
    examples = proc.get_train_examples(d, filename="train.json")
    hf = hf_squad.squad_convert_examples_to_features(examples, bert, max_seq_length=max_seq, doc_stride=stride,
                                                      max_query_length=q_len, is_training=True,
                                                      return_dataset=False, threads=1, tqdm_enabled=False)
    check(len(ours) == len(hf), f"{fmt}: {len(ours)} windows, HF {len(hf)}")
    bad = 0
    for o, h in zip(ours, hf):
        n = len(o["ids"])
        ctx_pos = list(range(o["ctx_off"], o["ctx_off"] + o["ctx_len"]))
        ok = (o["example"] == h.example_index and o["ids"] == h.input_ids[:n] and all(t == 0 for t in h.input_ids[n:])
              and o["type_ids"] == h.token_type_ids[:n] and o["mask"] == h.attention_mask
              and (o["start"], o["end"]) == (h.start_position, h.end_position)
              and sorted(h.token_is_max_context) == ctx_pos
              and o["max_context"] == [int(h.token_is_max_context[p]) for p in ctx_pos]
              and o["tok_to_word"] == [h.token_to_orig_map[p] for p in ctx_pos])
        if not ok and bad < 3:
            check(False, f"{fmt} window of example {o['example']}: ours {o} vs HF {vars(h)}")
        bad += not ok
    check(bad == 0, f"{fmt}: {bad} of {len(ours)} windows differ from HF")
    answered = sum(1 for o in ours if o["start"] > 0)
    print(f"{fmt} max_seq {max_seq} stride {stride}: {len(ours)} windows of {len(examples)} questions equal HF's "
          f"squad_convert_examples_to_features ({answered} hold their answer)")

    # Predictions from random logits (some windows with a strong null score) against HF.
    T = max_seq
    vals = [rng.gauss(0, 2) for _ in range(len(ours) * T * 2)]
    strong_null = {e for e in range(len(examples)) if rng.random() < 0.4}
    for f in range(len(ours)):  # every window of some questions favours "no answer"
        if ours[f]["example"] in strong_null:
            vals[f * T * 2] += rng.uniform(4, 12)
            vals[f * T * 2 + 1] += rng.uniform(4, 12)
    f32(os.path.join(d, "out.f32"), vals)
    r = dump("score", cfg, os.path.join(d, "out.f32"), f"task.dev_file={os.path.join(d, 'train.json')}")
    dev_examples = proc.get_dev_examples(d, filename="train.json")
    dev_feats = hf_squad.squad_convert_examples_to_features(dev_examples, bert, max_seq_length=max_seq,
                                                             doc_stride=stride, max_query_length=q_len,
                                                             is_training=False, return_dataset=False, threads=1,
                                                             tqdm_enabled=False)
    check(len(dev_feats) == len(ours), f"{fmt}: HF dev windows {len(dev_feats)} vs {len(ours)}")
    results = []
    for f, feat in enumerate(dev_feats):
        o = vals[f * T * 2:(f + 1) * T * 2]
        results.append(hf_squad.SquadResult(feat.unique_id, o[0::2], o[1::2]))
    hf_pred = squad_metrics.compute_predictions_logits(dev_examples, dev_feats, results, T, max_ans, True, None,
                                                       None, None, False, v2, 0.0, bert)
    # Compared without case: HF's get_final_text projects the answer onto the first occurrence of
    # its lowercased text in the words ("s" of "Smith's" comes back as "S"); the texts agree.
    diff = [(k, r["predictions"][k], hf_pred[k]) for k in hf_pred
            if ws(r["predictions"][k]).lower() != ws(hf_pred[k]).lower()]
    for k, a, b in diff[:5]:
        check(False, f"{fmt} question {k}: ours {a!r}, HF {b!r}")
    check(not diff, f"{fmt}: {len(diff)} of {len(hf_pred)} predictions differ from HF")
    ex_, f1_ = squad_metrics.get_raw_scores(dev_examples, hf_pred)
    em_hf = 100 * sum(ex_.values()) / len(ex_)
    check(abs(r["scores"]["squad_em"] - em_hf) < 1e-9, f"{fmt}: EM {r['scores']['squad_em']} vs HF {em_hf}")
    n_null = sum(1 for v in hf_pred.values() if v == "")
    print(f"{fmt}: {len(hf_pred)} predicted answers equal compute_predictions_logits ({n_null} no-answer), "
          f"EM {em_hf:.2f}")

# Pair rows: BERT vs glue_convert_examples_to_features, truncation included.
d = os.path.join(work, "mrpc")
os.makedirs(d)
with open(os.path.join(d, "train.tsv"), "w") as f:
    f.write("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
    for i in range(60):
        f.write(f"{rng.choice('01')}\t1\t2\t{ftlib.sentence(rng, 1, 40)}\t{ftlib.sentence(rng, 1, 40)}\n")
sst = os.path.join(work, "sst2")
os.makedirs(sst)
with open(os.path.join(sst, "train.tsv"), "w") as f:
    f.write("sentence\tlabel\n" + "".join(f"{ftlib.sentence(rng, 1, 60)}\t{rng.choice('01')}\n" for _ in range(30)))
cfg = write_config(os.path.join(d, "c.yaml"), {"type": "classification", "format": "mrpc",
                                                "train_file": os.path.join(d, "train.tsv"),
                                                "dev_file": os.path.join(d, "train.tsv")}, max_seq=48)
ours = dump("features", cfg, "train")["features"]
hf = hf_glue.glue_convert_examples_to_features(hf_glue.MrpcProcessor().get_train_examples(d), bert, max_length=48,
                                               task="mrpc")
bad = sum(1 for o, h in zip(ours, hf) if o["padded_ids"] != h.input_ids or o["mask"] != h.attention_mask
          or o["type_ids"] != h.token_type_ids[:len(o["ids"])] or o["label"] != h.label or o["last"] != sum(h.attention_mask) - 1)
check(len(ours) == len(hf) and bad == 0, f"mrpc rows: {bad} of {len(hf)} differ from glue_convert_examples_to_features")
cut = sum(1 for h in hf if sum(h.attention_mask) == 48)
print(f"mrpc: {len(ours)} BERT pair rows equal glue_convert_examples_to_features ({cut} truncated longest-first)")
cfg = write_config(os.path.join(sst, "s.yaml"), {"type": "classification", "format": "sst2",
                                                  "train_file": os.path.join(sst, "train.tsv"),
                                                  "dev_file": os.path.join(sst, "train.tsv")}, max_seq=32)
ours = dump("features", cfg, "train")["features"]
hf = hf_glue.glue_convert_examples_to_features(hf_glue.Sst2Processor().get_train_examples(sst), bert, max_length=32,
                                               task="sst-2")
check([o["padded_ids"] for o in ours] == [h.input_ids for h in hf], "sst2 single-sentence rows differ from HF")
print(f"sst2: {len(ours)} BERT single-text rows equal glue_convert_examples_to_features")

# GPT: a <|endoftext|> b with the same longest-first cut, `last` the final real token.
gpt = transformers.GPT2Tokenizer(ftlib.GPT2_VOCAB, os.path.join(ftlib.TOKENIZERS, "gpt2-merges.txt"))
cfg = write_config(os.path.join(d, "g.yaml"), {"type": "classification", "format": "mrpc",
                                                "train_file": os.path.join(d, "train.tsv"),
                                                "dev_file": os.path.join(d, "train.tsv")}, arch="gpt", max_seq=40)
ours = dump("features", cfg, "train")["features"]
exs = hf_glue.MrpcProcessor().get_train_examples(d)
bad = 0
for o, e in zip(ours, exs):
    a, b = gpt.encode(e.text_a), gpt.encode(e.text_b)
    while len(a) + len(b) > 39:
        if len(a) > len(b):
            a = a[:-1]
        else:
            b = b[:-1]
    want = a + [gpt.eos_token_id] + b
    bad += o["ids"] != want or o["last"] != len(want) - 1 or "type_ids" in o or o["padded_ids"][len(want):] != [gpt.eos_token_id] * (40 - len(want))
check(bad == 0 and len(ours) == len(exs), f"gpt pair rows: {bad} differ from GPT2Tokenizer a + eos + b")
print(f"gpt: {len(ours)} pair rows equal GPT2Tokenizer(a) <|endoftext|> GPT2Tokenizer(b), longest-first")

# GPT span rows: question <|endoftext|> context words (each after a space), answer tokens spell it.
d = os.path.join(work, "gptsquad")
os.makedirs(d)
with open(os.path.join(d, "train.json"), "w") as f:
    json.dump(squad_data(False, 6, 80), f, ensure_ascii=False)
cfg = write_config(os.path.join(d, "c.yaml"), {"type": "span", "format": "squad1", "train_file": os.path.join(d, "train.json"),
                                                "dev_file": os.path.join(d, "train.json"), "max_query_len": 10,
                                                "doc_stride": 20}, arch="gpt", max_seq=64)
ours = dump("features", cfg, "train")["features"]
examples = hf_squad.SquadV1Processor().get_train_examples(d, filename="train.json")
bad = 0
for o in ours:
    e = examples[o["example"]]
    q = gpt.encode(e.question_text)[:10]
    ctx_ids = []
    for i, w in enumerate(e.doc_tokens):
        ctx_ids += gpt.encode((" " if i else "") + w)
    ok = o["ids"][:len(q) + 1] == q + [gpt.eos_token_id] and o["ctx_off"] == len(q) + 1
    ok = ok and o["ids"][o["ctx_off"]:] == ctx_ids[o["doc_start"]:o["doc_start"] + o["ctx_len"]]
    if o["start"]:
        span = gpt.decode(o["ids"][o["start"]:o["end"] + 1]).strip()
        ok = ok and e.answer_text in span and len(span) <= len(e.answer_text) + 12
    bad += not ok
check(bad == 0, f"gpt span rows: {bad} of {len(ours)} windows wrong")
print(f"gpt squad: {len(ours)} windows: question <|endoftext|> context, answer tokens decode to the answer")
ftlib.finish("finetune_squad_features")
