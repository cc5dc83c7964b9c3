#!/usr/bin/python3
"""The MHE paper's table form (standard library only): per task and per benchmark group, the
mean score, PRR against mha and PEoP against sha, each as mean ± sd over seeds, beside the
attention-sublayer parameter count of each type.  Used by finetune_util.py summarise and, on the
paper's own published numbers, by tests/compare/test_paper_table.py, so the test exercises the
code that writes the user's table.

PEoP (performance elasticity of parameters, Xue & Aletras 2023) of a type against sha:

    PEoP = ((S - S_sha) / S_sha) / ((P - P_sha) / P_sha)

S the score, P the attention parameters (weights without biases, `mhetrain params`).  It is
computed per seed (sha's run of the same seed), then averaged, like PRR.
"""
import csv
import math

# Benchmark groups by task format (trainer/config/task_formats.c); tsv/jsonl tasks have none.
GROUPS = [
    ("GLUE", ("cola", "sst2", "mrpc", "qqp", "stsb", "mnli", "mnli_mm", "qnli", "rte", "wnli")),
    ("SuperGLUE", ("boolq", "cb", "superglue_rte", "wic")),
    ("SQuAD v1.1", ("squad1",)),
    ("SQuAD v2.0", ("squad2",)),
]
# Metrics already in percent (the official SQuAD script's scale); the others are in [0, 1] or
# [-1, 1] and are scaled by 100 so that a group mean is on the paper's scale.
PERCENT_METRICS = {"squad_em", "squad_f1", "has_ans_em", "has_ans_f1", "no_ans_acc", "best_exact", "best_f1"}
MARK = "†"


def group_of(fmt):
    for name, formats in GROUPS:
        if fmt in formats:
            return name
    return None


def as_percent(metric, value):
    return value if metric in PERCENT_METRICS else 100.0 * value


def mean_sd(xs):
    """Mean and sample standard deviation; sd is None for one value, both None for none."""
    if not xs or any(x is None for x in xs):
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


def prr(score, ref):
    return None if score is None or not ref else 100.0 * score / ref


def peop(score, params, score_sha, params_sha):
    """None where it is undefined: no sha score, or as many parameters as sha (sha itself)."""
    if score is None or not score_sha or params is None or not params_sha or params == params_sha:
        return None
    return ((score - score_sha) / score_sha) / ((params - params_sha) / params_sha)


def inside_spread(xs, refs):
    """The screening rule of compare.sh: the difference of the means is no larger than the sum
    of the two sample standard deviations.  None with fewer than two seeds (no spread)."""
    m, sd = mean_sd(xs)
    mr, sdr = mean_sd(refs)
    if sd is None or sdr is None:
        return None
    return abs(m - mr) <= sd + sdr


def group_scores(task_scores, task_groups):
    """task_scores[(type, task)] = [score per seed] -> [(type, group)] = [mean over the group's
    tasks, per seed]."""
    out = {}
    for name, _ in GROUPS:
        tasks = [t for t, g in task_groups.items() if g == name]
        if not tasks:
            continue
        for typ in sorted({k[0] for k in task_scores}):
            per_task = [task_scores[(typ, t)] for t in tasks if (typ, t) in task_scores]
            if len(per_task) != len(tasks):
                continue
            out[(typ, name)] = [sum(s[k] for s in per_task) / len(per_task) for k in range(len(per_task[0]))]
    return out


def build(types, units, scores, params):
    """rows[(type, unit)] for every type and unit (a task or a group): score, PRR and PEoP as
    mean/sd over seeds with their inside-the-spread flags.  scores[(type, unit)] is the list
    of per-seed scores (the same seed order for every type); params[type] may be None."""
    rows = {}
    for typ in types:
        for unit in units:
            s = scores.get((typ, unit))
            if s is None:
                continue
            r = {"type": typ, "unit": unit, "seeds": len(s), "params": params.get(typ)}
            r["score"], r["score_sd"] = mean_sd(s)
            ref = scores.get(("mha", unit))
            if ref is not None:
                r["prr"], r["prr_sd"] = mean_sd([prr(a, b) for a, b in zip(s, ref)])
                r["prr_inside"] = None if typ == "mha" else inside_spread(s, ref)
            base = scores.get(("sha", unit))
            if base is not None and typ != "sha":
                p = [peop(a, params.get(typ), b, params.get("sha")) for a, b in zip(s, base)]
                r["peop"], r["peop_sd"] = mean_sd(p)
                r["peop_inside"] = inside_spread(s, base) if r["peop"] is not None else None
            rows[(typ, unit)] = r
    return rows


CSV_COLUMNS = ["type", "unit", "kind", "attention_params", "seeds", "score", "score_sd", "prr", "prr_sd",
               "prr_inside_spread", "peop", "peop_sd", "peop_inside_spread"]


def write_csv(path, rows, types, units, kinds):
    def cell(v):
        if v is None:
            return ""
        if isinstance(v, bool):
            return "yes" if v else "no"
        return "%.8g" % v if isinstance(v, float) else str(v)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CSV_COLUMNS)
        for typ in types:
            for unit in units:
                r = rows.get((typ, unit))
                if r is None:
                    continue
                w.writerow([typ, unit, kinds[unit], cell(r["params"]), r["seeds"], cell(r["score"]),
                            cell(r["score_sd"]), cell(r.get("prr")), cell(r.get("prr_sd")),
                            cell(r.get("prr_inside")), cell(r.get("peop")), cell(r.get("peop_sd")),
                            cell(r.get("peop_inside"))])


def fmt(m, sd, digits, inside=None):
    """'80.6', '80.6 ± 0.3', with the marker when the difference is inside the seed spread."""
    if m is None:
        return "–"
    text = "%.*f" % (digits, m) + ("" if sd is None else " ± %.*f" % (digits, sd))
    return text + (" " + MARK if inside else "")


def fmt_params(n):
    return "–" if n is None else "%.2fM" % (n / 1e6)


def markdown(rows, types, units, score_digits=1):
    """The paper's layout: one row per type, #params, then score | PRR | PEoP per unit."""
    head = ["attention", "#params"]
    for u in units:
        head += ["%s score" % u, "%s PRR" % u, "%s PEoP" % u]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (3 * len(units))]
    for typ in types:
        present = [rows.get((typ, u)) for u in units]
        if not any(present):
            continue
        params = next((r["params"] for r in present if r), None)
        cells = [typ, fmt_params(params)]
        for r in present:
            if r is None:
                cells += ["–"] * 3
                continue
            cells.append(fmt(r["score"], r["score_sd"], score_digits))
            cells.append(fmt(r.get("prr"), r.get("prr_sd"), 1, r.get("prr_inside")))
            cells.append("–" if r["type"] == "sha" else fmt(r.get("peop"), r.get("peop_sd"), 2, r.get("peop_inside")))
        lines.append("| " + " | ".join(cells) + " |")
    return lines
