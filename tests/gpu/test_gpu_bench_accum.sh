#!/usr/bin/env bash
# gpu_bench on the emulated GPU: --accum A runs A micro-batches into the gradients before each
# optimizer step (check.sh's MFU configs: global batch = 4 x micro-batch) and counts A times the
# tokens; on the same batch with the loss divided over all of them, the losses follow those of one
# micro-batch per step.  MFU names where its peak came from.  A bad --accum is a one-line error.
set -euo pipefail
: "${GPU_BENCH_EMU:?}" "${MHE_SOURCE_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir gpu-bench-accum
args=(runtime.device=cuda runtime.precision=bf16 model.layers=1 model.hidden=32 model.heads=2 model.ffn=64
      model.vocab_size=512 data.seq_len=16 train.micro_batch=2)
cfgf="$MHE_SOURCE_DIR/configs/tiny-gpt-mha.yaml"
MHE_GPU_PEAK_TFLOPS=1 "$GPU_BENCH_EMU" "$cfgf" 2 auto "${args[@]}" >"$WORK/a1.txt" 2>&1 || { cat "$WORK/a1.txt"; fail "accum 1"; }
MHE_GPU_PEAK_TFLOPS=1 "$GPU_BENCH_EMU" "$cfgf" 2 auto --accum 2 "${args[@]}" >"$WORK/a2.txt" 2>&1 ||
  { cat "$WORK/a2.txt"; fail "accum 2"; }
grep -q "accumulation 1 (32 tokens per optimizer step)" "$WORK/a1.txt" || { cat "$WORK/a1.txt"; fail "accum 1 banner"; }
grep -q "accumulation 2 (64 tokens per optimizer step)" "$WORK/a2.txt" || { cat "$WORK/a2.txt"; fail "accum 2 banner"; }
grep -Eq "^throughput: [0-9.]+ tokens/s, [0-9.]+ TFLOP/s, MFU [0-9.]+% of 1 TFLOP/s bf16 peak \(MHE_GPU_PEAK_TFLOPS, dense\)" \
  "$WORK/a2.txt" || { cat "$WORK/a2.txt"; fail "MFU line"; }
# The same losses (4 decimals) at every printed step: the gradients of two copies of the batch
# over twice its labels are the gradient of one (halving is exact in binary floating point).
l1=$(grep '^step' "$WORK/a1.txt"); l2=$(grep '^step' "$WORK/a2.txt")
[ "$(echo "$l1" | wc -l)" -ge 2 ] || { cat "$WORK/a1.txt"; fail "no step lines"; }
[ "$l1" = "$l2" ] || { echo "accum 1:"; echo "$l1"; echo "accum 2:"; echo "$l2"; fail "losses differ"; }
if "$GPU_BENCH_EMU" "$cfgf" 2 0 --accum 0 "${args[@]}" >"$WORK/bad.txt" 2>&1; then cat "$WORK/bad.txt"; fail "--accum 0 accepted"; fi
grep -q "gpu_bench: --accum 0: expected an integer in \[1, 4096\]" "$WORK/bad.txt" || { cat "$WORK/bad.txt"; fail "message"; }
echo PASS
