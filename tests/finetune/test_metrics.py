"""The metrics of trainer/task/ against independent implementations: scikit-learn (accuracy,
binary and macro F1, Matthews correlation), SciPy (Pearson, Spearman with tied ranks averaged),
transformers' squad_metrics (normalize_answer, compute_exact, compute_f1 — the official SQuAD
v2.0 script), on random predictions including the degenerate cases; then task_score end to end:
a classification and a regression dev file with random outputs, and a SQuAD v2.0 dev file whose
predictions are scored by squad_metrics.get_raw_scores."""
import json
import os
import random
import struct
import warnings

import numpy as np
from scipy import stats
from sklearn import metrics as skm

warnings.simplefilter("ignore")
from transformers.data.metrics import squad_metrics  # noqa: E402
from transformers.data.processors import squad as hf_squad  # noqa: E402

import ftlib  # noqa: E402
from ftlib import check, dump, run_stdin, write_config  # noqa: E402

rng = random.Random(7)
TOL = 1e-9
work = ftlib.workdir("metrics")

# Classification
cases = 0
for trial in range(60):
    k = rng.choice([2, 2, 3, 5])
    n = rng.choice([1, 2, 7, 50, 400])
    gold = [rng.randrange(k) for _ in range(n)]
    mode = trial % 4
    if mode == 0:
        pred = [rng.randrange(k) for _ in range(n)]
    elif mode == 1:  # mostly right
        pred = [g if rng.random() < 0.8 else rng.randrange(k) for g in gold]
    elif mode == 2:  # constant predictor (majority-class style)
        pred = [rng.randrange(k)] * n
    else:  # a class never seen
        gold = [min(g, k - 2) for g in gold]
        pred = [min(rng.randrange(k), k - 2) for _ in range(n)]
    ours = run_stdin(["metrics-cls", str(k)], "".join(f"{p} {g}\n" for p, g in zip(pred, gold)))
    ref = {"accuracy": skm.accuracy_score(gold, pred),
           "f1_macro": skm.f1_score(gold, pred, average="macro", zero_division=0),
           "mcc": skm.matthews_corrcoef(gold, pred)}
    if k == 2:
        ref["f1"] = skm.f1_score(gold, pred, average="binary", pos_label=1, zero_division=0)
    for name, v in ref.items():
        check(abs(ours[name] - v) <= TOL, f"cls k={k} n={n} mode={mode} {name}: ours {ours[name]} sklearn {v}")
    cases += 1
print(f"classification: {cases} random cases equal scikit-learn {__import__('sklearn').__version__}")

# Regression
cases = 0
for trial in range(40):
    n = rng.choice([3, 10, 100, 1000])
    x = np.array([rng.gauss(0, 1) for _ in range(n)])
    y = 0.5 * x + np.array([rng.gauss(0, 1) for _ in range(n)])
    if trial % 2:  # ties on both sides
        x, y = np.round(x * 2) / 2, np.round(y)
    ours = run_stdin(["metrics-reg"], "".join(f"{a!r} {b!r}\n" for a, b in zip(x, y)))
    # A constant side leaves the coefficients undefined: SciPy says NaN, task_score 0 (metrics.h).
    ref = {"pearson": np.nan_to_num(stats.pearsonr(x, y)[0]), "spearman": np.nan_to_num(stats.spearmanr(x, y)[0]),
           "mse": float(np.mean((x - y) ** 2))}
    for name, v in ref.items():
        check(abs(ours[name] - v) <= 1e-9, f"reg n={n} {name}: ours {ours[name]} scipy {v}")
    cases += 1
ours = run_stdin(["metrics-reg"], "1 0\n1 1\n1 2\n")
check(ours["pearson"] == 0 and ours["spearman"] == 0, f"constant predictions: pearson/spearman 0, got {ours}")
print(f"regression: {cases} random cases equal scipy.stats {__import__('scipy').__version__} (pearsonr, spearmanr)")

# SQuAD normalisation, EM and F1
PIECES = ["The", "the", "a", "an", "A", "An", "theory", "and", "cat", "Cat.", "cat's", "(1895)", "1,000", "—", "“quoted”",
          "café", "Ünïcode", "x-ray", "_the_", "an_", "ΣΊΣΥΦΟΣ", "ǅemal", "\u00a0", "\u2003", "\t", "  ", "!", "?",
          "...", "a.", "the-end", "ß", "İstanbul", "ﬁne", "٣", "½", "a\u0301", "th\u200be"]


def text(r):
    return "".join(r.choice(PIECES) + r.choice([" ", "", " ", "\u2009"]) for _ in range(r.randint(0, 8)))


pairs = []
for _ in range(3000):
    g = text(rng)
    p = g if rng.random() < 0.2 else text(rng)
    pairs.append((g, p))
