#!/usr/bin/env bash
# `mhetrain train` on 2 emulated GPUs with NCCL: gradient buckets all-reduced on a second stream
# as the backward pass finishes them (the default) vs every bucket after the backward pass
# (--no-overlap).  Small buckets (dist.bucket_mb) make several per layer, so a bucket started
# before its gradients were final would change the sums; the weights and optimizer state of
# the two runs must be equal bit for bit.  The same for ZeRO-1 through NCCL, which must also
# agree with the all-reduce runs.
set -euo pipefail
: "${MHETRAIN_EMU:?}"
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
SMALL=(model.hidden=32 model.heads=2 model.ffn=64 model.max_seq=16 data.seq_len=16
       train.global_batch=4 train.micro_batch=2 train.steps=3 train.eval_every=0
       train.checkpoint_every=3 train.final_eval_batches=1 runtime.threads=1
       runtime.device=cuda dist.bucket_mb=0.004)
run() {  # run NAME flags...
  local name=$1; shift
  "${MPIRUN[@]}" -np 2 "$MHETRAIN_EMU" train "$TINY" "${DATA[@]}" "${SMALL[@]}" \
    train.out_dir="$WORK/$name" "$@" 2>"$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name"; }
}
run overlap
run serial --no-overlap
# ZeRO-1 through NCCL: bucket pieces summed onto their shard's owner, shards updated there and
# broadcast.  The sums are the all-reduce's, the update elementwise; only the gradient norm is
# added in another order (per shard, then across ranks), so the clip coefficient may differ in
# its last bits.
run zero dist.zero=1
run zero-serial dist.zero=1 --no-overlap
grep -q "NCCL on device buffers in buckets on a second stream, overlapped" "$WORK/overlap.log" ||
  { cat "$WORK/overlap.log"; fail "the overlapped run does not say it overlapped"; }
grep -q "NCCL on device buffers in buckets after the backward pass" "$WORK/serial.log" ||
  { cat "$WORK/serial.log"; fail "the --no-overlap run does not say it reduced after the backward pass"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/overlap/checkpoints/step_00000003/$f" "$WORK/serial/checkpoints/step_00000003/$f" ||
    fail "$f differs between the overlapped and the non-overlapped run"
done
$PY "$CHECK" losses-close "$WORK/overlap/metrics.jsonl" "$WORK/serial/metrics.jsonl" 0
grep -q "NCCL reduce onto the shard owners in buckets on a second stream, overlapped" "$WORK/zero.log" ||
  { cat "$WORK/zero.log"; fail "the ZeRO-1 run does not say it reduced onto the shard owners"; }
for f in model.safetensors optimizer.safetensors; do
  cmp "$WORK/zero/checkpoints/step_00000003/$f" "$WORK/zero-serial/checkpoints/step_00000003/$f" ||
    fail "$f differs between the overlapped and the non-overlapped ZeRO-1 run"
done
$PY "$CHECK" losses-close "$WORK/zero/metrics.jsonl" "$WORK/overlap/metrics.jsonl" 1e-6
$PY "$CHECK" weights-close "$WORK/zero/checkpoints/step_00000003/model.safetensors" \
  "$WORK/overlap/checkpoints/step_00000003/model.safetensors" 1e-6
$PY "$CHECK" weights-close "$WORK/zero/checkpoints/step_00000003/optimizer.safetensors" \
  "$WORK/overlap/checkpoints/step_00000003/optimizer.safetensors" 1e-6
echo PASS
