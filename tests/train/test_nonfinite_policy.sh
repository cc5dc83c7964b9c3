#!/usr/bin/env bash
# A non-finite gradient follows train.on_nonfinite: skip goes on (the step is marked skipped),
# stop exits 1 with a message and keeps the last checkpoint.
source "$(dirname "$0")/lib.sh"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/skip" train.on_nonfinite=skip \
  --inject-nonfinite 3 2>"$WORK/skip.log" || { cat "$WORK/skip.log"; fail "skip run failed"; }
grep -q "SKIPPED (non-finite)" "$WORK/skip.log" || fail "no skip message"
$PY "$CHECK" skipped "$WORK/skip" 3
set +e
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/stop" train.on_nonfinite=stop \
  --inject-nonfinite 6 2>"$WORK/stop.log"
status=$?
set -e
[ "$status" = 1 ] || { cat "$WORK/stop.log"; fail "expected exit status 1, got $status"; }
grep -q "step 6: non-finite gradient norm (train.on_nonfinite: stop); the last checkpoint is kept" "$WORK/stop.log" ||
  { cat "$WORK/stop.log"; fail "no stop message"; }
[ "$(cat "$WORK/stop/checkpoints/latest")" = step_00000004 ] || fail "latest checkpoint is not step 4"
[ ! -e "$WORK/stop/checkpoints/step_00000006" ] || fail "a checkpoint of the bad step was written"
echo PASS
