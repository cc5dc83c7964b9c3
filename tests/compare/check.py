#!/usr/bin/python3
"""Checks launch/compare.sh's output against independent numbers.

  check.py OUTDIR WORK TYPE...   WORK holds params_TYPE.txt from `mhetrain params`

Oracles: `mhetrain params` run by the test itself; the parameter formulas of DESIGN.md section 1
(D=64, n=4, d=16, one layer); each run's metrics.jsonl read here (last evaluation row); PRR
recomputed from the table's own columns.  The table prints 8 significant digits: relative
tolerance 1e-6.
"""
import csv
import json
import math
import os
import re
import struct
import sys

out, work, types = sys.argv[1], sys.argv[2], sys.argv[3:]
D, N, DH, LAYERS = 64, 4, 16, 1
FORMULA = {"mha": 3 * D * N * DH + N * DH * D, "sha": 3 * D * DH + N * DH * D,
           "mhe_mul": 3 * D * DH + N * DH * D + 3 * N * DH}
STEPS, TOKENS = 12, 6144
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def close(a, b, rel=1e-6):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)


with open(os.path.join(out, "results.csv")) as f:
    rows = list(csv.DictReader(f))
check([r["type"] for r in rows] == types, "types in results.csv: %s" % [r["type"] for r in rows])
by = {r["type"]: r for r in rows}
numeric = ["attention_weights", "total_params", "steps", "tokens_seen", "valid_loss", "valid_accuracy",
           "prr", "prr_loss", "tokens_per_s", "peak_rss_mib", "model_mem_mib"]
for r in rows:
    for c in numeric:
        try:
            v = float(r[c])
            check(math.isfinite(v), "%s %s not finite: %r" % (r["type"], c, r[c]))
        except (KeyError, ValueError, TypeError):
            errors.append("%s %s not a number: %r" % (r["type"], c, r.get(c)))
if errors:
    sys.exit("FAIL:\n  " + "\n  ".join(errors))

for t in types:
    r = by[t]
    text = open(os.path.join(work, "params_%s.txt" % t)).read()
    att = int(re.search(r"^attention weights \(no biases\): (\d+)$", text, re.M).group(1))
    total = int(re.search(r"^all parameters: (\d+)$", text, re.M).group(1))
    check(int(r["attention_weights"]) == att, "%s attention weights %s != mhetrain params %d" % (t, r["attention_weights"], att))
    check(int(r["total_params"]) == total, "%s total parameters %s != mhetrain params %d" % (t, r["total_params"], total))
    check(att == LAYERS * FORMULA[t], "%s attention weights %d != DESIGN formula %d" % (t, att, LAYERS * FORMULA[t]))
    check(int(r["steps"]) == STEPS and int(r["tokens_seen"]) == TOKENS, "%s budget %s steps %s tokens" % (t, r["steps"], r["tokens_seen"]))
    last = None
    with open(os.path.join(out, t, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if row.get("split") == "valid" and (last is None or row["step"] >= last["step"]):
                last = row
    check(last["step"] == STEPS, "%s last evaluation at step %s" % (t, last["step"]))
    check(close(float(r["valid_loss"]), last["valid_loss"]), "%s loss %s != metrics %r" % (t, r["valid_loss"], last["valid_loss"]))
    check(close(float(r["valid_accuracy"]), last["valid_accuracy"]),
          "%s accuracy %s != metrics %r" % (t, r["valid_accuracy"], last["valid_accuracy"]))
    check(float(r["tokens_per_s"]) > 0, "%s tokens/s %s" % (t, r["tokens_per_s"]))
    # A process of this binary holds at least its libraries; a 1-layer D=64 model stays far below 2 GiB.
    check(1.0 <= float(r["peak_rss_mib"]) < 2048.0, "%s peak RSS %s MiB" % (t, r["peak_rss_mib"]))
    check(0.0 < float(r["model_mem_mib"]) < float(r["peak_rss_mib"]), "%s model memory %s MiB" % (t, r["model_mem_mib"]))

ref = by["mha"]
check(ref["prr"] == "100" and ref["prr_loss"] == "100", "mha PRR %s / %s, not exactly 100" % (ref["prr"], ref["prr_loss"]))
check(float(ref["valid_accuracy"]) > 0, "mha accuracy is 0: PRR undefined (budget too small)")
for t in types:
    r = by[t]
    want = 100.0 * float(r["valid_accuracy"]) / float(ref["valid_accuracy"])
    check(close(float(r["prr"]), want, 1e-5), "%s PRR %s != %r" % (t, r["prr"], want))
    want = 100.0 * math.exp(float(ref["valid_loss"]) - float(r["valid_loss"]))
    check(close(float(r["prr_loss"]), want, 1e-5), "%s PRR(exp(-loss)) %s != %r" % (t, r["prr_loss"], want))

md = open(os.path.join(out, "results.md")).read()
for t in types:
    r = by[t]
    line = re.search(r"^\| %s \| ([\d,]+) \| ([\d,]+) \|" % t, md, re.M)
    check(line is not None and line.group(1).replace(",", "") == r["attention_weights"]
          and line.group(2).replace(",", "") == r["total_params"], "results.md row of %s" % t)
check("PRR" in md and "exp(-loss" in md, "results.md does not define PRR")

with open(os.path.join(out, "curves.png"), "rb") as f:
    png = f.read()
check(png[:8] == b"\x89PNG\r\n\x1a\n", "curves.png has no PNG signature")
check(png[12:16] == b"IHDR" and struct.unpack(">II", png[16:24]) == (900, 600), "curves.png header")
check(png[-8:-4] == b"IEND", "curves.png is truncated")
# One data block per type with every evaluation: the untrained model (step 0), then every
# eval_every = 12/5 -> 2 steps.
blocks = [b for b in open(os.path.join(out, "curves.dat")).read().split("\n\n\n") if b.strip()]
check(len(blocks) == len(types), "curves.dat has %d blocks" % len(blocks))
for t, b in zip(types, blocks):
    pts = [l.split() for l in b.splitlines() if l and not l.startswith("#")]
    check(b.startswith("# %s\n" % t) and [int(p[0]) for p in pts] == [512 * s for s in range(0, STEPS + 1, 2)],
          "curves.dat block of %s: %s" % (t, pts))

if errors:
    sys.exit("FAIL:\n  " + "\n  ".join(errors))
print("check: %d types, numbers agree" % len(types))
