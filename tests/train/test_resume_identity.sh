#!/usr/bin/env bash
# Resuming remembers the run's identity: changing train.seed, data.seq_len, train.global_batch
# or optim.lr refuses (exit 2, naming the change) unless --allow-config-change, which prints the
# change and records it in metrics.jsonl; harmless changes (intervals) pass with a notice, and
# another train.steps passes saying how the learning-rate schedule moves (issue 50: was
# "harmless"); optim.warmup_steps beyond the run's steps is a warning.
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
# Harmless: another log interval goes through with a notice; more steps too, saying what changes:
# tiny.yaml's cosine schedule (lr 2e-3 to 1e-4, 2 warmup steps) at update 5, p = 2/2 over 4 steps
# (min_lr 1.000e-04), p = 2/4 over 6 steps (1.05e-3).
"$MHETRAIN" train "${args[@]}" train.steps=6 train.log_every=2 2>"$WORK/harmless.log" ||
  { cat "$WORK/harmless.log"; fail "harmless change refused"; }
grep -q "resuming with changed settings (harmless): train.log_every 1 -> 2$" "$WORK/harmless.log" ||
  { cat "$WORK/harmless.log"; fail "no notice of the harmless change"; }
grep -q "resuming with another run length (train.steps 4 -> 6): the learning-rate schedule is recomputed over 6 steps instead of 4, so it jumps at the resume: update 5 gets lr 1.050e-03 instead of 1.000e-04" \
  "$WORK/harmless.log" || { cat "$WORK/harmless.log"; fail "no notice of the schedule change"; }
if grep -q "harmless.*train.steps" "$WORK/harmless.log"; then fail "train.steps called harmless"; fi
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
# Warmup longer than the run: a warning naming both numbers (the run still goes: a short try of a
# long-warmup config is legitimate).
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/warm" train.steps=2 optim.warmup_steps=5 train.eval_every=0 \
  2>"$WORK/warm.log" || { cat "$WORK/warm.log"; fail "warmup run"; }
grep -q "warning: .*tiny.yaml: optim.warmup_steps 5 is more than the run's 2 steps: the learning rate never reaches optim.lr 0.002 (the last step gets 8.000e-04)" \
  "$WORK/warm.log" || { cat "$WORK/warm.log"; fail "no warmup warning"; }
if grep -q "warmup_steps" "$WORK/first.log"; then fail "a warmup warning for warmup 2 of 4 steps"; fi
echo PASS
