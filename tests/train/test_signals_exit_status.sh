#!/usr/bin/env bash
# SIGHUP is handled like SIGTERM (checkpoint, then exit 128+1 = 129); a second signal while the
# first is pending says it abandons the checkpoint.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.steps=400)
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/hup" 2>"$WORK/hup.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 3/" "$WORK/hup.log" && break; sleep 0.05; done
kill -HUP "$pid"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 129 ] || { cat "$WORK/hup.log"; fail "exit status $status after SIGHUP, expected 129"; }
grep -q "(signal); run the same command to resume" "$WORK/hup.log" || { cat "$WORK/hup.log"; fail "no stop message"; }
[ -s "$WORK/hup/checkpoints/latest" ] || fail "no checkpoint after SIGHUP"
# A second signal before the step ends ends the process at once, saying so.  Steps of a
# 2,048-sequence batch take ~2 s at 60k tokens/s; the signals go 0.1 s apart (back to back they could merge into
# one).  If the step happened to end between them the handlers are already restored and the
# second signal kills silently: that is timing, not the behaviour under test, so up to three
# attempts (the old code never prints the message at all).
ok=0
for attempt in 1 2 3; do
  rm -rf "$WORK/twice"
  "$MHETRAIN" train "${args[@]}" train.global_batch=2048 train.out_dir="$WORK/twice" 2>"$WORK/twice.log" &
  pid=$!
  for _ in $(seq 1 600); do grep -q "^step 1/" "$WORK/twice.log" && break; sleep 0.05; done
  kill -INT "$pid"; sleep 0.1; kill -INT "$pid" 2>/dev/null || true
  set +e; wait "$pid"; set -e
  if grep -q "second signal: abandoning the checkpoint" "$WORK/twice.log"; then ok=1; break; fi
done
[ "$ok" = 1 ] || { cat "$WORK/twice.log"; fail "no abandon message in 3 attempts"; }
echo PASS
