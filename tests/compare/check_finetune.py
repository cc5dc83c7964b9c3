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
md = open(os.path.join(out, "results.md")).read()
check("## Fine-tuning" in md and "average PRR" in md and "trivial predictor" in md, "results.md lacks the fine-tuning table")
if errors:
    sys.exit("FAIL:\n  " + "\n  ".join(errors))
print("finetune ok:", {t: rows[t]["avg_prr"] for t in types})
