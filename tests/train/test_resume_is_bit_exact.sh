#!/usr/bin/env bash
# 8 steps straight vs 4 steps, stop, resume, 4 more: bit-identical weights and optimizer state,
# identical losses; the metrics and TensorBoard files agree; the validation loss falls.
source "$(dirname "$0")/lib.sh"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/straight" 2>"$WORK/straight.log" ||
  { cat "$WORK/straight.log"; fail "straight run"; }
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/split" --stop-after 4 2>"$WORK/split1.log" ||
  { cat "$WORK/split1.log"; fail "first half"; }
grep -q "stopping after step 4" "$WORK/split1.log" || fail "no stop message"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/split" 2>"$WORK/split2.log" ||
  { cat "$WORK/split2.log"; fail "second half"; }
grep -q "resumed from .*step_00000004 (step 4" "$WORK/split2.log" || { cat "$WORK/split2.log"; fail "did not resume"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/straight/checkpoints/step_00000008/$f" "$WORK/split/checkpoints/step_00000008/$f" ||
    fail "$f differs between the straight and the resumed run"
done
$PY "$CHECK" losses-close "$WORK/straight/metrics.jsonl" "$WORK/split/metrics.jsonl" 0
MHE_TB_PY="$MHE_SOURCE_DIR/.venv/bin/python"
"$MHE_TB_PY" "$CHECK" tensorboard "$WORK/straight"
$PY "$CHECK" loss-falls "$WORK/straight"
echo PASS
