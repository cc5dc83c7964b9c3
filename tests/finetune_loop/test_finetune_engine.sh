#!/usr/bin/env bash
# What fine-tuning gains from the run engine (trainer/train/run_engine.c), on the tiny BERT and a
# small SST-2-layout task:
# - a killed run (SIGKILL after the epoch-1 checkpoint) resumes with the same command and ends
#   bit for bit where the straight run ends: weights, optimizer state, best weights, result file,
#   every train loss; a changed optim.lr is then refused, more task.epochs train on;
# - ZeRO-1 at two ranks (optimizer state sharded) gives the two-rank ZeRO-0 run's losses, dev
#   scores and weights (1e-5 relative: the reduce-scatter sums in another order), and resumes
#   from its own checkpoint bit for bit.
source "$MHE_SOURCE_DIR/tests/finetune_loop/lib.sh"
make_task "$WORK/task"
read -r -a TASK <<<"$(task_args "$WORK/task")"
args=("$TINY" "${DATA[@]}" "${TASK[@]}" task.epochs=3)
ft() {  # ft OUT [mpirun -np N] [extra...]: fine-tune into OUT, log in OUT.log
  local out=$1; shift
  local pre=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do pre+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  "${pre[@]}" "$MHETRAIN" finetune "${args[@]}" train.out_dir="$out" "$@" >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "finetune into $out"; }
}
last=step_00000036
ft "$WORK/straight" --

# Killed (not stopped) after the epoch-1 checkpoint, then the same command.
"$MHETRAIN" finetune "${args[@]}" train.out_dir="$WORK/killed" >"$WORK/killed.log" 2>&1 &
pid=$!
for _ in $(seq 1 6000); do grep -q "^checkpoint: $WORK/killed/checkpoints/step_00000012$" "$WORK/killed.log" && break; sleep 0.05; done
kill -KILL "$pid"
set +e; wait "$pid"; status=$?; set -e
[ "$status" = 137 ] || { cat "$WORK/killed.log"; fail "exit status $status after SIGKILL, expected 137"; }
[ "$(cat "$WORK/killed/checkpoints/latest")" = step_00000012 ] ||
  { cat "$WORK/killed.log"; fail "killed run: latest $(cat "$WORK/killed/checkpoints/latest"), expected step_00000012"; }
ft "$WORK/killed" --
grep -q "resumed from .*step_00000012 (step 12" "$WORK/killed.log" || { cat "$WORK/killed.log"; fail "no resume from step 12"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/straight/checkpoints/$last/$f" "$WORK/killed/checkpoints/$last/$f" || fail "killed + resumed: $f differs"
done
best=$(cat "$WORK/straight/best/checkpoints/latest")
cmp "$WORK/straight/best/checkpoints/$best/model.safetensors" "$WORK/killed/best/checkpoints/$best/model.safetensors" ||
  fail "killed + resumed: best weights differ"
cmp "$WORK/straight/finetune_result.json" "$WORK/killed/finetune_result.json" || fail "killed + resumed: result differs"
$PY "$CHECK" losses-close "$WORK/killed/metrics.jsonl" "$WORK/straight/metrics.jsonl" 0

# Resuming with a key that changes the run (optim.lr) is refused (exit 2), naming the key and the
# way past it; more epochs (fine-tuning's train.steps) pass with a notice and train on.
set +e
"$MHETRAIN" finetune "${args[@]}" train.out_dir="$WORK/killed" optim.lr=1e-3 >"$WORK/lr.log" 2>&1; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "optim.lr .* -> 0.001.*--allow-config-change" "$WORK/lr.log" ||
  { cat "$WORK/lr.log"; fail "changed optim.lr on resume: exit $rc"; }
ft "$WORK/killed" -- task.epochs=4
grep -q "resuming with changed settings (harmless): task.epochs 3 -> 4" "$WORK/killed.log" &&
  [ "$(cat "$WORK/killed/checkpoints/latest")" = step_00000048 ] || { cat "$WORK/killed.log"; fail "task.epochs 3 -> 4 on resume"; }

# ZeRO-1 at two ranks against ZeRO-0 at two ranks; a ZeRO-1 stop and resume.
ft "$WORK/z0" "${MPIRUN[@]}" -np 2 -- dist.zero=0
ft "$WORK/z1" "${MPIRUN[@]}" -np 2 -- dist.zero=1
grep -q "ZeRO-1 | gradients all-reduced by .*ZeRO-1" "$WORK/z1.log" || { cat "$WORK/z1.log"; fail "z1 did not shard"; }
$PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-metrics "$WORK/z1" "$WORK/z0" 1e-5
$PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-weights "$WORK/z1/checkpoints/$last/model.safetensors" \
  "$WORK/z0/checkpoints/$last/model.safetensors" 1e-5
ft "$WORK/zr" "${MPIRUN[@]}" -np 2 -- dist.zero=1 --stop-after 17
ft "$WORK/zr" "${MPIRUN[@]}" -np 2 -- dist.zero=1
grep -q "resumed from .*step_00000017" "$WORK/zr.log" || { cat "$WORK/zr.log"; fail "ZeRO-1: no resume"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/z1/checkpoints/$last/$f" "$WORK/zr/checkpoints/$last/$f" || fail "ZeRO-1 stopped + resumed: $f differs"
done
cmp "$WORK/z1/finetune_result.json" "$WORK/zr/finetune_result.json" || fail "ZeRO-1 stopped + resumed: result differs"
echo PASS
