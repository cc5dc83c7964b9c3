#!/usr/bin/env bash
# train.init_from starts a new run from another run's weights (not its optimizer or position):
# with a negligible learning rate the new run evaluates like the checkpoint it started from,
# and it counts its own steps from 0.
source "$(dirname "$0")/lib.sh"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/a" 2>"$WORK/a.log" || { cat "$WORK/a.log"; fail "run a"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/b" train.init_from="$WORK/a" train.steps=1 \
  optim.lr=1e-12 optim.min_lr=0 optim.warmup_steps=0 2>"$WORK/b.log" || { cat "$WORK/b.log"; fail "run b"; }
grep -q "initialised weights from $WORK/a/checkpoints/step_00000008" "$WORK/b.log" || { cat "$WORK/b.log"; fail "no init message"; }
grep -q "resumed from" "$WORK/b.log" && fail "init_from must not resume"
$PY - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
def last_valid(run):
    return [r for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl")) if r.get("split") == "valid"][-1]
a, b = last_valid("a"), last_valid("b")
err = abs(a["valid_loss"] - b["valid_loss"]) / a["valid_loss"]
print(f"valid loss: checkpoint {a['valid_loss']:.6f}, new run {b['valid_loss']:.6f} (relative {err:.2e})")
assert b["step"] == 1, b
assert err <= 1e-5, "the new run did not start from the checkpoint's weights"
PY
echo PASS
