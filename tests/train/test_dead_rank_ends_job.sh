#!/usr/bin/env bash
# kill -9 one rank in the middle of training: the job ends within 60 s with a message and a
# non-zero status, never a hang; the same command then resumes from the last checkpoint.  Every
# wait is bounded, and every way the job can end early prints its log.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.steps=400 train.checkpoint_every=2 dist.timeout_s=20)
"${MPIRUN[@]}" -np 2 "$MHETRAIN" train "${args[@]}" 2>"$WORK/run.log" &
job=$!
ready() { [ -f "$WORK/run/checkpoints/latest" ] && grep -q "step 6/" "$WORK/run.log"; }  # a checkpoint and a few more steps
for _ in $(seq 1 1800); do
  ready && break
  kill -0 "$job" 2>/dev/null || { cat "$WORK/run.log"; fail "the job ended before step 6"; }
  sleep 0.1
done
ready ||
  { cat "$WORK/run.log"; fail "no checkpoint and step 6 within 180 s"; }
# pgrep's "none found" must reach the check below, not end the script silently under pipefail.
victim=$(pgrep -P "$job" -x mhetrain | tail -1) || true
[ -n "$victim" ] || { cat "$WORK/run.log"; fail "no rank to kill"; }
killed_at=$(date +%s)
kill -9 "$victim"
for _ in $(seq 1 600); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then kill -9 "$job"; fail "the job still runs 60 s after a rank died"; fi
set +e; wait "$job"; status=$?; set -e
elapsed=$(( $(date +%s) - killed_at ))
echo "job ended ${elapsed}s after the kill with status $status"
[ "$status" != 0 ] || fail "job exited 0 after losing a rank"
tail -3 "$WORK/run.log"
latest=$(cat "$WORK/run/checkpoints/latest")
"${MPIRUN[@]}" -np 2 "$MHETRAIN" train "${args[@]}" train.steps=$(( 10#${latest#step_} + 2 )) 2>"$WORK/again.log" ||
  { cat "$WORK/again.log"; fail "rerun"; }
grep -q "resumed from .*$latest" "$WORK/again.log" || { cat "$WORK/again.log"; fail "rerun did not resume from $latest"; }
echo PASS
