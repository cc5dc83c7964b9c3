#!/usr/bin/env bash
# SIGTERM in the middle of training: a checkpoint at the next step boundary, exit 143 (128 +
# SIGTERM: a stopped run is not a finished one, so `train && export` stops); the same command resumes and finishes with the weights of an uninterrupted run.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.steps=40 train.checkpoint_every=0 train.eval_every=0)
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/straight" 2>"$WORK/straight.log" || { cat "$WORK/straight.log"; fail "straight"; }
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/run" 2>"$WORK/run.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 5/" "$WORK/run.log" && break; sleep 0.05; done
kill -TERM "$pid"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 143 ] || { cat "$WORK/run.log"; fail "exit status $status after SIGTERM, expected 143"; }
grep -q "(signal); run the same command to resume" "$WORK/run.log" || { cat "$WORK/run.log"; fail "no stop message"; }
latest=$(cat "$WORK/run/checkpoints/latest")
echo "stopped at $latest"
[ "$latest" != step_00000040 ] || fail "the run finished before the signal arrived; nothing was tested"
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/run" 2>"$WORK/again.log" || { cat "$WORK/again.log"; fail "resume"; }
grep -q "resumed from .*$latest" "$WORK/again.log" || fail "did not resume from $latest"
cmp "$WORK/straight/checkpoints/step_00000040/model.safetensors" "$WORK/run/checkpoints/step_00000040/model.safetensors" ||
  fail "interrupted + resumed weights differ from the straight run"
echo PASS
