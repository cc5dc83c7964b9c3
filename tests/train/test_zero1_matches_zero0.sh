#!/usr/bin/env bash
# ZeRO-1 (optimizer state sharded) gives the results of plain data parallelism, with about
# 1/world of its optimizer bytes per rank, for AdamW and LAMB; a ZeRO-1 checkpoint saved at
# world 2 resumes at world 4 (and the loss continues as the straight run's).
source "$(dirname "$0")/lib.sh"
run() {  # run NP NAME [extra...]
  local np=$1 name=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/$name" "$@" \
    2>"$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name"; }
}
opt_bytes() { sed -n 's/.*(ZeRO-[01]: \([0-9]*\) bytes).*/\1/p' "$WORK/$1.log"; }
for opt in adamw lamb; do
  run 2 z0-$opt optim.name=$opt dist.zero=0
  run 2 z1-$opt optim.name=$opt dist.zero=1
  $PY "$CHECK" losses-close "$WORK/z1-$opt/metrics.jsonl" "$WORK/z0-$opt/metrics.jsonl" 1e-5
  $PY "$CHECK" weights-close "$WORK/z1-$opt/checkpoints/step_00000008/model.safetensors" \
    "$WORK/z0-$opt/checkpoints/step_00000008/model.safetensors" 1e-5
  $PY "$CHECK" weights-close "$WORK/z1-$opt/checkpoints/step_00000008/optimizer.safetensors" \
    "$WORK/z0-$opt/checkpoints/step_00000008/optimizer.safetensors" 1e-4
  b0=$(opt_bytes z0-$opt) b1=$(opt_bytes z1-$opt)
  echo "$opt: optimizer state per rank: ZeRO-0 $b0 bytes, ZeRO-1 $b1 bytes"
  [ -n "$b0" ] && [ -n "$b1" ] && [ $((b1 * 2)) -ge "$b0" ] && [ $((b1 * 2)) -le $((b0 + 64)) ] ||
    fail "ZeRO-1 should hold half of ZeRO-0's optimizer bytes at world 2"
done
run 2 zr dist.zero=1 --stop-after 4
run 4 zr dist.zero=1
grep -q "resumed from" "$WORK/zr.log" || fail "no resume"
$PY "$CHECK" losses-close "$WORK/zr/metrics.jsonl" "$WORK/z1-adamw/metrics.jsonl" 1e-5 5
echo PASS
