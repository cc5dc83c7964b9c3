#!/usr/bin/env bash
# Readers of a run take its out_dir lock shared: while a trainer writes the run, eval, export
# and convert refuse (exit 2, one line naming the run and the trainer's pid) instead of reading
# checkpoints the trainer may prune or replace; once the trainer is gone (even killed with -9:
# the kernel drops its flock, so the lock is stale) they work.  Conversely a trainer refuses to
# start on a run being read (this script holding the lock shared with `flock -s`).
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.eval_every=0 train.checkpoint_every=2 train.keep_last=1)
"$MHETRAIN" train "${args[@]}" train.steps=2 2>"$WORK/first.log" || { cat "$WORK/first.log"; fail "first run"; }
"$MHETRAIN" train "${args[@]}" train.steps=4000 --resume none 2>"$WORK/long.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 4/" "$WORK/long.log" && break; sleep 0.05; done
grep -q "^step 4/" "$WORK/long.log" || { cat "$WORK/long.log"; kill -9 "$pid"; fail "trainer did not start"; }
step=$(ls "$WORK/run/checkpoints" | head -n 1)
for cmd in "eval $WORK/run" "eval $WORK/run/checkpoints/$step" "export $WORK/run --out $WORK/exp" \
           "convert $WORK/run/checkpoints/$step --to gqa --groups 2 --out $WORK/conv"; do
  set +e; $MHETRAIN $cmd >"$WORK/r.out" 2>"$WORK/r.log"; status=$?; set -e
  [ "$status" = 2 ] || { kill -9 "$pid"; cat "$WORK/r.log"; fail "$cmd during training: exit $status, expected 2"; }
  [ "$(wc -l <"$WORK/r.log")" = 1 ] || { kill -9 "$pid"; cat "$WORK/r.log"; fail "$cmd: not one line"; }
  grep -q "^mhetrain: $WORK/run: a trainer is writing this run (pid $pid on .*); ${cmd%% *} reads it once the trainer has exited" \
    "$WORK/r.log" || { kill -9 "$pid"; cat "$WORK/r.log"; fail "$cmd: no refusal naming the run and pid $pid"; }
done
[ ! -e "$WORK/exp" ] && [ ! -e "$WORK/conv" ] || { kill -9 "$pid"; fail "a refused command wrote output"; }
kill -9 "$pid"; wait "$pid" || true
# Stale: the holder is dead.
"$MHETRAIN" eval "$WORK/run" >"$WORK/eval.json" 2>"$WORK/eval.log" || { cat "$WORK/eval.log"; fail "eval after the trainer died"; }
grep -q '"valid_loss": [0-9]' "$WORK/eval.json" || fail "eval printed no loss"
"$MHETRAIN" export "$WORK/run" --out "$WORK/exp" 2>"$WORK/exp.log" || { cat "$WORK/exp.log"; fail "export after the trainer died"; }
# A reader holds the lock: the trainer refuses, naming readers rather than a trainer.
exec 9<"$WORK/run/.lock"
flock -s 9
set +e; "$MHETRAIN" train "${args[@]}" train.steps=2 9<&- 2>"$WORK/t.log"; status=$?; set -e
exec 9<&-
[ "$status" = 2 ] || { cat "$WORK/t.log"; fail "trainer while read: exit $status, expected 2"; }
grep -q "mhetrain eval, export or convert is reading this train.out_dir" "$WORK/t.log" || { cat "$WORK/t.log"; fail "no reader message"; }
echo PASS
