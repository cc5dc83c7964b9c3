#!/usr/bin/env bash
# Benchmark (not a test): step time of 2-rank training with the gradient all-reduce overlapped
# with the backward pass vs started only after it.  Communication is made slow on purpose
# (Open MPI over TCP loopback instead of shared memory) and the model has 25M parameters, so
# the all-reduce matters.  Runs alternate; medians of the per-step tokens/s are compared.
#   tests/dist/overlap_bench.sh [REPEATS]   (needs the train_corpus fixture: run ctest -R train once)
set -euo pipefail
MHE_SOURCE_DIR="${MHE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
MHE_BINARY_DIR="${MHE_BINARY_DIR:-$MHE_SOURCE_DIR/build}"
MHETRAIN="${MHETRAIN:-$MHE_BINARY_DIR/mhetrain}"
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
repeats="${1:-3}"
model=(model.layers=4 model.hidden=512 model.heads=8 model.ffn=2048 attention.type=mha
       train.global_batch=4 train.micro_batch=2 train.steps=6 train.log_every=1 train.eval_every=0
       train.checkpoint_every=0 dist.bucket_mb=4 runtime.threads=1)
for r in $(seq 1 "$repeats"); do
  for mode in overlap no-overlap; do
    flag=(); [ "$mode" = no-overlap ] && flag=(--no-overlap)
    rm -rf "$WORK/$mode"
    "${MPIRUN[@]}" -np 2 --mca btl tcp,self "$MHETRAIN" train "$TINY" "${DATA[@]}" "${model[@]}" \
      train.out_dir="$WORK/$mode" "${flag[@]}" 2>/dev/null
    # steps 2.. (step 1 includes warm-up)
    /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "tokens_per_s" in l]
print(*[r["tokens_per_s"] for r in rows if r["step"] >= 2])' "$WORK/$mode/metrics.jsonl" >> "$WORK/$mode.tps"
  done
done
/usr/bin/python3 - "$WORK" <<'PY'
import statistics, sys
work = sys.argv[1]
med = {}
for mode in ("overlap", "no-overlap"):
    vals = [float(x) for line in open(f"{work}/{mode}.tps") for x in line.split()]
    med[mode] = statistics.median(vals)
    print(f"{mode:11s} median {med[mode]:8.1f} tokens/s over {len(vals)} steps")
print(f"overlap speed-up: {med['overlap'] / med['no-overlap']:.3f}x")
PY
