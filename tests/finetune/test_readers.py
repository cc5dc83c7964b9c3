"""The readers of trainer/task/ against Hugging Face's GLUE processors
(transformers.data.processors.glue) on files written in each GLUE layout, against Hugging Face's
SQuAD processors on SQuAD v1.1/v2.0 JSON, and against Python's json/csv for SuperGLUE and the
generic formats: row counts, texts, labels (as class indices in the processors' label order)."""
import csv
import json
import os
import random
import warnings

warnings.simplefilter("ignore")
from transformers.data.processors import glue as hf_glue  # noqa: E402
from transformers.data.processors import squad as hf_squad  # noqa: E402

import ftlib  # noqa: E402
from ftlib import check, dump, sentence, write_config  # noqa: E402

rng = random.Random(14)
work = ftlib.workdir("readers")


def tsv(path, rows):
    with open(path, "w", encoding="utf-8", newline="") as f:
        for r in rows:
            f.write("\t".join(r) + "\n")


def glue_rows(fmt, n, labels):
    """Rows of a labelled train/dev file in the GLUE layout of `fmt` (header first)."""
    lab = lambda: rng.choice(labels)  # noqa: E731
    s = lambda: sentence(rng)  # noqa: E731
    if fmt == "cola":
        return [[rng.choice(["gj04", "bc01"]), lab(), rng.choice(["", "*"]), s()] for _ in range(n)]
    if fmt == "sst2":
        return [["sentence", "label"]] + [[s(), lab()] for _ in range(n)]
    if fmt == "mrpc":
        return [["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]] + \
            [[lab(), str(rng.randint(1, 9999)), str(rng.randint(1, 9999)), s(), s()] for _ in range(n)]
    if fmt == "qqp":
        return [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]] + \
            [[str(i), str(2 * i), str(2 * i + 1), s(), s(), lab()] for i in range(n)]
    if fmt == "stsb":
        return [["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1",
                 "sentence2", "score"]] + \
            [[str(i), "main-news", "x", "2012", str(i), "none", "none", s(), s(),
              f"{rng.uniform(0, 5):.3f}"] for i in range(n)]
    if fmt in ("mnli", "mnli_mm"):
        head = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "label1", "label2",
                "label3", "label4", "label5", "gold_label"]
        return [head] + [[str(i), "1", "1e", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)", s(), s()]
                         + [lab() for _ in range(5)] + [lab()] for i in range(n)]
    # qnli, rte, wnli
    head = ["index", "question", "sentence", "label"] if fmt == "qnli" else ["index", "sentence1", "sentence2", "label"]
    return [head] + [[str(i), s(), s(), lab()] for i in range(n)]


PROCESSORS = {"cola": "cola", "sst2": "sst-2", "mrpc": "mrpc", "qqp": "qqp", "stsb": "sts-b",
              "mnli": "mnli", "mnli_mm": "mnli-mm", "qnli": "qnli", "rte": "rte", "wnli": "wnli"}

for fmt, hf_name in PROCESSORS.items():
    d = os.path.join(work, fmt)
    os.makedirs(d)
    proc = hf_glue.glue_processors[hf_name]()
    labels = proc.get_labels()
    reg = labels == [None]
    dev_name = {"mnli": "dev_matched.tsv", "mnli_mm": "dev_mismatched.tsv"}.get(fmt, "dev.tsv")
    n_train, n_dev = rng.randint(5, 40), rng.randint(5, 40)
    tsv(os.path.join(d, "train.tsv"), glue_rows(fmt, n_train, labels))
    tsv(os.path.join(d, dev_name), glue_rows(fmt, n_dev, labels))
    if fmt == "mnli_mm":  # the processor reads its train split from the same folder's train.tsv
        pass
    cfg = write_config(os.path.join(d, "c.yaml"), {
        "type": "regression" if reg else "classification", "format": fmt,
        "train_file": os.path.join(d, "train.tsv"), "dev_file": os.path.join(d, dev_name)})
    for split, hf_ex in (("train", proc.get_train_examples(d)), ("dev", proc.get_dev_examples(d))):
        ours = dump("examples", cfg, split)
        check(len(ours) == len(hf_ex), f"{fmt} {split}: {len(ours)} examples, HF {len(hf_ex)}")
        for i, (o, h) in enumerate(zip(ours, hf_ex)):
            ok = o["a"] == h.text_a and o["b"] == h.text_b
            ok = ok and (abs(o["target"] - float(h.label)) < 1e-6 if reg else o["label"] == labels.index(h.label))
            if not check(ok, f"{fmt} {split} row {i}: ours {o} vs HF {h}"):
                break
    print(f"{fmt}: {n_train} train, {n_dev} dev rows equal HF's {type(proc).__name__}")

