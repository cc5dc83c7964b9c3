#!/bin/sh
# mhetrain vs PyTorch: one full training step (forward, backward, AdamW) of the same BERT, batch
# and sequence length.  Per run, alternating: mhetrain fp32, mhetrain bf16 (runtime.precision),
# Debian's PyTorch 1.13 eager fp32 (continuity with earlier tables), and PyTorch 2 from PyPI
# written the fast way (SDPA, MLM head on the scored rows, fused AdamW) in fp32 and with bf16
# autocast; then mhetrain at runtime.precision: auto (the precision it chose), and auto again as
# an AVX2-only laptop would run it (MHE_CPU_ISA=avx2 and ONEDNN_MAX_CPU_ISA=AVX2).  Prints the
# CPU's model, mhetrain's ISA level and oneDNN's, the medians of tokens/s, the ratios (auto against
# the faster of mhetrain fp32/bf16 and against PyTorch 2 at its faster precision; the AVX2 run
# against PyTorch 2 fp32 with its full ISA), mhetrain's MFU at each precision against the cores'
# nominal peak at that precision, beside the measured matmul ceilings (peak32/peak16), the peak
# RSS, and bf16's attention core (its GFLOP/s and share of the step, from the profiled step).
#
#   tests/bench/bench_vs_torch.sh [--runs R] [--steps S] [--threads N] [--sizes "tiny small tiny512"]
#                                 [--attention "mha mhe_add mhe_mul"] [--no-torch2] [--quick]
#
# Each run is a fresh process: one warm-up step, then S timed steps (median within the run);
# the table shows the median over R runs (default 5).  --quick shrinks every model and skips
# PyTorch 2 (the ctest smoke).  PyTorch 2 is installed on first use into its own venv,
# TORCH2_VENV (default build/torch2-venv), with pip from PyPI; never in CI.  Environment:
# MHETRAIN (default build/mhetrain), TORCH_PYTHON (/usr/bin/python3, Debian's torch 1.13).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=${MHE_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
. "$here/bench_lib.sh"
mhetrain=${MHETRAIN:-$src/build/mhetrain}
py=${TORCH_PYTHON:-/usr/bin/python3}
runs=5 steps=2 threads=2 sizes="tiny small tiny512" attns="mha mhe_add mhe_mul" quick=0 torch2=1
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --attention) attns=$2; shift 2 ;;
    --quick) quick=1; torch2=0; shift ;;
    --no-torch2) torch2=0; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench_vs_torch: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$mhetrain" ] || { echo "bench_vs_torch: no mhetrain at $mhetrain (set MHETRAIN)" >&2; exit 2; }
venv=${TORCH2_VENV:-$src/build/torch2-venv}
if [ "$torch2" = 1 ] && ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "bench_vs_torch: installing PyTorch 2 from PyPI into $venv (once)" >&2
    /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q torch numpy >&2 ||
        { echo "bench_vs_torch: cannot install PyTorch 2 (use --no-torch2)" >&2; exit 2; }
fi
# Debian's torch 1.13 multiplies through OpenBLAS 0.3.21, which does not know AMD Zen 4/5 and
# runs its AVX2 (Haswell) kernels there: on AVX-512 CPUs with OPENBLAS_CORETYPE unset we set
# SKYLAKEX so that column is not handicapped (mhetrain's matmuls are oneDNN's, unaffected).
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    OPENBLAS_CORETYPE=SKYLAKEX
    export OPENBLAS_CORETYPE
fi
export OMP_NUM_THREADS=$threads
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# key=value from a result line
field() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }

t2ver=-
[ "$torch2" = 1 ] && t2ver=$("$venv/bin/python" -c 'import torch; print(torch.__version__)')
echo "bench_vs_torch: runs=$runs steps/run=$steps threads=$threads torch2=$t2ver OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto} $(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg)"
# The CPU and the instruction sets both sides of mhetrain run (bench prints them).
"$mhetrain" bench "$src/configs/tiny-bert.yaml" model.layers=1 model.hidden=64 model.heads=4 model.vocab_size=512 \
    data.seq_len=16 model.max_seq=16 train.micro_batch=2 runtime.threads="$threads" runtime.precision=fp32 --steps 1 >"$tmp/o.txt"
