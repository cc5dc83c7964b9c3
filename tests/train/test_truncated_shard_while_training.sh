#!/usr/bin/env bash
# A training shard truncated while the trainer has it mapped (another job re-preparing the
# corpus) ends the run with exit 1 and one line naming the file, not a bare SIGBUS.
source "$(dirname "$0")/lib.sh"
mkdir -p "$WORK/shards"
cp "$CORPUS"/shards/train_00000.* "$WORK/shards/"
args=("$TINY" "${DATA[@]}" data.train="[$WORK/shards/train]" train.eval_every=0 train.checkpoint_every=0 train.steps=400)
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/run" 2>"$WORK/run.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 2/" "$WORK/run.log" && break; sleep 0.05; done
truncate -s 0 "$WORK/shards/train_00000.bin"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 1 ] || { cat "$WORK/run.log"; fail "exit status $status after truncation, expected 1"; }
grep -q "^mhetrain: $WORK/shards/train_00000.bin: the shard shrank while it was being read" "$WORK/run.log" ||
  { cat "$WORK/run.log"; fail "no message naming the truncated shard"; }
echo PASS
