#!/usr/bin/env bash
# First checks on a machine WITH NVIDIA GPUs (CI has none; it runs the same code through the
# CPU emulation of CUDA in tests/cuda).  See kernels/cuda/README.md, "On a machine with a GPU".
#   tests/gpu/run.sh                 build into build-gpu/ and run everything
#   MHE_GPU_PEAK_TFLOPS=989 tests/gpu/run.sh     bf16 dense peak when the GPU is not in the table
# Steps: 1 parity of every op, model and 20-step training vs the CPU backend; 2 NCCL all-reduce
# and data-parallel gradients across the local GPUs; 3 a 100-step training run (loss must
# fall); 4 throughput (tokens/s, MFU against the GPU's bf16 peak).  Exit status 1 on failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${MHE_BUILD_DIR:-$here/build-gpu}"
export PATH="/usr/local/cuda/bin:$PATH"
say() { printf '\n== %s\n' "$*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver on this machine"
ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
[ "$ngpu" -ge 1 ] || fail "no GPU visible to nvidia-smi"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

# MFU against the card's dense data-sheet peak: the backend's one table (kernels/gpu_peak.c), or
# MHE_GPU_PEAK_TFLOPS, which the backend reads itself.
peak=auto

say "building ($build)"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMHE_CUDA=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target mhetrain gpu_parity gpu_act gpu_attention gpu_model gpu_nccl gpu_bench >/dev/null
"$build/mhetrain" info | sed -n '1,12p'
echo "GPUs: $ngpu x $gpu_name (MFU against its data sheet, kernels/gpu_peak.c; a card not there: set MHE_GPU_PEAK_TFLOPS)"

say "1. parity with the CPU backend: every op (fp32 1e-5, bf16 1e-2)"
"$build/gpu_parity" || fail "op parity"
"$build/gpu_act" || fail "op parity on bf16 activations (a bf16 run's default)"
"$build/gpu_attention" || fail "attention parity"
say "1. parity: forward+backward of every arch x attention type (1e-4), 20-step training runs"
"$build/gpu_model" || fail "model parity"

say "2. NCCL: all-reduce and data-parallel gradients over $ngpu local GPU(s)"
mpirun --oversubscribe -np "$ngpu" "$build/gpu_nccl" || fail "NCCL all-reduce"

say "3. 100-step training run (tiny GPT, bf16, one fixed batch: the loss must fall)"
"$build/gpu_bench" "$here/configs/tiny-gpt-mha.yaml" 100 "$peak" runtime.device=cuda runtime.precision=bf16 ||
  fail "training run"
if [ -d "$here/corpus/shards" ]; then
  say "3b. 100 steps of mhetrain train on the quickstart corpus (runtime.device=cuda)"
  # The quickstart config names its corpus relative to the repository.
  (cd "$here" && "$build/mhetrain" train configs/quickstart.yaml runtime.device=cuda \
    runtime.precision=bf16 train.steps=100 train.log_every=10 train.eval_every=0 \
    train.out_dir="$build/gpu-train") || fail "mhetrain train on the GPU"
fi

say "4. throughput: GPT-2 small (124M), bf16, batch 8 x 1024"
"$build/gpu_bench" "$here/configs/gpt2-small-mha.yaml" 30 "$peak" runtime.device=cuda runtime.precision=bf16 \
  train.micro_batch=8 data.seq_len=1024 || fail "throughput run"
say "5. the cost model against this GPU: predicted vs measured time per op class"
# kernels/cuda/README.md "Cost model": figures for A100 and H100 SXM; on other GPUs the nearest
# of the two is used and the comparison says how far off the published figures are.
case "$gpu_name" in
  *H100*|*H200*|*GH200*) cost_gpu=h100 ;;
  *) cost_gpu=a100 ;;
esac
for cfg in "bert-base-mha.yaml data.seq_len=128 train.micro_batch=64" \
           "bert-base-mha.yaml data.seq_len=512 train.micro_batch=16" \
           "gpt2-small-mha.yaml data.seq_len=1024 train.micro_batch=16"; do
  set -- $cfg
  echo "--- $cfg (model: $cost_gpu)"
  "$build/mhetrain" bench "$here/configs/$1" "${@:2}" runtime.device=cuda runtime.precision=bf16 \
    --gpu "$cost_gpu" --steps 3 | sed -n '/^cost model:/,/^cost-result:/p;/^step time:/p' ||
    fail "cost model comparison ($cfg)"
done
say "all GPU checks passed"
