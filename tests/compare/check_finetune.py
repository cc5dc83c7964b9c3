#!/usr/bin/python3
"""Checks compare.sh --finetune output against the fine-tuning runs' own results.

  check_finetune.py OUTDIR SEEDS TYPE...   (TYPE list includes random-init when it was asked for)

Oracle: every run's finetune_result.json (written by `mhetrain finetune`), and each run's
finetune.yaml naming its pretrained run; means, sample sd and paired PRR recomputed here with
the statistics module.
"""
import csv
import json
import os
import statistics
import sys

out, seeds, types = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
errors = []


def check(ok, msg):
    if not ok:
        errors.append(msg)


def close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(b))


tasks = sorted(f[:-5] for f in os.listdir(os.path.join(out, "tasks")))
rows = {r["type"]: r for r in csv.DictReader(open(os.path.join(out, "finetune.csv")))}
check(list(rows) == types, "finetune.csv types %s" % list(rows))
res = {}
for t in types:
    for task in tasks:
        runs = []
        for k in range(1, seeds + 1):
            d = os.path.join(out, t, "seed-%d" % k, "ft-" + task)
            r = json.load(open(os.path.join(d, "finetune_result.json")))
            cfg = open(os.path.join(d, "finetune.yaml")).read()
            src = "mha" if t == "random-init" else t
            check(("/%s/seed-%d/resolved.yaml" % (src, k)) in cfg, "%s: based on the wrong run" % d)
            want_init = "" if t == "random-init" else os.path.realpath(os.path.join(out, t, "seed-%d" % k))
            got_init = os.path.realpath(r["init_from"]) if r["init_from"] else ""
            check(got_init == want_init, "%s: init_from %r, expected %r" % (d, r["init_from"], want_init))
            runs.append(r["value"])
        res[(t, task)] = runs
        row = rows[t]
        check(close(float(row[task]), statistics.mean(runs)), "%s %s mean %s vs %r" % (t, task, row[task], runs))
        if seeds > 1:
            check(close(float(row[task + "_sd"]), statistics.stdev(runs)), "%s %s sd" % (t, task))
for t in types:
    per_seed = []
    for task in tasks:
        p = [100.0 * a / b for a, b in zip(res[(t, task)], res[("mha", task)])]
        check(close(float(rows[t][task + "_prr"]), statistics.mean(p), 1e-5), "%s %s PRR %s vs %r"
              % (t, task, rows[t][task + "_prr"], p))
        per_seed.append(p)
    avg = [statistics.mean(p[k] for p in per_seed) for k in range(seeds)]
    check(close(float(rows[t]["avg_prr"]), statistics.mean(avg), 1e-5), "%s average PRR" % t)
# The paper's table form (paper_table.csv): scores in %, group means per seed, PRR against mha
# and PEoP against sha paired by seed, the attention weights of each run's params.txt.
GROUP = {"mrpc": "GLUE", "sst2": "GLUE", "stsb": "GLUE", "squad2": "SQuAD v2.0"}
pct, fmt_of = {}, {}
for t in types:
    for task in tasks:
        runs = [json.load(open(os.path.join(out, t, "seed-%d" % k, "ft-" + task, "finetune_result.json")))
                for k in range(1, seeds + 1)]
        fmt_of[task] = runs[0]["format"]
        pct[(t, task)] = [r["value"] * (1 if r["metric"].startswith("squad") else 100) for r in runs]
groups = sorted({GROUP[fmt_of[task]] for task in tasks})
for t in types:
    for g in groups:
        members = [task for task in tasks if GROUP[fmt_of[task]] == g]
        pct[(t, g)] = [statistics.mean(pct[(t, task)][k] for task in members) for k in range(seeds)]


def attn(t):
    p = os.path.join(out, t, "seed-1", "params.txt")
    if not os.path.exists(p):
        return None
    return int([ln for ln in open(p) if ln.startswith("attention weights (no biases):")][0].split(":")[1])


P = {t: attn(t) for t in types}
check(P["random-init"] is None and P["mha"] > P["sha"] > 0, "params %r" % P)
paper = {(r["type"], r["unit"]): r for r in csv.DictReader(open(os.path.join(out, "paper_table.csv")))}
check(len(paper) == len(types) * (len(tasks) + len(groups)), "paper_table.csv has %d rows" % len(paper))
for t in types:
    for unit in tasks + groups:
        r = paper.get((t, unit))
        if r is None:
            check(False, "paper_table.csv: no row %s %s" % (t, unit))
            continue
        s, m, b = pct[(t, unit)], pct[("mha", unit)], pct[("sha", unit)]
        check(r["kind"] == ("task" if unit in tasks else "group"), "%s %s kind" % (t, unit))
        check(r["attention_params"] == ("" if P[t] is None else str(P[t])), "%s params" % t)
        check(close(float(r["score"]), statistics.mean(s)) and close(float(r["score_sd"]), statistics.stdev(s)),
              "%s %s score %s vs %r" % (t, unit, r["score"], s))
        prr = [100 * a / c for a, c in zip(s, m)]
        check(close(float(r["prr"]), statistics.mean(prr), 1e-5), "%s %s paper PRR" % (t, unit))
        inside = abs(statistics.mean(s) - statistics.mean(m)) <= statistics.stdev(s) + statistics.stdev(m)
        check(r["prr_inside_spread"] == ("" if t == "mha" else ("yes" if inside else "no")), "%s %s PRR marker" % (t, unit))
        if t in ("sha", "random-init"):
            check(r["peop"] == "" and r["peop_inside_spread"] == "", "%s %s has a PEoP" % (t, unit))
            continue
        e = [((a - c) / c) / ((P[t] - P["sha"]) / P["sha"]) for a, c in zip(s, b)]
        check(close(float(r["peop"]), statistics.mean(e), 1e-5) and close(float(r["peop_sd"]), statistics.stdev(e), 1e-5),
              "%s %s PEoP %s vs %r" % (t, unit, r["peop"], e))
        inside = abs(statistics.mean(s) - statistics.mean(b)) <= statistics.stdev(s) + statistics.stdev(b)
        check(r["peop_inside_spread"] == ("yes" if inside else "no"), "%s %s PEoP marker" % (t, unit))
md = open(os.path.join(out, "results.md")).read()
check("## The MHE paper's table" in md and "GLUE PEoP" in md and "SQuAD v2.0 PRR" in md, "results.md lacks the paper's table")
check("## Fine-tuning" in md and "average PRR" in md and "trivial predictor" in md, "results.md lacks the fine-tuning table")
if errors:
    sys.exit("FAIL:\n  " + "\n  ".join(errors))
print("finetune ok:", {t: rows[t]["avg_prr"] for t in types})
