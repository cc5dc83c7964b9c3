#!/usr/bin/env bash
# SIGTERM to launch/mpirun.sh (issue 50: exited 1) reaches the ranks: both checkpoint at the
# same step and the script exits 143, as a single process does; the same command resumes.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.steps=400 train.out_dir="$WORK/run")
MHETRAIN="$MHETRAIN" bash "$MHE_SOURCE_DIR/launch/mpirun.sh" -n 2 -t 1 "${args[@]}" 2>"$WORK/run.log" &
pid=$!
for _ in $(seq 1 1200); do grep -q "^step 3/" "$WORK/run.log" && break; sleep 0.05; done
grep -q "^step 3/" "$WORK/run.log" || { kill -KILL "$pid" 2>/dev/null; cat "$WORK/run.log"; fail "no step 3"; }
kill -TERM "$pid"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 143 ] || { cat "$WORK/run.log"; fail "launch/mpirun.sh exit status $status after SIGTERM, expected 143"; }
grep -q "(signal); run the same command to resume" "$WORK/run.log" || { cat "$WORK/run.log"; fail "no stop message"; }
latest=$(cat "$WORK/run/checkpoints/latest") || fail "no checkpoint after SIGTERM"
step=$((10#${latest#step_}))
[ "$step" -ge 3 ] && [ "$step" -lt 400 ] || fail "checkpoint $latest"
grep -q "saved by 2 workers\|checkpoint: .*$latest" "$WORK/run.log" || { cat "$WORK/run.log"; fail "checkpoint not logged"; }
echo PASS
