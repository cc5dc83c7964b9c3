#!/usr/bin/env bash
# `mhetrain finetune` with runtime.device: cuda on the emulated GPU (mhetrain_emu) against
# runtime.device: cpu: a shrunken tiny BERT (the emulation is slow), 4 steps of the small
# SST-2-layout task and a dev evaluation, at 1 rank and 2 ranks (NCCL through MPI): per-step
# losses within 1e-4 relative, dev loss within 1e-4, same dev accuracy.
set -euo pipefail
: "${MHETRAIN_EMU:?}"
source "$MHE_SOURCE_DIR/tests/finetune_loop/lib.sh"
make_task "$WORK/task"
read -r -a TASK <<<"$(task_args "$WORK/task")"
SMALL=(model.hidden=32 model.heads=2 model.ffn=64 model.max_seq=16 data.seq_len=16 train.steps=4
       train.eval_every=4 runtime.threads=1)
run() {  # run NP NAME overrides...
  local np=$1 name=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MHETRAIN_EMU" finetune "$TINY" "${DATA[@]}" "${TASK[@]}" "${SMALL[@]}" \
    train.out_dir="$WORK/$name" "$@" >"$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "$name"; }
}
run 1 cpu runtime.device=cpu
run 1 cuda runtime.device=cuda
run 2 cuda2 runtime.device=cuda
grep -q "device cuda" "$WORK/cuda.log" || { cat "$WORK/cuda.log"; fail "the cuda run does not say it used cuda"; }
for r in cuda cuda2; do
  $PY "$CHECK" losses-close "$WORK/$r/metrics.jsonl" "$WORK/cpu/metrics.jsonl" 1e-4
  $PY "$MHE_SOURCE_DIR/tests/finetune_loop/compare.py" same-metrics "$WORK/$r" "$WORK/cpu" 1e-4
done
echo PASS
