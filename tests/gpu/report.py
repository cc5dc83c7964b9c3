"""Makes check.sh's report.json from its steps.tsv and log (no third-party packages: it runs on the
bare GPU machine).  usage: report.py STEPS.tsv CHECK.log REPORT.json GPU DRIVER SECONDS

report.json: {date, gpu, driver, seconds, steps: [{name, status, seconds, detail}],
results: {prefix: [ {field: value} per line ]}, opclass: {step: [lines of the cost model's table]}}
where a result line is `prefix: key=value key=value ...` (torch-result, attn-result, sdpa-result,
cost-result, compare-result) or gpu_bench's `throughput:` line.  compare-result: one per attention
type of the compare group (compare.sh: attention, steps, train_s, tokens_per_s, valid_loss, ...).
"""
import datetime
import json
import re
import sys

PREFIXES = ("torch-result", "attn-result", "sdpa-result", "cost-result", "compare-result")


def fields(text):
    out = {}
    for key, val in re.findall(r"(\w+)=(\S+)", text):
        try:
            out[key] = float(val) if re.fullmatch(r"[-+]?[0-9.]+(e[-+]?[0-9]+)?", val) else val
        except ValueError:
            out[key] = val
    return out


def summary(results):
    """One row per timed config: our step (gpu_bench, no per-op synchronisation), PyTorch's on the
    same GPU, and the cost model's bound and expected where the opclass step ran the same config:
    the rows CALIBRATION.md records."""
    rows = {}
    for t in results["throughput"]:
        # time_<cfg>_<seq>x<batch> (one micro-batch per step) or mfu_<cfg>_<seq>x<batch>_a<accum>
        # (check.sh's MFU configs: accum micro-batches per optimizer step)
        m = re.match(r"(?:time|mfu)_(.+?)_(\d+)x(\d+)(?:_a(\d+))?$", t["step"] or "")
        if not m:
            continue
        cfg, seq, batch, accum = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4) or 1)
        rows[(cfg, seq, batch, accum)] = {"config": cfg, "seq": seq, "batch": batch, "accum": accum,
                                          "tokens_per_s": t["tokens_per_s"],
                                          "step_ms": 1e3 * seq * batch * accum / t["tokens_per_s"],
                                          "mfu_percent": t["mfu_percent"]}
    for r in results["torch-result"]:
        if r.get("compile"):
            continue
        cfg = ("bert-base" if r["arch"] == "bert" else "gpt2-small") + "-" + r["attention"].replace("_", "-")
        key = (cfg, int(r["seq"]), int(r["batch"]), int(r.get("accum", 1)))
        if key in rows:
            rows[key]["torch_step_ms"] = r["step_ms"]
            rows[key]["ours_over_torch"] = rows[key]["step_ms"] / r["step_ms"]
    for r in results["cost-result"]:
        m = re.match(r"opclass_(.+?)_(\d+)x(\d+)$", r.get("step") or "")
        if m and (m.group(1), int(m.group(2)), int(m.group(3)), 1) in rows:
            row = rows[(m.group(1), int(m.group(2)), int(m.group(3)), 1)]
            row["bound_ms"] = r.get("predicted_step_ms")
            row["expected_ms"] = r.get("expected_gpu_ms")
    return list(rows.values())


def main():
    steps_path, log_path, report_path, gpu, driver, seconds = sys.argv[1:7]
    steps = []
    with open(steps_path) as f:
        for line in f:
            name, status, secs, detail = (line.rstrip("\n").split("\t") + [""] * 4)[:4]
            steps.append({"name": name, "status": status, "seconds": float(secs or 0), "detail": detail})
    results = {p: [] for p in PREFIXES}
    results["throughput"] = []
    opclass, current, in_table = {}, None, False
    with open(log_path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = re.match(r"== (\S+) \(limit", line)
            if m:
                current, in_table = m.group(1), False
                continue
            for p in PREFIXES:
                if line.startswith(p + ":"):
                    results[p].append(dict(fields(line[len(p) + 1:]), step=current))
            m = re.match(r"throughput: ([0-9.]+) tokens/s, ([0-9.]+) TFLOP/s(?:, MFU ([0-9.]+)%)?", line)
            if m:
                results["throughput"].append({"step": current, "tokens_per_s": float(m.group(1)),
                                              "tflops": float(m.group(2)),
                                              "mfu_percent": float(m.group(3)) if m.group(3) else None})
            if current and current.startswith("opclass_"):
                if line.startswith("predicted") or line.startswith("cost model:") or line.startswith("launches"):
                    in_table = True
                if in_table:
                    opclass.setdefault(current, []).append(line)
                if line.startswith("cost-result:"):
                    in_table = False
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "gpu": gpu, "driver": driver, "seconds": float(seconds), "steps": steps,
              "results": results, "opclass": opclass, "summary": summary(results)}
    with open(report_path, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
