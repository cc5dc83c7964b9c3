#!/usr/bin/env bash
# runtime.precision bf16 (CPU): 8 steps straight vs 4 steps, stop, resume in bf16, 4 more:
# bit-identical weights and optimizer state and identical losses, as in fp32.  Checkpoints stay
# fp32 (every tensor F32) and an fp32 checkpoint resumes in bf16.
source "$(dirname "$0")/lib.sh"
BF=(runtime.precision=bf16)
"$MHETRAIN" train "$TINY" "${DATA[@]}" "${BF[@]}" train.out_dir="$WORK/straight" 2>"$WORK/straight.log" ||
  { cat "$WORK/straight.log"; fail "straight run"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" "${BF[@]}" train.out_dir="$WORK/split" --stop-after 4 2>"$WORK/split1.log" ||
  { cat "$WORK/split1.log"; fail "first half"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" "${BF[@]}" train.out_dir="$WORK/split" 2>"$WORK/split2.log" ||
  { cat "$WORK/split2.log"; fail "second half"; }
grep -q "resumed from .*step_00000004 (step 4" "$WORK/split2.log" || { cat "$WORK/split2.log"; fail "did not resume"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/straight/checkpoints/step_00000008/$f" "$WORK/split/checkpoints/step_00000008/$f" ||
    fail "$f differs between the straight and the resumed bf16 run"
done
$PY "$CHECK" losses-close "$WORK/straight/metrics.jsonl" "$WORK/split/metrics.jsonl" 0
# Every tensor of the checkpoint is F32 (the safetensors header's dtypes).
$PY - "$WORK/straight/checkpoints/step_00000008/model.safetensors" <<'PY' || fail "checkpoint not fp32"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    head = json.loads(f.read(n))
dtypes = {v["dtype"] for k, v in head.items() if k != "__metadata__"}
print("checkpoint dtypes:", dtypes)
sys.exit(0 if dtypes == {"F32"} else 1)
PY
# An fp32 run's checkpoint resumes in bf16.
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/mixed" --stop-after 4 2>"$WORK/mixed1.log" ||
  { cat "$WORK/mixed1.log"; fail "fp32 first half"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" "${BF[@]}" train.out_dir="$WORK/mixed" 2>"$WORK/mixed2.log" ||
  { cat "$WORK/mixed2.log"; fail "bf16 second half"; }
grep -q "resumed from .*step_00000004 (step 4" "$WORK/mixed2.log" || { cat "$WORK/mixed2.log"; fail "bf16 did not resume the fp32 checkpoint"; }
$PY "$CHECK" loss-falls "$WORK/straight"
echo PASS
