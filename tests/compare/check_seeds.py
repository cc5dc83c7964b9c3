#!/usr/bin/python3
"""Checks compare.sh --seeds N output against the runs themselves (tests/compare/test_compare.sh).

  check_seeds.py OUTDIR N TYPE...

Oracle: each run's own resolved.yaml and metrics.jsonl, with mean and sample standard deviation
recomputed here with the statistics module (independent of compare_util's arithmetic).
"""
import csv
import json
import math
import os
import re
import statistics
import sys

out, n, types = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
errors = []


def check(ok, msg):
    if not ok:
        errors.append(msg)


def close(a, b, tol=1e-6):
    return abs(a - b) <= tol * max(1.0, abs(b))


def final_row(d):
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl")) if l.strip()]
    return [r for r in rows if r.get("split") == "valid"][-1]


def resolved(d, key):
    section, name = key.split(".")
    cur = None
    for line in open(os.path.join(d, "resolved.yaml")):
        m = re.match(r"^(\s*)(\w+):\s*(.*?)\s*$", line)
        if not m:
            continue
        if not m.group(1):
            cur = m.group(2)
        elif cur == section and m.group(2) == name:
            return m.group(3).strip('"')
    raise KeyError(key)


rows = {r["type"]: r for r in csv.DictReader(open(os.path.join(out, "results.csv")))}
check(list(rows) == types, "types in results.csv: %s" % list(rows))
finals = {}
for t in types:
    dirs = [os.path.join(out, t, "seed-%d" % k) for k in range(1, n + 1)]
    for d in dirs:
        check(os.path.isdir(os.path.join(d, "checkpoints")), "%s has no run" % d)
    seeds = [int(resolved(d, "train.seed")) for d in dirs]
    shuffles = [int(resolved(d, "data.shuffle_seed")) for d in dirs]
    check(len(set(seeds)) == n and len(set(shuffles)) == n, "%s: seeds not distinct: %s %s" % (t, seeds, shuffles))
    f = [final_row(d) for d in dirs]
    finals[t] = f
    check(all(x["whole_split"] == 1 for x in f), "%s: the final evaluation is not over the whole split" % t)
    check(len({x["valid_tokens"] for x in f}) == 1, "%s: seeds scored different validation tokens" % t)
    losses = [x["valid_loss"] for x in f]
    r = rows[t]
    check(r["seeds"] == str(n), "%s seeds column %r" % (t, r["seeds"]))
    check(close(float(r["valid_loss"]), statistics.mean(losses)), "%s mean loss %s vs %r" % (t, r["valid_loss"], losses))
    check(close(float(r["valid_loss_sd"]), statistics.stdev(losses)), "%s sd %s vs %r" % (t, r["valid_loss_sd"], losses))
    acc = [x["valid_accuracy"] for x in f]
    check(close(float(r["valid_accuracy"]), statistics.mean(acc)), "%s mean accuracy" % t)
# The validation split is scored identically in every run: the same positions for all seeds/types.
check(len({x["valid_tokens"] for t in types for x in finals[t]}) == 1, "types scored different validation tokens")
ref = finals["mha"]
for t in types:
    prr = [100.0 * a["valid_accuracy"] / b["valid_accuracy"] for a, b in zip(finals[t], ref)]
    check(close(float(rows[t]["prr"]), statistics.mean(prr), 1e-5), "%s PRR %s vs %r" % (t, rows[t]["prr"], prr))
    if t == "mha":
        check(rows[t]["separated"] == "", "mha compared with itself")
        continue
    gap = statistics.mean([x["valid_loss"] for x in finals[t]]) - statistics.mean([x["valid_loss"] for x in ref])
    noise = statistics.stdev([x["valid_loss"] for x in finals[t]]) + statistics.stdev([x["valid_loss"] for x in ref])
    check(rows[t]["separated"] == ("yes" if abs(gap) > noise else "no"), "%s separated %r (gap %g, noise %g)"
          % (t, rows[t]["separated"], gap, noise))
md = open(os.path.join(out, "results.md")).read()
check("±" in md and "do not overlap" in md, "results.md lacks the ± columns or the rule")
check(open(os.path.join(out, "curves.png"), "rb").read(8) == b"\x89PNG\r\n\x1a\n", "curves.png is not a PNG")
if errors:
    sys.exit("FAIL:\n  " + "\n  ".join(errors))
print("seeds ok:", {t: rows[t]["valid_loss"] + " ± " + rows[t]["valid_loss_sd"] for t in types})
