#!/usr/bin/env bash
# train.time_limit_s: a run of far more steps than fit stops after about that many seconds of
# training, at a step boundary with a checkpoint of that step and exit status 0, saying so in one
# line; the same command resumes from it (the limit afresh); a negative limit is a one-line input
# error.  tests/gpu/compare.sh trains each attention type for the same seconds with it.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.log_every=50 train.steps=1000000)
t0=$(date +%s.%N)
"$MHETRAIN" train "${args[@]}" train.time_limit_s=1.5 train.out_dir="$WORK/run" 2>"$WORK/run.log" ||
  { cat "$WORK/run.log"; fail "a run stopped by its time limit exited non-zero"; }
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')
line=$(grep "(train.time_limit_s 1.5: " "$WORK/run.log") || { cat "$WORK/run.log"; fail "no time-limit stop line"; }
echo "$line (process wall ${wall}s)"
steps=$(sed -E 's/^stopping after step ([0-9]+) .*/\1/' <<<"$line")
secs=$(sed -E 's/.*: ([0-9.]+) s of training.*/\1/' <<<"$line")
[ "$steps" -gt 0 ] && [ "$steps" -lt 1000000 ] || fail "stopped after step '$steps'"
# At or past the limit, by less than a step and the set-up (each step is milliseconds here).
awk -v s="$secs" 'BEGIN{exit !(s >= 1.5 && s < 4)}' || fail "stopped after $secs s of training, limit 1.5"
awk -v w="$wall" 'BEGIN{exit !(w < 30)}' || fail "the process took ${wall}s with a 1.5 s limit"
latest=$(cat "$WORK/run/checkpoints/latest")
[ "$latest" = "$(printf 'step_%08d' "$steps")" ] || fail "latest checkpoint $latest, stopped after step $steps"
# Resume: the limit starts afresh, from the saved step.
"$MHETRAIN" train "${args[@]}" train.time_limit_s=0.5 train.out_dir="$WORK/run" 2>"$WORK/again.log" ||
  { cat "$WORK/again.log"; fail "resume under a time limit"; }
grep -q "resumed from .*$latest" "$WORK/again.log" || { cat "$WORK/again.log"; fail "did not resume from $latest"; }
again=$(sed -nE 's/^stopping after step ([0-9]+) \(train.time_limit_s 0.5: .*/\1/p' "$WORK/again.log")
[ -n "$again" ] && [ "$again" -gt "$steps" ] || { cat "$WORK/again.log"; fail "the resumed run did not go past step $steps"; }
# A negative limit: one line, the input-error status.
set +e
"$MHETRAIN" train "${args[@]}" train.time_limit_s=-1 train.out_dir="$WORK/bad" 2>"$WORK/bad.log"
rc=$?
set -e
[ $rc -ne 0 ] || fail "train.time_limit_s=-1 was accepted"
[ "$(wc -l <"$WORK/bad.log")" -eq 1 ] && grep -q "time_limit_s" "$WORK/bad.log" ||
  { cat "$WORK/bad.log"; fail "train.time_limit_s=-1: not one line naming the key"; }
echo PASS