ours = run_stdin(["squad"], "".join(json.dumps({"gold": g, "pred": p}) + "\n" for g, p in pairs))
bad = 0
for (g, p), o in zip(pairs, ours):
    ok = o["norm_gold"] == squad_metrics.normalize_answer(g) and o["exact"] == squad_metrics.compute_exact(g, p) \
        and abs(o["f1"] - squad_metrics.compute_f1(g, p)) <= 1e-12
    if not ok and bad < 5:
        check(False, f"squad {g!r} / {p!r}: ours {o}, official {squad_metrics.normalize_answer(g)!r} "
              f"{squad_metrics.compute_exact(g, p)} {squad_metrics.compute_f1(g, p)}")
    bad += not ok
check(bad == 0, f"{bad} of {len(pairs)} SQuAD pairs differ")
print(f"squad: {len(pairs)} random answer pairs: normalisation, exact, f1 equal transformers' squad_metrics")


# task_score end to end, classification / regression: random outputs of every dev row
def f32(path, values):
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{len(values)}f", *values))


d = os.path.join(work, "sst2")
os.makedirs(d)
train_labels = [rng.choice("0001") for _ in range(40)]
dev_labels = [rng.choice("01") for _ in range(60)]
for name, labels in (("train.tsv", train_labels), ("dev.tsv", dev_labels)):
    with open(os.path.join(d, name), "w") as f:
        f.write("sentence\tlabel\n" + "".join(f"{ftlib.sentence(rng)}\t{lab}\n" for lab in labels))
cfg = write_config(os.path.join(d, "c.yaml"), {"type": "classification", "format": "sst2",
                                                "train_file": os.path.join(d, "train.tsv"),
                                                "dev_file": os.path.join(d, "dev.tsv")})
logits = [rng.gauss(0, 1) for _ in range(2 * len(dev_labels))]
f32(os.path.join(d, "out.f32"), logits)
r = dump("score", cfg, os.path.join(d, "out.f32"))
gold = [int(x) for x in dev_labels]
pred = [int(logits[2 * i + 1] > logits[2 * i]) for i in range(len(gold))]
acc, f1 = skm.accuracy_score(gold, pred), skm.f1_score(gold, pred, zero_division=0)
check(abs(r["scores"]["accuracy"] - acc) < TOL and abs(r["scores"]["f1"] - f1) < TOL
      and abs(r["scores"]["acc_and_f1"] - (acc + f1) / 2) < TOL and r["scores"]["primary"] == "accuracy",
      f"sst2 task_score {r['scores']} vs sklearn acc {acc} f1 {f1}")
major = max((train_labels.count(c), -int(c)) for c in "01")
major = -major[1]
check(abs(r["trivial"]["accuracy"] - gold.count(major) / len(gold)) < TOL,
      f"sst2 trivial {r['trivial']} vs majority class {major}")
print(f"sst2 task_score: accuracy {acc:.4f} f1 {f1:.4f} equal sklearn; trivial = majority class {major}")

d = os.path.join(work, "stsb")
os.makedirs(d)
head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
targets = [round(rng.uniform(0, 5), 1) for _ in range(50)]
for name in ("train.tsv", "dev.tsv"):
    with open(os.path.join(d, name), "w") as f:
        f.write(head + "".join(f"{i}\tg\tf\t2012\t{i}\ts\ts\t{ftlib.sentence(rng)}\t{ftlib.sentence(rng)}\t{t}\n"
                               for i, t in enumerate(targets)))
cfg = write_config(os.path.join(d, "c.yaml"), {"type": "regression", "format": "stsb",
                                                "train_file": os.path.join(d, "train.tsv"),
                                                "dev_file": os.path.join(d, "dev.tsv")})
outs = [t + rng.gauss(0, 1.5) for t in targets]
f32(os.path.join(d, "out.f32"), outs)
r = dump("score", cfg, os.path.join(d, "out.f32"))
o32 = np.array(outs, dtype=np.float32).astype(np.float64)
t32 = np.array(targets, dtype=np.float32).astype(np.float64)
p, s = stats.pearsonr(o32, t32)[0], stats.spearmanr(o32, t32)[0]
check(abs(r["scores"]["pearson"] - p) < 1e-9 and abs(r["scores"]["spearman"] - s) < 1e-9
      and abs(r["scores"]["corr"] - (p + s) / 2) < 1e-9 and r["scores"]["primary"] == "corr",
      f"stsb task_score {r['scores']} vs scipy pearson {p} spearman {s}")
print(f"stsb task_score: pearson {p:.4f} spearman {s:.4f} equal scipy")

