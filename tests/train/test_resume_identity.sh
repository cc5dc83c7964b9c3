#!/usr/bin/env bash
# Resuming remembers the run's identity: changing train.seed, data.seq_len, train.global_batch
# or optim.lr refuses (exit 2, naming the change) unless --allow-config-change, which prints the
# change and records it in metrics.jsonl; harmless changes (steps, intervals) pass with a notice.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.eval_every=0 train.checkpoint_every=0)
"$MHETRAIN" train "${args[@]}" train.steps=4 2>"$WORK/first.log" || { cat "$WORK/first.log"; fail "first run"; }
for change in train.seed=12 data.seq_len=32 train.global_batch=16 optim.lr=1e-3; do
  set +e; "$MHETRAIN" train "${args[@]}" train.steps=6 "$change" 2>"$WORK/refuse.log"; status=$?; set -e
  [ "$status" = 2 ] || { cat "$WORK/refuse.log"; fail "$change: exit $status, expected 2"; }
  grep -q "resuming would change the run's data order or model (${change%%=*} .* -> .*--allow-config-change" \
    "$WORK/refuse.log" || { cat "$WORK/refuse.log"; fail "$change: no refusal naming the key"; }
  grep -q "^step " "$WORK/refuse.log" && fail "$change: trained although it refused"
done
[ "$(cat "$WORK/run/checkpoints/latest")" = step_00000004 ] || fail "a refused resume wrote a checkpoint"
# Harmless: more steps and another log interval go through with a notice.
"$MHETRAIN" train "${args[@]}" train.steps=6 train.log_every=2 2>"$WORK/harmless.log" ||
  { cat "$WORK/harmless.log"; fail "harmless change refused"; }
grep -q "resuming with changed settings (harmless): train.steps 4 -> 6, train.log_every 1 -> 2" "$WORK/harmless.log" ||
  { cat "$WORK/harmless.log"; fail "no notice of the harmless change"; }
grep -q "resumed from .*step_00000004" "$WORK/harmless.log" || fail "did not resume"
# Deliberate: allowed, printed and recorded.
"$MHETRAIN" train "${args[@]}" train.steps=8 train.log_every=2 optim.lr=1e-3 --allow-config-change 2>"$WORK/allow.log" ||
  { cat "$WORK/allow.log"; fail "--allow-config-change refused"; }
grep -q "allow-config-change: resuming with a changed run identity: optim.lr 0.002 -> 0.001" "$WORK/allow.log" ||
  { cat "$WORK/allow.log"; fail "the allowed change was not printed"; }
$PY - "$WORK/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in rows if r.get("event") == "config_change"]
assert len(ev) == 1 and ev[0]["step"] == 6 and ev[0]["changes"] == "optim.lr 0.002 -> 0.001", ev
PY
echo PASS
