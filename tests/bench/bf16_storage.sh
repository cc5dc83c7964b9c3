#!/usr/bin/env bash
# Issue 49's question: where bf16 products are no faster than fp32 ones, does bf16 storage of the
# activations with fp32 products beat both (a third runtime.precision for `auto`)?
# The CPU backend already runs exactly that whenever oneDNN has no bf16 instructions to use: its
# bf16 mode keeps the activations in bf16 and hands the products to the fp32 primitive over the
# widened operands (kernels/cpu/README.md).  ONEDNN_MAX_CPU_ISA selects it on any CPU:
#   fp32            runtime.precision=fp32, full ISA
#   bf16            runtime.precision=bf16, full ISA (native bf16 products where the CPU has them)
#   bf16-store      runtime.precision=bf16 with ONEDNN_MAX_CPU_ISA=AVX512_CORE: bf16 storage, fp32 products
#   avx2 fp32 / avx2 bf16-store   the same two at the AVX2 level (MHE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2)
# Each row's configurations alternate R times (a shared machine drifts); the median tokens/s of each
# and the ratios against fp32 at the same level are printed.  The shapes are bench_vs_torch.sh's.
#   MHETRAIN=build/mhetrain tests/bench/bf16_storage.sh [--runs R] [--steps S] [--sizes "tiny512 small"] [--attention "mha"]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$(cd "$here/../.." && pwd)"
source "$here/bench_lib.sh"
mhetrain="${MHETRAIN:-$src/build/mhetrain}"
runs=3 steps=2 sizes="tiny512 small" attns="mha"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --attention) attns="$2"; shift 2 ;;
    *) echo "bf16_storage: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ "$runs" =~ ^[1-9][0-9]*$ && "$steps" =~ ^[1-9][0-9]*$ ]] || { echo "bf16_storage: --runs and --steps take positive integers" >&2; exit 2; }
[ -x "$mhetrain" ] || { echo "bf16_storage: no mhetrain at $mhetrain (set MHETRAIN)" >&2; exit 2; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
confs=(fp32 bf16 bf16-store avx2-fp32 avx2-bf16-store)
declare -A m
printf '%-8s %-8s %10s %10s %12s %12s %16s %10s %12s %12s\n' size attn fp32 bf16 bf16-store 'store/fp32' 'store/bf16' 'avx2 fp32' 'avx2 store' 'store/fp32'
for size in $sizes; do
  bench_size "$size" || { echo "bf16_storage: unknown size '$size' (tiny, small, tiny512)" >&2; exit 2; }
  for attn in $attns; do
    cfg="$src/configs/tiny-bert-$(echo "$attn" | tr _ -).yaml"
    [ -f "$cfg" ] || { echo "bf16_storage: no config $cfg" >&2; exit 2; }
    for c in "${confs[@]}"; do : >"$tmp/$c"; done
    for ((r = 0; r < runs; r++)); do
      for c in "${confs[@]}"; do
        case $c in
          fp32) env=() p=fp32 ;;
          bf16) env=() p=bf16 ;;
          bf16-store) env=(ONEDNN_MAX_CPU_ISA=AVX512_CORE) p=bf16 ;;
          avx2-fp32) env=(MHE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2) p=fp32 ;;
          avx2-bf16-store) env=(MHE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2) p=bf16 ;;
        esac
        env "${env[@]}" "$mhetrain" bench "$cfg" model.norm=post model.dropout=0.1 model.attn_dropout=0.1 \
          objective.mask_prob=0.15 model.layers=$L model.hidden=$D model.heads=$n model.ffn=$((4 * D)) \
          model.vocab_size=$V model.max_seq=$T data.seq_len=$T train.micro_batch=$B runtime.threads=2 \
          runtime.precision=$p --steps "$steps" >"$tmp/o.txt" 2>"$tmp/e.txt" || { cat "$tmp/e.txt" >&2; exit 1; }
        tok=$(grep '^bench-result:' "$tmp/o.txt" | tr ' ' '\n' | sed -n 's/^tokens_per_s=//p')
        [ -n "$tok" ] || { echo "bf16_storage: no tokens_per_s in mhetrain bench's result ($c)" >&2; cat "$tmp/o.txt" >&2; exit 1; }
        echo "$tok" >>"$tmp/$c"
      done
    done
    for c in "${confs[@]}"; do m[$c]=$(median <"$tmp/$c"); done
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }
    printf '%-8s %-8s %10.0f %10.0f %12.0f %12s %16s %10.0f %12.0f %12s\n' "$size" "$attn" "${m[fp32]}" "${m[bf16]}" \
      "${m[bf16-store]}" "$(ratio "${m[bf16-store]}" "${m[fp32]}")" "$(ratio "${m[bf16-store]}" "${m[bf16]}")" \
      "${m[avx2-fp32]}" "${m[avx2-bf16-store]}" "$(ratio "${m[avx2-bf16-store]}" "${m[avx2-fp32]}")"
  done
done
echo "load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
