#!/usr/bin/env bash
# mhetrain bench on the CUDA backend counts MFU against the card's data-sheet peak, as training
# does (a probe through the matmul op read 82-101 TFLOP/s on an H200, CALIBRATION.md run 4).  The
# emulated device has no data sheet, so MHE_GPU_PEAK_TFLOPS stands in for it; a malformed value is
# a one-line error.
set -euo pipefail
: "${MHETRAIN_EMU:?}" "${MHE_SOURCE_DIR:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir bench-peak
args=("$MHE_SOURCE_DIR/configs/tiny-bert-mha.yaml" runtime.device=cuda runtime.precision=bf16 model.layers=1
      data.seq_len=16 train.micro_batch=2 --steps 1)
MHE_GPU_PEAK_TFLOPS=1000 "$MHETRAIN_EMU" bench "${args[@]}" >"$WORK/out.txt" 2>&1 || { cat "$WORK/out.txt"; fail "bench"; }
grep -q "^matmul peak (the GPU's data sheet, dense bf16): 1000000.00 GFLOP/s" "$WORK/out.txt" ||
  { cat "$WORK/out.txt"; fail "the ceiling is not the data-sheet peak"; }
grep -q "peak_gflops=1000000.000 .*mfu_outran=0" "$WORK/out.txt" || { cat "$WORK/out.txt"; fail "bench-result"; }
if MHE_GPU_PEAK_TFLOPS=fast "$MHETRAIN_EMU" bench "${args[@]}" >"$WORK/bad.txt" 2>&1; then
  cat "$WORK/bad.txt"; fail "a malformed MHE_GPU_PEAK_TFLOPS was accepted"
fi
grep -q "MHE_GPU_PEAK_TFLOPS=fast: expected the GPU's dense peak" "$WORK/bad.txt" || { cat "$WORK/bad.txt"; fail "message"; }
echo PASS
