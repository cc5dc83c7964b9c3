#!/usr/bin/env bash
# Data-parallel fine-tuning equals the single-worker run: 2 epochs of the tiny BERT (dropout on)
# on a small SST-2-layout task, 1 rank vs mpirun -np 2 (each rank a disjoint half of every batch,
# dropout keyed by the global micro-batch, gradients summed by the GradReducer, dev outputs
# summed).  Train loss per step and dev scores within 1e-5 relative, final and best weights
# within 1e-5 relative per tensor (the two differ only in the order of the gradient sums).
source "$MHE_SOURCE_DIR/tests/finetune_loop/lib.sh"
make_task "$WORK/task"
read -r -a TASK <<<"$(task_args "$WORK/task")"
run() {  # run OUT [mpirun ranks]
  local out=$1; shift
  "$@" "$MHETRAIN" finetune "$TINY" "${DATA[@]}" "${TASK[@]}" train.out_dir="$out" >"$out.log" 2>&1 ||
    { cat "$out.log"; fail "finetune into $out"; }
}
run "$WORK/one"
run "$WORK/two" "${MPIRUN[@]}" -np 2
tail -n 1 "$WORK/one.log"
tail -n 1 "$WORK/two.log"
$PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-metrics "$WORK/two" "$WORK/one" 1e-5
last=$(cat "$WORK/one/checkpoints/latest")
$PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-weights "$WORK/two/checkpoints/$last/model.safetensors" \
  "$WORK/one/checkpoints/$last/model.safetensors" 1e-5
best=$(cat "$WORK/one/best/checkpoints/latest")
$PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-weights "$WORK/two/best/checkpoints/$best/model.safetensors" \
  "$WORK/one/best/checkpoints/$best/model.safetensors" 1e-5
# A rank with another learning rate stops both before any work, naming the key (was: trained on).
set +e
"${MPIRUN[@]}" -np 1 "$MHETRAIN" finetune "$TINY" "${DATA[@]}" "${TASK[@]}" train.out_dir="$WORK/lr" : \
  -np 1 "$MHETRAIN" finetune "$TINY" "${DATA[@]}" "${TASK[@]}" train.out_dir="$WORK/lr" optim.lr=0.5 >"$WORK/lr.log" 2>&1
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/lr.log"; fail "ranks with different optim.lr: exit $status, expected 2"; }
grep -q "the ranks disagree on their config and model .*rank 1: optim.lr [0-9.e-]* -> 0.5" "$WORK/lr.log" ||
  { cat "$WORK/lr.log"; fail "no disagreement message"; }
# The same relative task path holding another file on rank 1's node (one label changed): stopped
# before any work, naming the file's digest (was: each rank trained on its own copy).
mkdir -p "$WORK/na" "$WORK/nb/task"
ln -s "$WORK/task" "$WORK/na/task"
cp "$WORK/task/dev.tsv" "$WORK/nb/task/dev.tsv"
awk -F'\t' 'BEGIN {OFS = "\t"} NR == 2 {$2 = 1 - $2} {print}' "$WORK/task/train.tsv" >"$WORK/nb/task/train.tsv"
rel=("$TINY" "${DATA[@]}" "${TASK[@]}" task.train_file=task/train.tsv task.dev_file=task/dev.tsv train.out_dir="$WORK/stale")
set +e
"${MPIRUN[@]}" -np 1 -wdir "$WORK/na" "$MHETRAIN" finetune "${rel[@]}" : -np 1 -wdir "$WORK/nb" "$MHETRAIN" finetune "${rel[@]}" \
  >"$WORK/stale.log" 2>&1
status=$?
set -e
[ "$status" = 2 ] && grep -q "the ranks disagree on their data .*rank 1: ranks.task_train_file [0-9]* bytes, digest [0-9a-f]* -> " \
  "$WORK/stale.log" || { cat "$WORK/stale.log"; fail "stale task file on rank 1: exit $status"; }
echo PASS
