#!/usr/bin/env bash
# `mhetrain train` end to end with runtime.device: cuda on the emulated GPU (mhetrain_emu) against
# runtime.device: cpu, on the tests/train fixture corpus with a shrunken tiny model (the
# emulation is slow): per-step losses within 1e-4 relative in fp32 at 1 and 2 ranks, within 2%
# in bf16 (bf16 activations, at 1 and 2 ranks); the 2-rank CUDA run also agrees with the 1-rank
# CUDA run (same global batch).  One final evaluation batch: the whole validation split takes minutes in the emulation.
set -euo pipefail
: "${MHETRAIN_EMU:?}"
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
SMALL=(model.hidden=32 model.heads=2 model.ffn=64 model.max_seq=16 data.seq_len=16
       train.global_batch=4 train.micro_batch=2 train.steps=4 train.eval_every=0
       train.checkpoint_every=0 train.final_eval_batches=1 runtime.threads=1)
run() {  # run NP NAME overrides...
  local np=$1 name=$2; shift 2
  "${MPIRUN[@]}" -np "$np" "$MHETRAIN_EMU" train "$TINY" "${DATA[@]}" "${SMALL[@]}" \
    train.out_dir="$WORK/$name" "$@" 2>"$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name"; }
}
run 1 cpu runtime.device=cpu
run 1 cuda runtime.device=cuda
# MFU on a GPU is against the card's dense peak: the emulated card has no data sheet, so this
# run states one (2 TFLOP/s a rank, 4000 GFLOP/s for both).
MHE_GPU_PEAK_TFLOPS=2 run 2 cuda2 runtime.device=cuda
run 1 bf16 runtime.device=cuda runtime.precision=bf16
# 2 ranks: the deferred parameter-gradient sums finish before each bucket's all-reduce.
run 2 bf16-2 runtime.device=cuda runtime.precision=bf16
# LAMB: the backend's range hooks (three launches per step) against the host optimizer, and at
# 2 ranks (NCCL-reduced gradients; ZeRO-1 through NCCL: tests/cuda/test_nccl_overlap.sh).
run 1 lamb-cpu runtime.device=cpu optim.name=lamb
run 1 lamb-cuda runtime.device=cuda optim.name=lamb
run 2 lamb-2 runtime.device=cuda optim.name=lamb
grep -q "cuda" "$WORK/cuda.log" || { cat "$WORK/cuda.log"; fail "the cuda run does not say it used cuda"; }
grep -q "gradients all-reduced by NCCL on device buffers" "$WORK/cuda2.log" || { cat "$WORK/cuda2.log"; fail "the 2-rank cuda run did not use NCCL"; }
grep -q "4000.0 GFLOP/s (the GPU.s data sheet, dense fp32)" "$WORK/cuda2.log" || { cat "$WORK/cuda2.log"; fail "the GPU's stated peak is not the ceiling"; }
grep -Eq "MFU [0-9.]+%" "$WORK/cuda2.log" || { cat "$WORK/cuda2.log"; fail "no MFU against the GPU's peak"; }
grep -q "MFU n/a" "$WORK/cuda.log" || { cat "$WORK/cuda.log"; fail "an unknown GPU must show MFU n/a"; }
$PY "$CHECK" losses-close "$WORK/cuda/metrics.jsonl" "$WORK/cpu/metrics.jsonl" 1e-4
$PY "$CHECK" losses-close "$WORK/cuda2/metrics.jsonl" "$WORK/cpu/metrics.jsonl" 1e-4
$PY "$CHECK" losses-close "$WORK/bf16/metrics.jsonl" "$WORK/cpu/metrics.jsonl" 2e-2
$PY "$CHECK" losses-close "$WORK/bf16-2/metrics.jsonl" "$WORK/cpu/metrics.jsonl" 2e-2
$PY "$CHECK" losses-close "$WORK/lamb-cuda/metrics.jsonl" "$WORK/lamb-cpu/metrics.jsonl" 1e-4
$PY "$CHECK" losses-close "$WORK/lamb-2/metrics.jsonl" "$WORK/lamb-cpu/metrics.jsonl" 1e-4
$PY "$CHECK" weights-close "$WORK/lamb-cuda/checkpoints/step_00000004/model.safetensors" \
  "$WORK/lamb-cpu/checkpoints/step_00000004/model.safetensors" 1e-4
# bf16 must really have run: its losses differ from the fp32 run's somewhere.
$PY - "$WORK/bf16/metrics.jsonl" "$WORK/cuda/metrics.jsonl" <<'PYEOF' || fail "bf16 losses equal fp32: bf16 not in effect"
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if "loss" in r and r.get("split") != "valid"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("bf16 vs fp32 max relative loss difference %.2e" % max(abs(x - y) / abs(y) for x, y in zip(a, b)))
sys.exit(0 if any(x != y for x, y in zip(a, b)) else 1)
PYEOF
echo PASS
