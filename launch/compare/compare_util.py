#!/usr/bin/python3
"""Helpers of launch/compare.sh (standard library only).

  compare_util.py resolved FILE KEY...     print values of a `mhetrain train --dry-run` config
  compare_util.py complete DIR STEPS       exit 0 when DIR holds a finished run of STEPS steps
  compare_util.py summarise OUTDIR [--seeds N] TYPE...
                                           write results.csv, results.md and curves.png
"""
import csv
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def fail(msg):
    sys.stderr.write("compare: %s\n" % msg)
    sys.exit(2)


def read_resolved(path):
    """The dry-run YAML is two levels deep: `section:` then `  key: value`."""
    out, section = {}, None
    with open(path) as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            m = re.match(r"^(\s*)([A-Za-z_0-9]+):\s*(.*?)\s*$", line)
            if not m:
                continue
            if not m.group(1):
                section = m.group(2)
            else:
                out["%s.%s" % (section, m.group(2))] = m.group(3).strip('"')
    return out


# Short names for the values compare.sh needs.
ALIASES = {"steps": "train.steps", "heads": "model.heads", "hidden": "model.hidden"}


def cmd_resolved(path, keys):
    cfg = read_resolved(path)
    vals = []
    for k in keys:
        full = ALIASES.get(k, k)
        if full not in cfg:
            fail("%s: no %s" % (path, full))
        vals.append(cfg[full])
    print(" ".join(vals))


def read_metrics(path):
    """Training and evaluation rows keyed by step.  A resumed run appends the steps it repeats
    after its checkpoint, so the last row of a step wins."""
    train, valid = {}, {}
    if not os.path.exists(path):
        return train, valid
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                # A crash can leave a torn last line; anything else is a real problem.
                sys.stderr.write("compare: %s:%d: not JSON, ignored\n" % (path, n))
                continue
            step = row.get("step") if isinstance(row, dict) else None
            if not isinstance(step, int) or isinstance(step, bool):
                sys.stderr.write("compare: %s:%d: no integer \"step\", ignored\n" % (path, n))
                continue
            (valid if row.get("split") == "valid" else train)[step] = row
    return train, valid


def is_complete(d, steps):
    _, valid = read_metrics(os.path.join(d, "metrics.jsonl"))
    ckpt = os.path.join(d, "checkpoints", "step_%08d" % steps)
    return steps in valid and os.path.isdir(ckpt)


def params_of(path):
    """`mhetrain params` totals: attention weights without biases, all parameters."""
    att = total = None
    with open(path) as f:
        for line in f:
            m = re.match(r"^attention weights \(no biases\):\s*(\d+)\s*$", line)
            if m:
                att = int(m.group(1))
            m = re.match(r"^all parameters:\s*(\d+)\s*$", line)
            if m:
                total = int(m.group(1))
    if att is None or total is None:
        fail("%s: no parameter totals" % path)
    return att, total


def peak_rss_mib(d):
    """The largest RSS over the (re)starts of this type, from GNU time's %M (KiB)."""
    best = None
    path = os.path.join(d, "peak_rss_kb.txt")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if re.match(r"^\d+$", line.strip()):
                    best = max(best or 0, int(line))
    return None if best is None else best / 1024.0


def model_memory_mib(d):
    """The trainer's own estimate of its memory per worker (last start)."""
    path = os.path.join(d, "train.log")
    est = None
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.startswith("memory per worker:"):
                    nums = re.findall(r"([\d.]+) MiB", line)
                    est = sum(float(x) for x in nums)
    return est


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def fmt(x, digits):
    return "" if x is None else "%.*f" % (digits, x)


def run_dirs(outdir, t, seeds):
    """compare.sh's layout: OUTDIR/TYPE for one seed, OUTDIR/TYPE/seed-K for several."""
    if seeds == 1:
        return [os.path.join(outdir, t)]
    return [os.path.join(outdir, t, "seed-%d" % k) for k in range(1, seeds + 1)]


