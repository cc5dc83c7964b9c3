#!/usr/bin/env bash
# train.init_from's architecture check runs on every rank against that rank's own copy of the
# checkpoint (mpirun MPMD: each rank its own working directory).  The same relative path `pre`
# holds the right model on rank 0's node and a stale one on rank 1's (same shapes, another
# attention type): the job must stop before any work, exit 2, with one line naming rank 1, its
# checkpoint and the differing key (was: rank 0 alone checked, its weights were broadcast, and
# the job fine-tuned to the end, exit 0).  The check still passes when both copies match.
source "$MHE_SOURCE_DIR/tests/finetune_loop/lib.sh"
make_task "$WORK/task"
read -r -a TASK <<<"$(task_args "$WORK/task")"
pretrain() {  # pretrain OUT [key=value...]
  local out=$1; shift
  "$MHETRAIN" train "$TINY" "${DATA[@]}" train.steps=2 train.eval_every=0 train.checkpoint_every=0 \
    train.out_dir="$out" "$@" 2>"$out.log" || { cat "$out.log"; fail "pretraining $out"; }
}
mkdir -p "$WORK/node0" "$WORK/node1" "$WORK/same0" "$WORK/same1"
pretrain "$WORK/node0/pre"
pretrain "$WORK/node1/pre" attention.type=mhe_add
cp -r "$WORK/node0/pre" "$WORK/same0/pre"
cp -r "$WORK/node0/pre" "$WORK/same1/pre"
ft=(finetune "$TINY" "${DATA[@]}" "${TASK[@]}" task.epochs=1 train.init_from=pre)
set +e
timeout 120 "${MPIRUN[@]}" -np 1 -wdir "$WORK/node0" "$MHETRAIN" "${ft[@]}" train.out_dir="$WORK/stale" : \
  -np 1 -wdir "$WORK/node1" "$MHETRAIN" "${ft[@]}" train.out_dir="$WORK/stale" >"$WORK/stale.log" 2>&1
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/stale.log"; fail "a stale checkpoint on rank 1: exit $status, expected 2"; }
want="^mhetrain: rank 1: pre/checkpoints/step_00000002/config.yaml: train.init_from: the checkpoint's model differs \
from this run's \(attention.type mhe_add -> mhe_mul; checkpoint -> this run\)"
[ "$(grep -c "train.init_from" "$WORK/stale.log")" = 1 ] && grep -Eq "$want" "$WORK/stale.log" ||
  { cat "$WORK/stale.log"; fail "a stale checkpoint on rank 1: not one line naming rank 1, its checkpoint and the key"; }
! grep -q "initialised the encoder\|^step \|finetune: " "$WORK/stale.log" || { cat "$WORK/stale.log"; fail "work was done"; }
[ ! -e "$WORK/stale/checkpoints" ] || fail "a stale checkpoint on rank 1: checkpoints were written"
echo "ok stale copy on rank 1: $(grep train.init_from "$WORK/stale.log" | cut -c1-160)"
# Matching copies on both nodes: the run fine-tunes from them.
timeout 300 "${MPIRUN[@]}" -np 1 -wdir "$WORK/same0" "$MHETRAIN" "${ft[@]}" train.out_dir="$WORK/same" : \
  -np 1 -wdir "$WORK/same1" "$MHETRAIN" "${ft[@]}" train.out_dir="$WORK/same" >"$WORK/same.log" 2>&1 ||
  { cat "$WORK/same.log"; fail "matching copies: the run failed"; }
grep -q "initialised the encoder from pre" "$WORK/same.log" || { cat "$WORK/same.log"; fail "matching copies: no init_from"; }
echo PASS