# SQuAD v2.0: our predictions from random logits, scored by task_score and by squad_metrics.
d = os.path.join(work, "squad2")
os.makedirs(d)
paras = []
for pi in range(8):
    words = [rng.choice(ftlib.WORDS) for _ in range(rng.randint(20, 120))]
    ctx = " ".join(words)
    qas = []
    for qi in range(3):
        if rng.random() < 0.35:
            qas.append({"id": f"p{pi}q{qi}", "question": ftlib.sentence(rng, 2, 8), "answers": [],
                        "is_impossible": True})
            continue
        answers = []
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(words))
            j = min(len(words), i + rng.randint(1, 4))
            t = " ".join(words[i:j])
            answers.append({"text": t, "answer_start": len(" ".join(words[:i])) + (1 if i else 0)})
        qas.append({"id": f"p{pi}q{qi}", "question": ftlib.sentence(rng, 2, 8), "answers": answers,
                    "is_impossible": False})
    paras.append({"context": ctx, "qas": qas})
with open(os.path.join(d, "dev.json"), "w") as f:
    json.dump({"version": "v2.0", "data": [{"title": "t", "paragraphs": paras}]}, f)
cfg = write_config(os.path.join(d, "c.yaml"), {"type": "span", "format": "squad2",
                                                "train_file": os.path.join(d, "dev.json"),
                                                "dev_file": os.path.join(d, "dev.json"), "max_query_len": 16,
                                                "doc_stride": 40}, max_seq=96)
feats = dump("features", cfg, "dev")
T = feats["T"]
vals = [rng.gauss(0, 1) for _ in range(len(feats["features"]) * T * 2)]
for f in range(len(feats["features"])):  # a strong null score in some windows: both decisions occur
    if rng.random() < 0.5:
        vals[f * T * 2] += 4
        vals[f * T * 2 + 1] += 4
f32(os.path.join(d, "out.f32"), vals)
r = dump("score", cfg, os.path.join(d, "out.f32"))
examples = hf_squad.SquadV2Processor().get_dev_examples(d, filename="dev.json")
preds = r["predictions"]
exact, f1s = squad_metrics.get_raw_scores(examples, preds)
em_ref, f1_ref = 100 * np.mean(list(exact.values())), 100 * np.mean(list(f1s.values()))
check(abs(r["scores"]["squad_em"] - em_ref) < 1e-9 and abs(r["scores"]["squad_f1"] - f1_ref) < 1e-9,
      f"squad2 task_score {r['scores']} vs squad_metrics EM {em_ref} F1 {f1_ref}")
n_imp = sum(1 for e in examples if not e.answers)
check(abs(r["trivial"]["squad_em"] - 100 * n_imp / len(examples)) < 1e-9,
      f"squad2 trivial {r['trivial']} vs {n_imp}/{len(examples)} unanswerable")
# The official v2.0 best-threshold sweep (BERT's protocol: tau chosen on dev) over the best
# non-null spans and null - best as na_prob, against squad_metrics.find_all_best_thresh.
nonnull, na = r["nonnull"], r["null_diff"]
exact_nn, f1_nn = squad_metrics.get_raw_scores(examples, nonnull)
has_ans = {e.qas_id: bool(e.answers) for e in examples}
best = {}
squad_metrics.find_all_best_thresh(best, nonnull, exact_nn, f1_nn, na, has_ans)
for k in ("best_exact", "best_f1", "best_f1_thresh"):
    check(abs(r["scores"][k] - best[k]) < 1e-9, f"squad2 {k} {r['scores'][k]} vs squad_metrics {best[k]}")
check(r["scores"]["best_f1"] >= r["scores"]["squad_f1"] - 1e-9 and r["scores"]["best_f1"] > r["trivial"]["best_f1"],
      f"squad2 best_f1 {r['scores']['best_f1']} vs thresholded {r['scores']['squad_f1']} / trivial {r['trivial']['best_f1']}")
# The threshold applied (task.null_threshold = best_f1_thresh) reproduces best_f1 as the plain F1.
cfg_t = write_config(os.path.join(d, "ct.yaml"), {"type": "span", "format": "squad2",
                                                  "train_file": os.path.join(d, "dev.json"),
                                                  "dev_file": os.path.join(d, "dev.json"), "max_query_len": 16,
                                                  "doc_stride": 40, "null_threshold": best["best_f1_thresh"]},
                     max_seq=96)
rt = dump("score", cfg_t, os.path.join(d, "out.f32"))
check(abs(rt["scores"]["squad_f1"] - best["best_f1"]) < 1e-9,
      f"squad2 F1 at null_threshold {best['best_f1_thresh']}: {rt['scores']['squad_f1']} vs best_f1 {best['best_f1']}")
print(f"squad2 best_exact {best['best_exact']:.2f} best_f1 {best['best_f1']:.2f} at {best['best_f1_thresh']:.4f} "
      f"(F1 at 0: {f1_ref:.2f}) equal squad_metrics.find_all_best_thresh; the threshold applied gives best_f1")
n_empty = sum(1 for v in preds.values() if v == "")
print(f"squad2 task_score: EM {em_ref:.2f} F1 {f1_ref:.2f} over {len(examples)} questions ({n_empty} predicted "
      f"no-answer) equal squad_metrics.get_raw_scores; trivial EM {r['trivial']['squad_em']:.2f}")
ftlib.finish("finetune_metrics")