echo "bench_vs_torch: cpu=\"$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)\" $(sed -n 's/^bench: \(cpu_isa=[^ ]*\).*/\1/p' "$tmp/o.txt") matmul=\"$(sed -n 's/^bench: matmul library: \([^(]*[^ (]\) (.*/\1/p' "$tmp/o.txt")\""
printf '%-7s %-7s %8s %8s %8s %8s %8s %7s %7s %7s %6s %6s %7s %7s %6s %6s %6s %6s %6s %7s %6s %8s %4s %7s %7s %8s %4s %7s\n' size attn mhe32 mhe16 t1_32 t2_32 t2_16 \
    16/t2_16 32/t2_32 32/t1 MFU32 MFU16 peak32 peak16 MiB32 MiB16 MiBt1 MiBt2 MiBt2b attnGF16 attn%16 \
    auto prec a/best a/t2 avx2 prec v/t2_32
for size in $sizes; do
    bench_size "$size" || { echo "bench_vs_torch: unknown size '$size' (tiny, small, tiny512)" >&2; exit 2; }
    if [ "$quick" = 1 ]; then L=1 D=64 n=4 T=$((T / 8)) B=2 V=512; fi
    F=$((4 * D))
    for attn in $attns; do
        cfg="$src/configs/tiny-bert-$(echo "$attn" | tr _ -).yaml"
        for f in m32 m16 ma mv t1 t232 t216; do : >"$tmp/$f"; done
        r=0
        while [ "$r" -lt "$runs" ]; do
            # fp32, bf16, auto, and auto as an AVX2-only CPU (ours and oneDNN's instructions).
            # --quick (the ctest smoke) runs auto and AVX2 on the tiny rows only, to stay short.
            precs="fp32 bf16 auto avx2"
            [ "$quick" = 1 ] && [ "$size" != tiny ] && precs="fp32 bf16"
            for prec in $precs; do
                case $prec in avx2) pre="env MHE_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2" p=auto ;; *) pre= p=$prec ;; esac
                $pre "$mhetrain" bench "$cfg" model.norm=post model.dropout=0.1 model.attn_dropout=0.1 objective.mask_prob=0.15 model.layers=$L model.hidden=$D model.heads=$n model.ffn=$F \
                    model.vocab_size=$V model.max_seq=$T data.seq_len=$T train.micro_batch=$B \
                    runtime.threads="$threads" runtime.precision=$p --steps "$steps" >"$tmp/o.txt" 2>"$tmp/e.txt" ||
                    { cat "$tmp/e.txt" >&2; exit 1; }
                case $prec in fp32) f=m32 ;; bf16) f=m16 ;; auto) f=ma ;; avx2) f=mv ;; esac
                grep '^bench-result:' "$tmp/o.txt" >>"$tmp/$f"
            done
            targs="--attention $attn --layers $L --hidden $D --heads $n --ffn $F --vocab $V --seq $T --batch $B --threads $threads --steps $steps"
            "$py" "$here/torch_bert.py" $targs >"$tmp/t.txt"
            grep '^torch-result:' "$tmp/t.txt" >>"$tmp/t1"
            if [ "$torch2" = 1 ]; then
                "$venv/bin/python" "$here/torch_bert.py" $targs --fast >"$tmp/t.txt"
                grep '^torch-result:' "$tmp/t.txt" >>"$tmp/t232"
                "$venv/bin/python" "$here/torch_bert.py" $targs --fast --bf16 >"$tmp/t.txt"
                grep '^torch-result:' "$tmp/t.txt" >>"$tmp/t216"
            fi
            r=$((r + 1))
        done
        col() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | median; }
        # Any run whose step outran the measured ceiling (mhetrain bench's mfu_outran=1).
        outran() { tr ' ' '\n' <"$1" | sed -n "s/^mfu_outran=//p" | sort -n | tail -n 1; }
        o32=$(outran "$tmp/m32") o16=$(outran "$tmp/m16")
        [ "${o32:-0}${o16:-0}" = 00 ] || any_outran=1
        m32=$(col "$tmp/m32" tokens_per_s) m16=$(col "$tmp/m16" tokens_per_s) t1=$(col "$tmp/t1" tokens_per_s)
        t232=$(col "$tmp/t232" tokens_per_s) t216=$(col "$tmp/t216" tokens_per_s)
        ma=$(col "$tmp/ma" tokens_per_s) mv=$(col "$tmp/mv" tokens_per_s)
        # The precision auto chose (the last run's; a cached choice is the same in every run).
        pa=$(field "$tmp/ma" precision) pv=$(field "$tmp/mv" precision)
        pa=${pa:--} pv=${pv:--}
        awk -v s="$size" -v a="$attn" -v m32="$m32" -v m16="$m16" -v t1="$t1" -v t232="$t232" -v t216="$t216" \
            -v u32="$(col "$tmp/m32" mfu)" -v u16="$(col "$tmp/m16" mfu)" -v o32="${o32:-0}" -v o16="${o16:-0}" \
            -v p32="$(col "$tmp/m32" peak_gflops)" -v p16="$(col "$tmp/m16" peak_gflops)" \
            -v r32="$(col "$tmp/m32" peak_rss_mib)" -v r16="$(col "$tmp/m16" peak_rss_mib)" \
            -v rt1="$(col "$tmp/t1" peak_rss_mib)" -v rt2="$(col "$tmp/t232" peak_rss_mib)" -v rt2b="$(col "$tmp/t216" peak_rss_mib)" \
            -v ag16="$(col "$tmp/m16" attn_gflops)" -v as16="$(col "$tmp/m16" attn_share)" \
            -v ma="$ma" -v mv="$mv" -v pa="$pa" -v pv="$pv" '
            function num(x) { return x == "nan" ? "-" : sprintf("%.0f", x) }
            function ratio(x, y) { return (x == "nan" || y == "nan" || y <= 0) ? "-" : sprintf("%.2fx", x / y) }
            function mfu(u, o) { return sprintf("%.1f%%%s", 100 * u, o == 1 ? "*" : "") }
            function max(x, y) { return x == "nan" ? y : y == "nan" ? x : x > y ? x : y }
            BEGIN { printf "%-7s %-7s %8s %8s %8s %8s %8s %7s %7s %7s %7s %7s %7.0f %7.0f %6s %6s %6s %6s %6s %7s %5.1f%% %8s %4s %7s %7s %8s %4s %7s\n",
                    s, a, num(m32), num(m16), num(t1), num(t232), num(t216), ratio(m16, t216), ratio(m32, t232),
                    ratio(m32, t1), mfu(u32, o32), mfu(u16, o16), p32, p16, num(r32), num(r16), num(rt1), num(rt2), num(rt2b),
                    num(ag16), 100 * as16, num(ma), pa, ratio(ma, max(m32, m16)), ratio(ma, max(t232, t216)),
                    num(mv), pv, ratio(mv, t232) }'
        echo "$size $attn $m32 $m16" >>"$tmp/table"
    done
done
[ "${any_outran:-0}" = 0 ] || echo "* the model's step outran the nominal peak in at least one run: that MFU is a bound (100% of the step's own rate), not a measurement"
# The attention types against mha on the same size (mhetrain's tokens/s, fp32 and bf16).
awk '$2 == "mha" { b32[$1] = $3; b16[$1] = $4 } { v32[NR] = $3; v16[NR] = $4; k[NR] = $1 " " $2; sz[NR] = $1 }
     END { for (i = 1; i <= NR; i++) if (b32[sz[i]] > 0 && b16[sz[i]] > 0 && k[i] !~ / mha$/)
               printf "speed vs mha: %s fp32 %.2fx bf16 %.2fx\n", k[i], v32[i] / b32[sz[i]], v16[i] / b16[sz[i]] }' "$tmp/table"
