#!/usr/bin/python3
"""Fine-tuning half of launch/compare.sh (standard library only).

  finetune_util.py tasks OUTDIR ARG...
      writes OUTDIR/tasks/NAME.yaml for every task: ARG is a task YAML (copied; NAME is its file
      name) or a folder with a tests/finetune/make_tasks.py manifest.json (each of its tasks,
      with the default fine-tuning budget below); prints the names, one per line
  finetune_util.py done DIR              exit 0 when DIR holds a finished fine-tuning run
  finetune_util.py summarise OUTDIR SEEDS TASKS TYPE...
      writes OUTDIR/finetune.csv and appends the fine-tuning table to OUTDIR/results.md
"""
import csv
import json
import math
import os
import re
import sys

import paper_table

# The budget a derived task gets when the folder form is used: a few epochs of a tiny model
# (tests/finetune/README.md: about a minute per epoch on 2 cores).  Write a task YAML to change it.
DEFAULT_BUDGET = """optim:
  lr: 3e-4
  warmup_steps: 20
  schedule: linear
  weight_decay: 0.01
train:
  steps: 0
  tokens: 0
  global_batch: 32
  micro_batch: 16
  eval_every: 0
  checkpoint_every: 0
  keep_last: 1
  log_every: 20
"""


def fail(msg):
    sys.stderr.write("compare: %s\n" % msg)
    sys.exit(2)


def cmd_tasks(outdir, args):
    dest = os.path.join(outdir, "tasks")
    os.makedirs(dest, exist_ok=True)
    names = []
    for arg in args:
        if os.path.isdir(arg):
            path = os.path.join(arg, "manifest.json")
            if not os.path.exists(path):
                fail("--finetune %s: a folder needs the manifest.json of tests/finetune/make_tasks.py" % arg)
            try:
                tasks = json.load(open(path))["tasks"]
            except (ValueError, KeyError) as e:
                fail("%s: not a make_tasks manifest (%s)" % (path, e))
            root = os.path.abspath(arg)
            for name, t in sorted(tasks.items()):
                text = "task:\n  type: %s\n  format: %s\n  train_file: %s\n  dev_file: %s\n  metric: %s\n  epochs: 3\n" % (
                    t["type"], t["format"], os.path.join(root, t["train_file"]), os.path.join(root, t["dev_file"]),
                    t["metric"])
                if t["type"] == "span":
                    # make_tasks' questions are at most 30 words; half of a 64-token window
                    # still leaves the context room in the tiny configs.
                    text += "  max_query_len: 32\n"
                names.append((name, text + DEFAULT_BUDGET))
        elif arg.endswith((".yaml", ".yml")) and os.path.isfile(arg):
            text = open(arg).read()
            if "\ntask:" not in "\n" + text:
                fail("--finetune %s: no task: section" % arg)
            if "\nbase:" in "\n" + text:
                fail("--finetune %s: a task file must not name a base (the pretrained run's config is its base)" % arg)
            names.append((os.path.splitext(os.path.basename(arg))[0], text))
        else:
            fail("--finetune %s: expected a task .yaml or a make_tasks folder" % arg)
    seen = set()
    for name, text in names:
        if name in seen:
            fail("--finetune: two tasks named %s" % name)
        seen.add(name)
        new = os.path.join(dest, name + ".yaml")
        # A comparison is only continued under the tasks it started with.
        if os.path.exists(new) and open(new).read() != text:
            fail("%s changed since the runs started; use another -o or remove %s" % (new, new))
        with open(new, "w") as f:
            f.write(text)
        print(name)


def result(d):
    path = os.path.join(d, "finetune_result.json")
    return json.load(open(path)) if os.path.exists(path) else None