# SuperGLUE JSONL (no HF processor: Python's json is the oracle; WiC's text a is "word: sentence1").
SG = {"boolq": (["question", "passage"], [False, True]),
      "cb": (["premise", "hypothesis"], ["entailment", "contradiction", "neutral"]),
      "superglue_rte": (["premise", "hypothesis"], ["entailment", "not_entailment"]),
      "wic": (["word", "sentence1", "sentence2"], [False, True])}
for fmt, (keys, labels) in SG.items():
    d = os.path.join(work, fmt)
    os.makedirs(d)
    rows = []
    for i in range(30):
        r = {k: sentence(rng) for k in keys}
        r["idx"] = i
        r["label"] = rng.choice(labels)
        rows.append(r)
    path = os.path.join(d, "train.jsonl")
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=rng.random() < 0.5) + "\n")
    cfg = write_config(os.path.join(d, "c.yaml"), {"type": "classification", "format": fmt,
                                                   "train_file": path, "dev_file": path})
    ours = dump("examples", cfg, "train")
    check(len(ours) == len(rows), f"{fmt}: {len(ours)} examples of {len(rows)}")
    for o, r in zip(ours, rows):
        if fmt == "wic":
            a, b = f"{r['word']}: {r['sentence1']}", r["sentence2"]
        else:
            a, b = r[keys[0]], r[keys[1]]
        check(o["a"] == a and o["b"] == b and o["label"] == labels.index(r["label"]), f"{fmt}: {o} vs {r}")
    print(f"{fmt}: {len(rows)} JSONL rows equal")

# Generic tsv (header names) and jsonl (keys), classification and regression.
d = os.path.join(work, "generic")
os.makedirs(d)
rows = [{"id": str(i), "s1": sentence(rng), "s2": sentence(rng), "y": rng.choice(["neg", "pos", "mid"]),
         "score": f"{rng.uniform(-3, 3):.4f}"} for i in range(25)]
with open(os.path.join(d, "t.tsv"), "w") as f:
    f.write("id\ty\ts2\ts1\tscore\n")
    for r in rows:
        f.write("\t".join([r["id"], r["y"], r["s2"], r["s1"], r["score"]]) + "\n")
with open(os.path.join(d, "t.jsonl"), "w") as f:
    for r in rows:
        f.write(json.dumps(dict(r, score=float(r["score"]))) + "\n")
for form in ("tsv", "jsonl"):
    path = os.path.join(d, "t." + form)
    cfg = write_config(os.path.join(d, form + ".yaml"), {
        "type": "classification", "format": form, "train_file": path, "dev_file": path,
        "text_a": "s1", "text_b": "s2", "label_column": "y", "labels": "neg,mid,pos"})
    ours = dump("examples", cfg, "train")
    check([(o["a"], o["b"], o["label"]) for o in ours] ==
          [(r["s1"], r["s2"], ["neg", "mid", "pos"].index(r["y"])) for r in rows], f"generic {form} classification")
    cfg = write_config(os.path.join(d, form + "-r.yaml"), {
        "type": "regression", "format": form, "train_file": path, "dev_file": path,
        "text_a": "s2", "label_column": "score"})
    ours = dump("examples", cfg, "train")
    check(all(o["a"] == r["s2"] and o["b"] is None and abs(o["target"] - float(r["score"])) < 1e-5
              for o, r in zip(ours, rows)) and len(ours) == len(rows), f"generic {form} regression")
    print(f"generic {form}: {len(rows)} rows equal (classification and regression)")

