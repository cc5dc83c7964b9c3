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
# A second signal before the step ends (steps of a 64-sequence batch take ~1 s; signals sent
# back to back would merge into one) ends the process at once, saying so.
"$MHETRAIN" train "${args[@]}" train.global_batch=64 train.out_dir="$WORK/twice" 2>"$WORK/twice.log" &
pid=$!
for _ in $(seq 1 600); do grep -q "^step 2/" "$WORK/twice.log" && break; sleep 0.05; done
kill -INT "$pid"; sleep 0.2; kill -INT "$pid"
set +e; wait "$pid"; set -e
grep -q "second signal: abandoning the checkpoint" "$WORK/twice.log" || { cat "$WORK/twice.log"; fail "no abandon message"; }
echo PASS
