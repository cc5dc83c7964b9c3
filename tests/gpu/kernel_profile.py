"""Summarises one of check.sh's kernels_*.csv (Nsight Compute's GPU time of every kernel of a
gpu_bench run of three steps): the last step's kernels grouped by name, with their share of the
step's total GPU time, and the step's total against the wall time measured without the profiler.

  kernel_profile.py KERNELS.csv [--wall-ms MS] [--top N]

Steps are told apart by the optimizer's kernel (the step's last launch): the last step is
everything after the second-to-last optimizer kernel.  Standard library only.
"""
import argparse
import collections
import csv
import re


def rows(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        if r["Metric Name"] == "gpu__time_duration.sum":
            yield r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}.get(
                r["Metric Unit"], 1e-9)


def short(name):
    name = re.sub(r"\(.*", "", name)          # drop the parameter list
    name = re.sub(r"^void ", "", name)
    return name[:70]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--wall-ms", type=float, default=0)
    p.add_argument("--top", type=int, default=25)
    a = p.parse_args()
    ks = list(rows(a.csv))
    opt = [i for i, (n, _) in enumerate(ks) if re.match(r"(adamw|adam_|lamb)", short(n))]
    start = opt[-2] + 1 if len(opt) >= 2 else 0
    step = ks[start:]
    total = sum(t for _, t in step)
    by = collections.defaultdict(lambda: [0, 0.0])
    for n, t in step:
        by[short(n)][0] += 1
        by[short(n)][1] += t
    print(f"{a.csv}: {len(ks)} kernels in all, {len(step)} in the last step, GPU time {1e3 * total:.2f} ms"
          + (f" of a {a.wall_ms:.2f} ms step ({100 * total / a.wall_ms * 1e-3 * 1e3:.0f}% busy)" if a.wall_ms else ""))
    for name, (calls, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[: a.top]:
        print(f"  {name:70s} {calls:4d} {1e3 * t:9.3f} ms {100 * t / total:5.1f}%")


if __name__ == "__main__":
    main()
