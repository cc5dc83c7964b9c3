#!/usr/bin/env bash
# train.recompute trades compute for memory without moving a value: 8 steps (dropout on, three
# layers so that recomputed layers sit between kept ones) with `attention` and `layer` save the
# checkpoints of `none` byte for byte (weights and optimizer state) and log the same losses — on
# the CPU in fp32 (bert) and bf16 on two threads (gpt) — and the key is harmless on resume: a
# `layer` run stopped at step 4 resumes with `none` onto the straight run's bytes.
source "$(dirname "$0")/lib.sh"
run() {  # run NAME [overrides...]
  local name=$1; shift
  "$MHETRAIN" train "$TINY" "${DATA[@]}" model.layers=3 train.out_dir="$WORK/$name" "$@" 2>"$WORK/$name.log" ||
    { cat "$WORK/$name.log"; fail "$name"; }
}
same() {  # same A B: byte-identical checkpoints and identical losses
  for f in model.safetensors optimizer.safetensors; do
    cmp "$WORK/$1/checkpoints/step_00000008/$f" "$WORK/$2/checkpoints/step_00000008/$f" ||
      fail "$f of $1 differs from $2"
  done
  $PY "$CHECK" losses-close "$WORK/$1/metrics.jsonl" "$WORK/$2/metrics.jsonl" 0
}
for mode in none attention layer; do run fp32-$mode train.recompute=$mode; done
same fp32-attention fp32-none
same fp32-layer fp32-none
GPT=(model.arch=gpt objective.type=clm runtime.precision=bf16 runtime.threads=2)
for mode in none layer; do run bf16-$mode "${GPT[@]}" train.recompute=$mode; done
same bf16-layer bf16-none
run resumed train.recompute=layer --stop-after 4
run resumed train.recompute=none
grep -q "resumed from .*step_00000004 (step 4" "$WORK/resumed.log" || { cat "$WORK/resumed.log"; fail "did not resume"; }
same resumed fp32-none
echo PASS
