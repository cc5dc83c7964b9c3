#!/usr/bin/env bash
# runtime.device: cuda compares the memory a run needs (weights, gradients, the optimizer's
# m/v/update buffers and the activation arena, all known before the first allocation) with
# cudaMemGetInfo's free bytes, on an emulated device of 64 MiB (MHE_EMU_DEVICE_MEMORY):
#  - a 300M-parameter model is refused at once: exit 2, one line with the need and the free
#    memory, not the allocator's "out of memory" (exit 1) minutes in;
#  - a 5.6M-parameter model whose weights and gradients fit (45 MB) but not with the optimizer's
#    three buffers (+67 MB) is refused the same way: the state is counted (uncounted, the
#    allocator would fail later with exit 1);
#  - the small model of the other emulated runs trains.
set -euo pipefail
: "${MHETRAIN_EMU:?}"
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
export MHE_EMU_DEVICE_MEMORY=67108864
SMALL=(model.hidden=32 model.heads=2 model.ffn=64 model.max_seq=16 data.seq_len=16
       train.global_batch=4 train.micro_batch=2 train.steps=1 train.eval_every=0
       train.checkpoint_every=0 train.final_eval_batches=1 runtime.threads=1 runtime.device=cuda)
refused() {  # NAME overrides...
  local name=$1 status start=$(date +%s)
  shift
  set +e
  "$MHETRAIN_EMU" train "$TINY" "${DATA[@]}" "${SMALL[@]}" train.out_dir="$WORK/$name" "$@" 2>"$WORK/$name.log"
  status=$?
  set -e
  [ "$status" = 2 ] || { cat "$WORK/$name.log"; fail "$name: exit $status, expected 2"; }
  [ "$(wc -l <"$WORK/$name.log")" = 1 ] || { cat "$WORK/$name.log"; fail "$name: not one line"; }
  grep -q "^mhetrain: model: [0-9]* parameters need [0-9.]* [MG]iB of cuda device memory for weights, gradients,\{0,1\}\( and\)\{0,1\} optimizer state\( and activations\)\{0,1\} (batch 2 x seq 16) but the device has 64.0 MiB free of 64.0 MiB; reduce model.layers/hidden/ffn or the batch$" \
    "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: no device memory message"; }
  [ $(( $(date +%s) - start )) -lt 60 ] || fail "$name: the refusal took over 60 s"
}
refused big model.layers=24 model.hidden=1024 model.heads=16 model.ffn=4096
refused state model.layers=4 model.hidden=320 model.heads=4 model.ffn=1280
"$MHETRAIN_EMU" train "$TINY" "${DATA[@]}" "${SMALL[@]}" train.out_dir="$WORK/small" 2>"$WORK/small.log" ||
  { cat "$WORK/small.log"; fail "the small model did not train in 64 MiB"; }
echo PASS
