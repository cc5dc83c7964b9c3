#!/bin/sh
# A/B of two mhetrain builds on a shared, loaded machine: CPU time per training step on one
# thread (perf stat's task-clock of an S2-step run minus an S1-step run, so start-up, JIT and
# the warm-up step cancel), A and B alternating, medians of R pairs.  Wall-clock tokens/s swing
# by 2x when other jobs share the cores; CPU time moves by a few percent.  Not for absolute
# numbers (bench_vs_torch.sh on a quiet machine is), for "did this commit help".
#
#   tests/bench/ab_cpu_time.sh A_BIN B_BIN [--attention mha] [--size tiny|small|tiny512]
#                              [--precision bf16|fp32] [--runs 3] [--steps "2 6"]
set -eu
[ $# -ge 2 ] || { sed -n '2,9p' "$0"; exit 2; }
a=$1 b=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
src=${MHE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
attn=mha size=tiny prec=bf16 runs=3 steps="2 6"
while [ $# -gt 0 ]; do
    case $1 in
    --attention) attn=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --precision) prec=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    *) echo "ab_cpu_time: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
command -v perf >/dev/null || { echo "ab_cpu_time: needs perf (linux-perf)" >&2; exit 2; }
case $size in  # bench_vs_torch.sh's shapes
tiny) L=4 D=256 n=8 T=128 B=32 V=8192 ;;
small) L=4 D=512 n=8 T=128 B=32 V=30522 ;;
tiny512) L=4 D=256 n=8 T=512 B=8 V=8192 ;;
*) echo "ab_cpu_time: unknown size '$size'" >&2; exit 2 ;;
esac
s1=${steps% *} s2=${steps#* }
cfg="$src/configs/tiny-bert-$(echo "$attn" | tr _ -).yaml"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# CPU milliseconds of one run of S steps.
cpu_ms() {
    OMP_NUM_THREADS=1 perf stat -x, -e task-clock -o "$tmp/stat" "$1" bench "$cfg" model.norm=post \
        model.dropout=0.1 model.attn_dropout=0.1 objective.mask_prob=0.15 model.layers=$L \
        model.hidden=$D model.heads=$n model.ffn=$((4 * D)) model.vocab_size=$V model.max_seq=$T \
        data.seq_len=$T train.micro_batch=$B runtime.threads=1 runtime.precision=$prec --steps "$2" >/dev/null
    awk -F, '/task-clock/ { print $1 }' "$tmp/stat"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
r=0
while [ "$r" -lt "$runs" ]; do
    for x in a b; do
        eval bin=\$$x
        c1=$(cpu_ms "$bin" "$s1") c2=$(cpu_ms "$bin" "$s2")
        awk -v p="$c1" -v q="$c2" -v n=$((s2 - s1)) 'BEGIN { printf "%.2f\n", (q - p) / n }' >>"$tmp/$x"
    done
    r=$((r + 1))
done
ma=$(median <"$tmp/a") mb=$(median <"$tmp/b")
echo "$attn $size $prec: CPU ms/step A [$(tr '\n' ' ' <"$tmp/a")] B [$(tr '\n' ' ' <"$tmp/b")]"
awk -v a="$ma" -v b="$mb" -v t=$((B * T)) 'BEGIN { printf "median A %.1f ms (%.0f tok/CPU-s)  B %.1f ms (%.0f tok/CPU-s)  B speed-up %.3fx\n", a, t * 1000 / a, b, t * 1000 / b, a / b }'
