"""Checks on training runs: metrics files, checkpoints, TensorBoard events.

  check.py losses-close A.jsonl B.jsonl RTOL [FIRST_STEP]   per-step train losses agree
  check.py weights-close A.safetensors B.safetensors RTOL  every tensor: |a-b|/|b| <= RTOL
  check.py loss-falls RUN_DIR                               the last valid loss < the first
  check.py skipped RUN_DIR STEP                             step STEP was skipped, later ones not
  check.py tensorboard RUN_DIR                              event-file scalars == JSON lines
  check.py mfu-valid RUN_DIR                                every logged MFU is in (0, 1]
  check.py valid-close A_RUN B_RUN FINAL_RTOL ANY_RTOL      A's valid losses vs B's: the last
                                                            within FINAL_RTOL, every one within ANY_RTOL
"""
import glob
import json
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "reference"))


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def train_rows(path):
    out = {}
    for r in rows(path):
        if "loss" in r and r.get("split") != "valid":
            out[r["step"]] = r  # a resumed run may repeat a step: the last one counts
    return out


def losses_close(a, b, rtol, first=1):
    ra, rb = train_rows(a), train_rows(b)
    steps = sorted(s for s in ra if s >= first)
    if not steps or steps != sorted(s for s in rb if s >= first):
        sys.exit(f"FAIL: steps differ: {sorted(ra)} vs {sorted(rb)}")
    worst = 0.0
    for s in steps:
        x, y = ra[s]["loss"], rb[s]["loss"]
        err = abs(x - y) / max(abs(y), 1e-30)
        worst = max(worst, err)
        if err > rtol:
            sys.exit(f"FAIL: step {s}: loss {x!r} vs {y!r} (relative error {err:.3g} > {rtol})")
    print(f"losses agree over {len(steps)} steps (worst relative error {worst:.3g} <= {rtol})")


def weights_close(a, b, rtol):
    """Relative error over the whole weight vector.  Per tensor it is meaningless for the key
    biases: their gradient is analytically zero, Adam turns the rounding noise into lr-sized
    steps, so they hold noise (reported, not asserted)."""
    import st_io
    import numpy as np
    ta, tb = st_io.read(a)[0], st_io.read(b)[0]
    if sorted(ta) != sorted(tb):
        sys.exit("FAIL: tensor names differ")
    diff2 = ref2 = 0.0
    worst, worst_name = 0.0, ""
    for k in ta:
        x, y = np.asarray(ta[k], dtype=np.float64), np.asarray(tb[k], dtype=np.float64)
        if x.shape != y.shape:
            sys.exit(f"FAIL: {k}: shapes {x.shape} vs {y.shape}")
        d2, r2 = float(np.sum((x - y) ** 2)), float(np.sum(y ** 2))
        diff2, ref2 = diff2 + d2, ref2 + r2
        if r2 > 0 and math.sqrt(d2 / r2) > worst:
            worst, worst_name = math.sqrt(d2 / r2), k
    err = math.sqrt(diff2 / max(ref2, 1e-300))
    print(f"{len(ta)} tensors: relative error of all weights {err:.3g} (worst tensor {worst_name} {worst:.3g})")
    if err > rtol:
        sys.exit(f"FAIL: relative error {err:.3g} > {rtol}")


def loss_falls(run):
    v = [r for r in rows(os.path.join(run, "metrics.jsonl")) if r.get("split") == "valid"]
    if len(v) < 2:
        sys.exit(f"FAIL: expected at least two evaluations, got {len(v)}")
    first, last = v[0]["valid_loss"], v[-1]["valid_loss"]
    print(f"valid loss {first:.4f} -> {last:.4f}")
    if not last < first:
        sys.exit("FAIL: the validation loss did not fall")


def skipped(run, step):
    tr = train_rows(os.path.join(run, "metrics.jsonl"))
    if tr.get(step, {}).get("skipped") != 1:
        sys.exit(f"FAIL: step {step} not marked skipped: {tr.get(step)}")
    later = [s for s in tr if s > step]
    if not later or any(tr[s]["skipped"] for s in later) or any(tr[s]["loss"] is None for s in later):
        sys.exit("FAIL: training did not continue normally after the skipped step")
    print(f"step {step} skipped, {len(later)} later steps normal")