# JSON labels that are not strings: integers and booleans match their decimal / true-false text.
path = os.path.join(d, "typed.jsonl")
typed = [{"s": ftlib.sentence(rng), "y": rng.choice([0, 1, True, False, "0", "true"])} for _ in range(20)]
with open(path, "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in typed))
for labels in ("0,1", "false,true"):
    rows = [r for r in typed if str(r["y"]).lower() in labels.split(",")]
    with open(path, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    cfg = write_config(os.path.join(d, "typed.yaml"), {
        "type": "classification", "format": "jsonl", "train_file": path, "dev_file": path, "text_a": "s",
        "label_column": "y", "labels": labels})
    ours = dump("examples", cfg, "train")
    want = [labels.split(",").index(str(r["y"]).lower()) for r in rows]
    check([o["label"] for o in ours] == want, f"jsonl typed labels {labels}: {[o['label'] for o in ours]} vs {want}")
print("generic jsonl: integer and boolean labels match task.labels")

# SQuAD v1.1 / v2.0 against HF's SquadV1Processor / SquadV2Processor examples: whitespace words
# (doc_tokens), the answer's word span, impossibility, answers.
def squad_file(path, v2, n_par=6):
    data = []
    qid = 0
    for a in range(2):
        pars = []
        for p in range(n_par):
            ws = "  \n\t\u202f "
            words = [rng.choice(ftlib.WORDS) for _ in range(rng.randint(5, 60))]
            seps = [rng.choice([" ", " ", " ", "  ", "\n", "\u202f", " \t"]) for _ in words]
            ctx = "".join(w + s for w, s in zip(words, seps)).rstrip(ws)
            if rng.random() < 0.3:
                ctx = " " + ctx
            qas = []
            for q in range(rng.randint(1, 4)):
                imp = v2 and rng.random() < 0.3
                answers = []
                if not imp:
                    for _ in range(rng.randint(1, 3)):
                        # an answer: a substring starting and ending at non-space characters
                        i = rng.randrange(len(ctx))
                        j = min(len(ctx), i + rng.randint(1, 30))
                        t = ctx[i:j].strip()
                        if not t:
                            t = ctx.strip()[:3]
                        i = ctx.index(t, 0 if t == ctx.strip()[:3] else i)
                        answers.append({"text": t, "answer_start": i})
                qa = {"id": f"q{qid:05d}", "question": sentence(rng, 2, 12) + "?", "answers": answers}
                qid += 1
                if v2:
                    qa["is_impossible"] = imp
                    if imp:
                        qa["plausible_answers"] = [{"text": "x", "answer_start": 0}]
                qas.append(qa)
            pars.append({"context": ctx, "qas": qas})
        data.append({"title": f"T{a}", "paragraphs": pars})
    with open(path, "w") as f:
        json.dump({"version": "v2.0" if v2 else "1.1", "data": data}, f, ensure_ascii=False, indent=1)


for v2 in (False, True):
    d = os.path.join(work, f"squad{2 if v2 else 1}")
    os.makedirs(d)
    path = os.path.join(d, "train.json")
    squad_file(path, v2)
    fmt = "squad2" if v2 else "squad1"
    cfg = write_config(os.path.join(d, "c.yaml"), {"type": "span", "format": fmt, "train_file": path,
                                                   "dev_file": path})
    ours = dump("examples", cfg, "train")
    proc = hf_squad.SquadV2Processor() if v2 else hf_squad.SquadV1Processor()
    hf_train = proc.get_train_examples(d, filename="train.json")
    hf_dev = proc.get_dev_examples(d, filename="train.json")
    check(len(ours) == len(hf_train) == len(hf_dev), f"{fmt}: {len(ours)} questions, HF {len(hf_train)}")
    for o, h, hd in zip(ours, hf_train, hf_dev):
        ok = o["id"] == h.qas_id and o["question"] == h.question_text and o["words"] == h.doc_tokens
        ok = ok and bool(o["impossible"]) == bool(h.is_impossible)
        if not h.is_impossible:
            ok = ok and o["start_word"] == h.start_position and o["end_word"] == h.end_position
        ok = ok and [a["text"] for a in o["answers"]] == [a["text"] for a in hd.answers]
        if not check(ok, f"{fmt} question {o['id']}: ours {o} vs HF {vars(h)}"):
            break
    print(f"{fmt}: {len(ours)} questions equal HF's {type(proc).__name__} (words, answer word spans)")

ftlib.finish("finetune_readers")
