#!/bin/sh
# mhetrain vs PyTorch: one full training step (forward, backward, AdamW) of the same BERT, batch
# and sequence length, alternating the two programs run by run; prints the medians of tokens/s,
# their ratio, mhetrain's MFU against the measured sgemm rate, and both peak RSS.
#
#   tests/bench/bench_vs_torch.sh [--runs R] [--steps S] [--threads N] [--sizes "tiny small tiny512"]
#                                 [--attention "mha mhe_add mhe_mul"] [--quick]
#
# Each run is a fresh process: one warm-up step, then S timed steps (median within the run);
# the table shows the median over R runs (default 5).  --quick shrinks every model (for the
# ctest smoke).  Environment: MHETRAIN (default build/mhetrain), TORCH_PYTHON (/usr/bin/python3).
#
# OpenBLAS 0.3.21 does not know AMD Zen 4 and runs its AVX2 (Haswell) sgemm there, half the
# AVX-512 rate; when the CPU has AVX-512 and OPENBLAS_CORETYPE is unset we set SKYLAKEX for
# BOTH programs (torch's matmuls go through the same OpenBLAS), so neither side is handicapped.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${MHE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
mhetrain=${MHETRAIN:-$src/build/mhetrain}
py=${TORCH_PYTHON:-/usr/bin/python3}
runs=5 steps=2 threads=2 sizes="tiny small tiny512" attns="mha mhe_add mhe_mul" quick=0
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --attention) attns=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench_vs_torch: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$mhetrain" ] || { echo "bench_vs_torch: no mhetrain at $mhetrain (set MHETRAIN)" >&2; exit 2; }
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    OPENBLAS_CORETYPE=SKYLAKEX
    export OPENBLAS_CORETYPE
fi
export OMP_NUM_THREADS=$threads
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# key=value from a result line
field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "bench_vs_torch: runs=$runs steps/run=$steps threads=$threads OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto} $(date -u +%FT%TZ)"
printf '%-8s %-8s %10s %10s %7s %7s %9s %9s %9s\n' size attn mhe_tok/s torch_tok/s ratio MFU sgemm_GF mhe_MiB torch_MiB
for size in $sizes; do
    case $size in
    tiny) L=4 D=256 n=8 T=128 B=32 V=8192 ;;
    small) L=4 D=512 n=8 T=128 B=32 V=30522 ;;
    tiny512) L=4 D=256 n=8 T=512 B=8 V=8192 ;;
    *) echo "bench_vs_torch: unknown size '$size'" >&2; exit 2 ;;
    esac
    if [ "$quick" = 1 ]; then L=1 D=64 n=4 T=$((T / 8)) B=2 V=512; fi
    F=$((4 * D))
    for attn in $attns; do
        cfg="$src/configs/tiny-bert-$(echo "$attn" | tr _ -).yaml"
        : >"$tmp/ours" && : >"$tmp/torch"
        r=0
        while [ "$r" -lt "$runs" ]; do
            "$mhetrain" bench "$cfg" model.layers=$L model.hidden=$D model.heads=$n model.ffn=$F \
                model.vocab_size=$V model.max_seq=$T data.seq_len=$T train.micro_batch=$B \
                runtime.threads="$threads" --steps "$steps" >"$tmp/o.txt"
            grep '^bench-result:' "$tmp/o.txt" >>"$tmp/ours"
            "$py" "$here/torch_bert.py" --attention "$attn" --layers $L --hidden $D --heads $n \
                --ffn $F --vocab $V --seq $T --batch $B --threads "$threads" --steps "$steps" >"$tmp/t.txt"
            grep '^torch-result:' "$tmp/t.txt" >>"$tmp/torch"
            r=$((r + 1))
        done
        col() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | median; }
        ours=$(col "$tmp/ours" tokens_per_s) theirs=$(col "$tmp/torch" tokens_per_s)
        mfu=$(col "$tmp/ours" mfu) peak=$(col "$tmp/ours" peak_gflops)
        orss=$(col "$tmp/ours" peak_rss_mib) trss=$(col "$tmp/torch" peak_rss_mib)
        awk -v s="$size" -v a="$attn" -v o="$ours" -v t="$theirs" -v m="$mfu" -v p="$peak" \
            -v r1="$orss" -v r2="$trss" 'BEGIN { printf "%-8s %-8s %10.0f %10.0f %6.2fx %6.1f%% %9.1f %9.0f %9.0f\n", s, a, o, t, o / t, 100 * m, p, r1, r2 }'
        echo "$size $attn $ours" >>"$tmp/table"
    done
done
# The attention types against mha on the same size (mhetrain's tokens/s).
awk '$2 == "mha" { base[$1] = $3 } { v[$1 " " $2] = $3; k[NR] = $1 " " $2; sz[NR] = $1 }
     END { for (i = 1; i <= NR; i++) if (base[sz[i]] > 0 && k[i] !~ / mha$/)
               printf "speed vs mha: %s %.2fx\n", k[i], v[k[i]] / base[sz[i]] }' "$tmp/table"