def mean_sd(xs):
    """Mean and sample standard deviation (n - 1); sd is None for fewer than two values."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def num(row, key):
    """A metric as a float, or None: absent, null (the trainer's non-finite value) or not a number."""
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def collect_run(d):
    cfg = read_resolved(os.path.join(d, "resolved.yaml"))
    steps = int(cfg["train.steps"])
    train, valid = read_metrics(os.path.join(d, "metrics.jsonl"))
    if steps not in valid:
        fail("%s: no final evaluation at step %d (the run has not finished)" % (d, steps))
    final = valid[steps]
    mlm = cfg["objective.type"] == "mlm"
    loss = num(final, "valid_loss")
    # A diverged run (trainer: valid_loss null and diverged_at_step) has no comparable numbers.
    diverged = None
    if loss is None:
        diverged = final.get("diverged_at_step") if isinstance(final.get("diverged_at_step"), int) else steps
    tps = [num(r, "tokens_per_s") for r in train.values() if not r.get("skipped")]
    return {
        "mlm": mlm, "steps": steps, "tokens_seen": int(num(final, "tokens_seen") or 0),
        "valid_tokens": None if num(final, "valid_tokens") is None else int(final["valid_tokens"]),
        "whole_split": bool(final.get("whole_split", 0)),
        "diverged_at_step": diverged, "dir": d,
        "valid_loss": loss,
        "valid_accuracy": num(final, "valid_accuracy") if mlm and loss is not None else None,
        "valid_perplexity": None if mlm or loss is None else num(final, "valid_perplexity"),
        "tokens_per_s": median([x for x in tps if x is not None]),
        "peak_rss_mib": peak_rss_mib(d), "model_mem_mib": model_memory_mib(d),
        "curve": [(num(v, "tokens_seen"), num(v, "valid_loss")) for _, v in sorted(valid.items())
                  if num(v, "tokens_seen") is not None and num(v, "valid_loss") is not None],
    }


def prr_of(run, ref):
    """PRR on a higher-is-better metric: accuracy (MLM) or 1/perplexity (CLM); and on
    exp(-loss) for both, the likelihood per token, so loss differences read as ratios.  None
    where either run has no number (diverged)."""
    if run["valid_loss"] is None or ref["valid_loss"] is None:
        return None, None
    if run["mlm"]:
        prr = 100.0 * run["valid_accuracy"] / ref["valid_accuracy"] if ref["valid_accuracy"] > 0 else None
    else:
        prr = 100.0 * ref["valid_perplexity"] / run["valid_perplexity"]
    return prr, 100.0 * math.exp(ref["valid_loss"] - run["valid_loss"])


def collect(outdir, types, seeds=1):
    rows = []
    for t in types:
        dirs = run_dirs(outdir, t, seeds)
        runs = [collect_run(d) for d in dirs]
        att, total = params_of(os.path.join(dirs[0], "params.txt"))
        row = {"type": t, "mlm": runs[0]["mlm"], "steps": runs[0]["steps"], "seeds": seeds,
               "tokens_seen": runs[0]["tokens_seen"], "valid_tokens": runs[0]["valid_tokens"],
               "whole_split": all(r["whole_split"] for r in runs),
               "attention_weights": att, "total_params": total, "runs": runs}
        for k in ["valid_loss", "valid_accuracy", "valid_perplexity", "tokens_per_s", "peak_rss_mib",
                  "model_mem_mib"]:
            row[k], row[k + "_sd"] = mean_sd([r[k] for r in runs])
        # One diverged seed makes the type's mean meaningless: no number, and the table says why.
        row["diverged"] = ["%s at step %d" % (os.path.relpath(r["dir"], outdir), r["diverged_at_step"])
                           for r in runs if r["diverged_at_step"] is not None]
        row["diverged_at_step"] = min((r["diverged_at_step"] for r in runs if r["diverged_at_step"] is not None),
                                      default=None)
        if row["diverged"]:
            for k in ["valid_loss", "valid_accuracy", "valid_perplexity"]:
                row[k] = row[k + "_sd"] = None
            sys.stderr.write("compare: %s diverged (%s): no loss for it in the table\n" % (t, ", ".join(row["diverged"])))
        # peak memory is a maximum over runs, not a mean
        rss = [r["peak_rss_mib"] for r in runs if r["peak_rss_mib"] is not None]
        row["peak_rss_mib"] = max(rss) if rss else None
        # The curve: mean and sd over seeds at each evaluated step.
        points = {}
        for r in runs:
            for x, y in r["curve"]:
                points.setdefault(x, []).append(y)
        row["curve"] = [(x,) + mean_sd(ys) for x, ys in sorted(points.items())]
        rows.append(row)
    if len({r["mlm"] for r in rows}) != 1:
        fail("the types were trained with different objectives")
    ref = next((r for r in rows if r["type"] == "mha"), None)
    for r in rows:
        if ref is None:
            r["prr"] = r["prr_loss"] = r["prr_sd"] = r["prr_loss_sd"] = None
            r["gap"] = r["separated"] = None
            continue
        # Seed k of a type against seed k of mha (the same data order and masks): paired.
        pairs = [prr_of(a, b) for a, b in zip(r["runs"], ref["runs"])]
        if r["diverged"] or ref["diverged"]:
            pairs = []
        r["prr"], r["prr_sd"] = mean_sd([p[0] for p in pairs])
        r["prr_loss"], r["prr_loss_sd"] = mean_sd([p[1] for p in pairs])
        # The rule: a type differs from mha when mean ± sd of its final validation loss and
        # mha's do not overlap, i.e. |gap| > sd(type) + sd(mha).  Needs >= 2 seeds.
        r["gap"] = None if r["valid_loss"] is None or ref["valid_loss"] is None else r["valid_loss"] - ref["valid_loss"]
        if r is ref or r["valid_loss_sd"] is None or ref["valid_loss_sd"] is None or r["gap"] is None:
            r["separated"] = None
        else:
            r["separated"] = abs(r["gap"]) > r["valid_loss_sd"] + ref["valid_loss_sd"]
    return rows


CSV_COLUMNS = ["type", "attention_weights", "total_params", "steps", "tokens_seen", "seeds", "valid_tokens",
               "valid_loss", "valid_loss_sd", "valid_accuracy", "valid_accuracy_sd", "valid_perplexity",
               "valid_perplexity_sd", "prr", "prr_sd", "prr_loss", "prr_loss_sd", "gap_to_mha", "separated",
               "tokens_per_s", "peak_rss_mib", "model_mem_mib", "diverged_at_step"]


def write_csv(path, rows):
    mlm = rows[0]["mlm"]
    drop = ("valid_perplexity", "valid_perplexity_sd") if mlm else ("valid_accuracy", "valid_accuracy_sd")
    cols = [c for c in CSV_COLUMNS if c not in drop]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            out = []
            for c in cols:
                v = r.get({"gap_to_mha": "gap"}.get(c, c))
                if isinstance(v, bool):
                    v = "yes" if v else "no"
                out.append("" if v is None else ("%.8g" % v if isinstance(v, float) else v))
            w.writerow(out)


def pm(x, sd, digits):
    """mean ± sd, or the mean alone (one seed)."""
    if x is None:
        return ""
    return fmt(x, digits) + ("" if sd is None else " ± " + fmt(sd, digits))


def write_md(path, rows, base_cfg):
    mlm = rows[0]["mlm"]
    seeds = rows[0]["seeds"]
    metric = "masked-token accuracy" if mlm else "perplexity"
    scope = ("the whole validation split (%s scored tokens)" % "{:,}".format(rows[0]["valid_tokens"])
             if rows[0]["whole_split"] and rows[0]["valid_tokens"] else
             "the same %s global batches of the valid split" % base_cfg["train.final_eval_batches"])
    seed_text = ("seed %s" % base_cfg["train.seed"] if seeds == 1 else
                 "%d seeds (train.seed and data.shuffle_seed from %s and %s up)"
                 % (seeds, base_cfg["train.seed"], base_cfg["data.shuffle_seed"]))
    lines = ["# Attention variants compared", "",
             "Model: %s, %s layers, D=%s, n=%s, d=%s, norm %s; objective %s; %s steps x global batch %s x %s "
             "tokens = %s tokens per type and run, lr %s, %s; final evaluation on %s, identical for every type and seed."
             % (base_cfg["model.arch"], base_cfg["model.layers"], base_cfg["model.hidden"],
                base_cfg["model.heads"], base_cfg["model.head_dim"], base_cfg["model.norm"], base_cfg["objective.type"],
                rows[0]["steps"], base_cfg["train.global_batch"], base_cfg["data.seq_len"],
                "{:,}".format(rows[0]["tokens_seen"]), base_cfg["optim.lr"], seed_text, scope), ""]
    head = ["type", "attention weights (no biases)", "total parameters", "valid loss",
            "accuracy" if mlm else "perplexity", "PRR (%s)" % ("accuracy" if mlm else "1/perplexity"),
            "PRR (exp(-loss))"]
    if seeds > 1:
        head.append("loss gap to mha > seed noise?")
    head += ["tokens/s", "peak RSS MiB", "model memory MiB"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for r in rows:
        cells = [r["type"], "{:,}".format(r["attention_weights"]), "{:,}".format(r["total_params"]),
                 "diverged (%s)" % ", ".join(r["diverged"]) if r["diverged"] else pm(r["valid_loss"], r["valid_loss_sd"], 4),
                 pm(r["valid_accuracy"], r["valid_accuracy_sd"], 4) if mlm else
                 pm(r["valid_perplexity"], r["valid_perplexity_sd"], 2),
                 pm(r["prr"], r["prr_sd"], 1), pm(r["prr_loss"], r["prr_loss_sd"], 1)]
        if seeds > 1:
            cells.append("" if r["separated"] is None else
                         "%s (%+.4f)" % ("yes" if r["separated"] else "no", r["gap"]))
        cells += [fmt(r["tokens_per_s"], 0), fmt(r["peak_rss_mib"], 1), fmt(r["model_mem_mib"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["",
              "- Losses and %s are the final evaluation of each run (metrics.jsonl), on %s." % (metric, scope),
              "- PRR = metric(type) / metric(mha) x 100 on a higher-is-better metric: %s; and "
              "PRR (exp(-loss)) = exp(-loss(type)) / exp(-loss(mha)) x 100 = 100 exp(loss(mha) - loss(type))."
              % ("masked-token accuracy" if mlm else "1/perplexity, i.e. perplexity(mha)/perplexity(type)")
              + ("" if mlm else " (the two agree: perplexity = exp(loss))")]
    if seeds > 1:
        lines += ["- With several seeds: mean ± sample standard deviation over the seeds; PRR is computed per "
                  "seed against mha's run with the same seed (same data order and masks), then averaged.",
                  "- The rule for \"gap > seed noise\": |mean loss(type) - mean loss(mha)| > sd(type) + sd(mha), "
                  "i.e. the intervals mean ± sd do not overlap; the signed gap is in brackets."]
    lines += ["- Parameters are `mhetrain params` of the same resolved config: attention weight "
              "matrices without biases (the papers' count), and every parameter.",
              "- tokens/s: median over the logged training steps (the machine's load at the time "
              "counts); peak RSS: largest resident set of the trainer process (GNU time %M, max "
              "over restarts and seeds; under mpirun the largest rank); model memory: the trainer's own "
              "estimate per worker (parameters+gradients, optimizer, activations)."]
    if not any(r["type"] == "mha" for r in rows):
        lines.append("- No mha run, so no PRR.")
    lines += ["", "![validation loss against tokens seen](curves.png)", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def plot(outdir, rows):
    data = os.path.join(outdir, "curves.dat")
    with open(data, "w") as f:
        # One gnuplot data block per type, two blank lines apart (index i): tokens, mean, sd.
        for r in rows:
            f.write("# %s\n" % r["type"])
            for x, y, sd in r["curve"]:
                f.write("%.0f %.8g %.8g\n" % (x, y, sd or 0.0))
            f.write("\n\n")
    titles = " ".join(r["type"] for r in rows)
    png = os.path.join(outdir, "curves.png")
    subprocess.run(["gnuplot", "-e", "datafile='%s'; outfile='%s'; titles='%s'; n=%d; bands=%d"
                    % (data, png, titles, len(rows), 1 if rows[0]["seeds"] > 1 else 0),
                    os.path.join(HERE, "curves.gp")], check=True)


def cmd_summarise(outdir, args):
    seeds = 1
    if len(args) >= 2 and args[0] == "--seeds":
        seeds = int(args[1])
        args = args[2:]
    if not args:
        fail("summarise: no types")
    rows = collect(outdir, args, seeds)
    base_cfg = read_resolved(os.path.join(run_dirs(outdir, args[0], seeds)[0], "resolved.yaml"))
    write_csv(os.path.join(outdir, "results.csv"), rows)
    write_md(os.path.join(outdir, "results.md"), rows, base_cfg)
    plot(outdir, rows)


def main(argv):
    if len(argv) >= 3 and argv[1] == "resolved":
        cmd_resolved(argv[2], argv[3:])
    elif len(argv) == 4 and argv[1] == "complete":
        sys.exit(0 if is_complete(argv[2], int(argv[3])) else 1)
    elif len(argv) >= 4 and argv[1] == "summarise":
        cmd_summarise(argv[2], argv[3:])
    else:
        fail("usage: compare_util.py resolved FILE KEY... | complete DIR STEPS | summarise OUTDIR [--seeds N] TYPE...")


if __name__ == "__main__":
    main(sys.argv)
