#!/usr/bin/env bash
# The same global batch on 1 worker (4 micro-batches accumulated), 2 and 4 workers: per-step
# losses and final weights within 1e-5; every rank ends with identical weights (the trainer
# compares replica checksums every logging step and aborts on a mismatch).
source "$(dirname "$0")/lib.sh"
run() {  # run NP NAME [extra...]
  local np=$1 name=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/$name" "$@" \
    2>"$WORK/$name.log" || { cat "$WORK/$name.log"; fail "world $np run"; }
}
run 1 w1
run 2 w2
run 4 w4
for w in w2 w4; do
  $PY "$CHECK" losses-close "$WORK/$w/metrics.jsonl" "$WORK/w1/metrics.jsonl" 1e-5
  $PY "$CHECK" weights-close "$WORK/$w/checkpoints/step_00000008/model.safetensors" \
    "$WORK/w1/checkpoints/step_00000008/model.safetensors" 1e-5
  grep -q "replicas identical" "$WORK/$w.log" || fail "no replica check in $w"
done
# Save at world 2, resume at world 4 and at world 1: the loss continues as the straight run's.
run 2 r2 --stop-after 4
cp -r "$WORK/r2" "$WORK/r1"
run 4 r2
run 1 r1
for r in r1 r2; do
  grep -q "resumed from" "$WORK/$r.log" || fail "$r did not resume"
  $PY "$CHECK" losses-close "$WORK/$r/metrics.jsonl" "$WORK/w2/metrics.jsonl" 1e-5 5
done
echo PASS