def mean_sd(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    return m, (math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None)


def pm(m, sd, digits=4):
    if m is None:
        return ""
    return "%.*f" % (digits, m) + ("" if sd is None else " ± %.*f" % (digits, sd))


def run_dir(outdir, t, seeds, k):
    return os.path.join(outdir, t) if seeds == 1 else os.path.join(outdir, t, "seed-%d" % k)


def cmd_summarise(outdir, seeds, tasks, types):
    seeds = int(seeds)
    tasks = tasks.split(",")
    res = {}  # (type, task) -> [result per seed]
    for t in types:
        for task in tasks:
            runs = []
            for k in range(1, seeds + 1):
                r = result(os.path.join(run_dir(outdir, t, seeds, k), "ft-" + task))
                if r is None:
                    fail("no finetune_result.json for %s/%s seed %d" % (t, task, k))
                runs.append(r)
            res[(t, task)] = runs
    metric = {task: res[(types[0], task)][0]["metric"] for task in tasks}
    rows = []
    for t in types:
        row = {"type": t}
        prrs = []
        for task in tasks:
            vals = [r["value"] for r in res[(t, task)]]
            row[task], row[task + "_sd"] = mean_sd(vals)
            row[task + "_trivial"] = res[(t, task)][0]["trivial"].get(metric[task])
            if ("mha", task) in res:
                # Seed k against mha's seed k (the same pretraining and fine-tuning seeds).
                ref = [r["value"] for r in res[("mha", task)]]
                p = [100.0 * v / b if b else None for v, b in zip(vals, ref)]
                row[task + "_prr"], row[task + "_prr_sd"] = mean_sd(p)
                prrs.append(p)
            else:
                row[task + "_prr"] = row[task + "_prr_sd"] = None
        # Average PRR over the tasks, per seed, then mean ± sd over seeds.
        if prrs and all(None not in p for p in prrs):
            avg = [sum(p[k] for p in prrs) / len(prrs) for k in range(seeds)]
            row["avg_prr"], row["avg_prr_sd"] = mean_sd(avg)
        else:
            row["avg_prr"] = row["avg_prr_sd"] = None
        rows.append(row)
    cols = ["type"]
    for task in tasks:
        cols += [task, task + "_sd", task + "_prr", task + "_prr_sd", task + "_trivial"]
    cols += ["avg_prr", "avg_prr_sd"]
    with open(os.path.join(outdir, "finetune.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else ("%.8g" % r[c] if isinstance(r[c], float) else r[c]) for c in cols])
    head = ["type"] + ["%s (%s)" % (task, metric[task]) for task in tasks] + ["%s PRR" % task for task in tasks] + ["average PRR"]
    lines = ["", "## Fine-tuning", "",
             "Each pretrained run fine-tuned on every task (`mhetrain finetune`, its seed), the dev score of "
             "its best epoch; %s." % ("one seed" if seeds == 1 else "mean ± sd over %d seeds" % seeds),
             "PRR = score(type) / score(mha) × 100 per task (per seed against mha's run of the same seed, "
             "then averaged); average PRR = the mean over tasks, as in the MHE paper's tables.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["type"]] + [pm(r[task], r[task + "_sd"]) for task in tasks] + \
                [pm(r[task + "_prr"], r[task + "_prr_sd"], 1) for task in tasks] + [pm(r["avg_prr"], r["avg_prr_sd"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    triv = ["trivial predictor"] + ["%.4f" % rows[0][task + "_trivial"] if rows[0][task + "_trivial"] is not None else ""
                                    for task in tasks] + [""] * (len(tasks) + 1)
    lines.append("| " + " | ".join(triv) + " |")
    lines.append("")
    lines += paper_lines(outdir, seeds, tasks, types, res)
    with open(os.path.join(outdir, "results.md"), "a") as f:
        f.write("\n".join(lines))


def attention_params(path):
    """The count the MHE paper's #params column gives: attention weights without biases."""
    if not os.path.exists(path):
        return None
    m = re.search(r"^attention weights \(no biases\):\s*(\d+)\s*$", open(path).read(), re.M)
    if not m:
        fail("%s: no attention weight count" % path)
    return int(m.group(1))


def paper_lines(outdir, seeds, tasks, types, res):
    """Writes paper_table.csv and returns the Markdown of the paper's table form."""
    first = {task: res[(types[0], task)][0] for task in tasks}
    task_groups = {task: paper_table.group_of(first[task]["format"]) for task in tasks}
    scores = {(t, task): [paper_table.as_percent(r["metric"], r["value"]) for r in res[(t, task)]]
              for t in types for task in tasks}
    groups = [g for g, _ in paper_table.GROUPS if g in task_groups.values()]
    scores.update(paper_table.group_scores(scores, task_groups))
    # random-init is no attention type: no parameter count, so no PEoP.
    params = {t: attention_params(os.path.join(run_dir(outdir, t, seeds, 1), "params.txt")) for t in types}
    units = groups + tasks
    rows = paper_table.build(types, units, scores, params)
    kinds = dict({g: "group" for g in groups}, **{t: "task" for t in tasks})
    paper_table.write_csv(os.path.join(outdir, "paper_table.csv"), rows, types, units, kinds)
    spread = ("one seed: no spread, so no marker" if seeds == 1 else
              "%s: the difference behind the cell (the score's to mha for PRR, to sha for PEoP) is inside "
              "the seed spread, |mean − mean_ref| ≤ sd + sd_ref" % paper_table.MARK)
    lines = ["## The MHE paper's table", "",
             "Scores in %% (metrics in [0, 1] × 100; SQuAD F1 as printed by its script), %s. A group's score "
             "is the mean of its tasks' scores, per seed. PRR = score / score(mha) × 100 and PEoP = "
             "((score − score(sha)) / score(sha)) / ((P − P(sha)) / P(sha)), P the attention weights "
             "without biases (#params, `mhetrain params`), both per seed against the run of the same seed, "
             "then averaged. %s (paper_table.csv)." % ("one seed" if seeds == 1 else
                                                       "mean ± sd over %d seeds" % seeds, spread), ""]
    if groups:
        lines += ["Benchmark groups (tasks by format: %s):" % ", ".join(
            "%s %s" % (g, "+".join(t for t in tasks if task_groups[t] == g)) for g in groups), ""]
        lines += paper_table.markdown(rows, types, groups) + [""]
    lines += ["Per task:", ""] + paper_table.markdown(rows, types, tasks) + [""]
    return lines


def main(argv):
    if len(argv) >= 4 and argv[1] == "tasks":
        cmd_tasks(argv[2], argv[3:])
    elif len(argv) == 3 and argv[1] == "done":
        sys.exit(0 if result(argv[2]) is not None else 1)
    elif len(argv) >= 6 and argv[1] == "summarise":
        cmd_summarise(argv[2], argv[3], argv[4], argv[5:])
    else:
        fail("usage: finetune_util.py tasks OUTDIR ARG... | done DIR | summarise OUTDIR SEEDS TASKS TYPE...")


if __name__ == "__main__":
    main(sys.argv)
