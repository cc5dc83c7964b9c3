#!/usr/bin/env bash
# Checkpoints exist but none is valid: `train` refuses (exit 2) with one line naming them and
# --resume none, and leaves them untouched; --resume none starts afresh but never deletes a
# checkpoint that no valid one superseded (a newer step of the old run survives keep_last).
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.eval_every=0 train.checkpoint_every=2)
"$MHETRAIN" train "${args[@]}" train.steps=6 2>"$WORK/first.log" || { cat "$WORK/first.log"; fail "first run"; }
for s in 2 4 6; do  # corrupt every checkpoint: flip one byte of the weights
  f="$WORK/run/checkpoints/step_0000000$s/model.safetensors"
  printf '\xff' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
done
before=$(ls "$WORK/run/checkpoints")
set +e; "$MHETRAIN" train "${args[@]}" train.steps=6 train.keep_last=1 2>"$WORK/refuse.log"; status=$?; set -e
[ "$status" = 2 ] || { cat "$WORK/refuse.log"; fail "expected exit 2 over unusable checkpoints, got $status"; }
grep -q "no valid checkpoint among .*step_00000006, .*step_00000004, .*step_00000002 .*--resume none" "$WORK/refuse.log" ||
  { cat "$WORK/refuse.log"; fail "no refusal line naming the checkpoints"; }
grep -q "^step 1/" "$WORK/refuse.log" && fail "trained although it refused"
[ "$(ls "$WORK/run/checkpoints")" = "$before" ] || fail "the checkpoints changed"
# Deliberately afresh with keep_last 1: steps 2 and 4 are superseded by the new valid step 4,
# the old step 6 (newer, invalid) is not and must survive.
"$MHETRAIN" train "${args[@]}" train.steps=4 train.keep_last=1 --resume none 2>"$WORK/fresh.log" ||
  { cat "$WORK/fresh.log"; fail "--resume none"; }
[ -d "$WORK/run/checkpoints/step_00000006" ] || fail "keep_last deleted the newer checkpoint step 6"
[ ! -d "$WORK/run/checkpoints/step_00000002" ] || fail "keep_last 1 kept the superseded step 2"
[ -d "$WORK/run/checkpoints/step_00000004" ] || fail "the new checkpoint is missing"
echo PASS
