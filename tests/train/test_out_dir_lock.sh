#!/usr/bin/env bash
# One trainer per train.out_dir: a second one refuses (exit 2) naming the holder's pid while the
# first runs; the lock of a process killed with -9 is stale and the next trainer takes it.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.eval_every=0 train.checkpoint_every=0 train.steps=400)
"$MHETRAIN" train "${args[@]}" 2>"$WORK/first.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 2/" "$WORK/first.log" && break; sleep 0.05; done
grep -q "^step 2/" "$WORK/first.log" || { cat "$WORK/first.log"; kill -9 "$pid"; fail "first trainer did not start"; }
set +e; "$MHETRAIN" train "${args[@]}" 2>"$WORK/second.log"; status=$?; set -e
[ "$status" = 2 ] || { kill -9 "$pid"; cat "$WORK/second.log"; fail "second trainer: exit $status, expected 2"; }
grep -q "another trainer is using this train.out_dir (pid $pid on " "$WORK/second.log" ||
  { kill -9 "$pid"; cat "$WORK/second.log"; fail "no lock message naming pid $pid"; }
grep -q "^step " "$WORK/second.log" && { kill -9 "$pid"; fail "the second trainer trained"; }
kill -9 "$pid"; wait "$pid" || true
grep -q "pid $pid" "$WORK/run/.lock" || fail "the lock file does not name the dead holder"
# Stale: its holder is dead, so a new trainer starts.
"$MHETRAIN" train "${args[@]}" train.steps=2 2>"$WORK/third.log" || { cat "$WORK/third.log"; fail "stale lock not taken over"; }
echo PASS