def tensorboard(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    files = glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*"))
    if len(files) != 1:
        sys.exit(f"FAIL: expected one event file, found {files}")
    acc = EventAccumulator(files[0])
    acc.Reload()
    tags = acc.Tags()["scalars"]
    want = {"train/loss": "loss", "train/lr": "lr", "train/grad_norm": "grad_norm", "valid/loss": "valid_loss"}
    metrics = rows(os.path.join(run, "metrics.jsonl"))
    checked = 0
    for tag, key in want.items():
        if tag not in tags:
            sys.exit(f"FAIL: tag {tag} missing from {tags}")
        tb = {e.step: e.value for e in acc.Scalars(tag)}
        js = {r["step"]: r[key] for r in metrics if key in r}
        if sorted(tb) != sorted(js):
            sys.exit(f"FAIL: {tag}: steps {sorted(tb)} vs JSON lines {sorted(js)}")
        for s in tb:
            # TensorBoard stores float32: equal to the JSON value rounded to float32.
            import struct
            f32 = struct.unpack("f", struct.pack("f", js[s]))[0]
            if tb[s] != f32:
                sys.exit(f"FAIL: {tag} step {s}: {tb[s]!r} vs {js[s]!r}")
            checked += 1
    print(f"{checked} scalars read back by TensorBoard equal the JSON lines")


def mfu_valid(run):
    # MFU counts only the flops the step computes against the best matmul rate of the process,
    # so it can never exceed 1 (DESIGN.md §9).
    m = [r["mfu"] for r in rows(os.path.join(run, "metrics.jsonl")) if "mfu" in r]
    if not m:
        sys.exit("FAIL: no MFU logged")
    print(f"MFU over {len(m)} logs: {min(m):.3f} .. {max(m):.3f}")
    if not all(0 < x <= 1 for x in m):
        sys.exit("FAIL: an MFU outside (0, 1]")


def valid_close(a, b, final_rtol, any_rtol):
    va = [r for r in rows(os.path.join(a, "metrics.jsonl")) if r.get("split") == "valid"]
    vb = [r for r in rows(os.path.join(b, "metrics.jsonl")) if r.get("split") == "valid"]
    if not va or [r["step"] for r in va] != [r["step"] for r in vb]:
        sys.exit(f"FAIL: evaluation steps differ: {[r['step'] for r in va]} vs {[r['step'] for r in vb]}")
    worst = 0.0
    for x, y in zip(va, vb):
        err = abs(x["valid_loss"] - y["valid_loss"]) / abs(y["valid_loss"])
        worst = max(worst, err)
        print(f"step {x['step']}: valid loss {x['valid_loss']:.5f} vs {y['valid_loss']:.5f} (rel {err:.2e})")
    last = abs(va[-1]["valid_loss"] - vb[-1]["valid_loss"]) / abs(vb[-1]["valid_loss"])
    if last > final_rtol:
        sys.exit(f"FAIL: final valid loss differs by {last:.3e} > {final_rtol}")
    if worst > any_rtol:
        sys.exit(f"FAIL: a valid loss differs by {worst:.3e} > {any_rtol}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "losses-close":
        losses_close(args[0], args[1], float(args[2]), int(args[3]) if len(args) > 3 else 1)
    elif cmd == "weights-close":
        weights_close(args[0], args[1], float(args[2]))
    elif cmd == "loss-falls":
        loss_falls(args[0])
    elif cmd == "skipped":
        skipped(args[0], int(args[1]))
    elif cmd == "tensorboard":
        tensorboard(args[0])
    elif cmd == "mfu-valid":
        mfu_valid(args[0])
    elif cmd == "valid-close":
        valid_close(args[0], args[1], float(args[2]), float(args[3]))
    else:
        sys.exit(f"unknown check {cmd}")


if __name__ == "__main__":
    main()
