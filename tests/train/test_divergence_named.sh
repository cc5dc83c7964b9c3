#!/usr/bin/env bash
# A run whose loss is not finite at its end (issue 50) is named as diverged, never a success:
# exit 1 with one line naming the step it diverged at; the final validation row of
# metrics.jsonl is valid JSON with valid_loss null and "diverged_at_step"; the eval line says
# "non-finite" instead of printing -nan; no checkpoint of the diverged model is written.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0)
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/good" train.steps=2 2>"$WORK/good.log" ||
  { cat "$WORK/good.log"; fail "setup run"; }
ck="$WORK/good/checkpoints/step_00000002"
$PY "$MHE_SOURCE_DIR/tests/train/poison_checkpoint.py" "$ck"
# train.max_nonfinite: 0 never stops on skipped steps: the run reaches its end diverged.
set +e
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/nan" train.steps=3 train.max_nonfinite=0 train.init_from="$ck" \
  train.checkpoint_every=1 \
  2>"$WORK/nan.log"
status=$?
set -e
[ "$status" = 1 ] || { cat "$WORK/nan.log"; fail "a diverged run: exit $status, expected 1"; }
grep -q "mhetrain: the run diverged at step 1: the training loss is not finite from step 1 to the end (step 3)" \
  "$WORK/nan.log" || { cat "$WORK/nan.log"; fail "no divergence message naming step 1"; }
grep -q "valid loss non-finite (nan)" "$WORK/nan.log" || { cat "$WORK/nan.log"; fail "eval line does not say non-finite"; }
if grep -q -- "-nan" "$WORK/nan.log"; then cat "$WORK/nan.log"; fail "-nan printed"; fi
[ ! -e "$WORK/nan/checkpoints/latest" ] || fail "a checkpoint of the diverged model was written (checkpoint_every 1)"
$PY - "$WORK/nan/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]  # every row must parse: no bare NaN
final = [r for r in rows if r.get("split") == "valid"][-1]
assert final["step"] == 3 and final["valid_loss"] is None and final["diverged_at_step"] == 1, final
train = [r for r in rows if "loss" in r]
assert [r["loss"] for r in train] == [None] * 3 and all(r["skipped"] == 1 for r in train), train
PY
# A finite run has no diverged_at_step field and exits 0 (the good run above).
if grep -q diverged_at_step "$WORK/good/metrics.jsonl"; then fail "diverged_at_step in a finite run"; fi
echo PASS
