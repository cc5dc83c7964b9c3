#!/usr/bin/env bash
# A failed write of metrics.jsonl (a full disk: /dev/full) ends the run with exit 1 and a line
# naming the file, never exit 0.  (TensorBoard writes take the same checked path in trainer.c.)
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.steps=3)
mkdir -p "$WORK/m"
ln -s /dev/full "$WORK/m/metrics.jsonl"
set +e; "$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/m" 2>"$WORK/m.log"; status=$?; set -e
[ "$status" = 1 ] || { cat "$WORK/m.log"; fail "metrics on a full disk: exit $status, expected 1"; }
grep -q "$WORK/m/metrics.jsonl: write failed: No space left on device" "$WORK/m.log" ||
  { cat "$WORK/m.log"; fail "no message naming metrics.jsonl"; }
echo PASS
