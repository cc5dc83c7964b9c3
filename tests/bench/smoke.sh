#!/bin/sh
# bench_vs_torch.sh on shrunken models, one run each (--quick: no PyTorch 2): the CPU line, and
# every size x attention row prints positive tokens/s for mhetrain fp32 and bf16 and for PyTorch
# 1.13, the ratio, an MFU and a ceiling per precision and the peak RSS, and on the tiny rows auto's
# tokens/s and choice and the AVX2 run's; the mhe rows print their speed against mha.  Timings are not asserted (a loaded machine makes them meaningless here).
set -eu
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
sh "$MHE_SOURCE_DIR/tests/bench/bench_vs_torch.sh" --quick --runs 1 --steps 1 >"$out"
cat "$out"
for size in tiny small tiny512; do
    for attn in mha mhe_add mhe_mul; do
        awk -v s="$size" -v a="$attn" '
            $1 == s && $2 == a { found = 1
                if (!($3 > 0 && $4 > 0 && $5 > 0)) { print "no tokens/s in: " $0; exit 1 }
                if ($10 !~ /^[0-9.]+x$/ || $10 + 0 <= 0) { print "no ratio in: " $0; exit 1 }
                if ($11 !~ /%$/ || $12 !~ /%$/ || !($13 > 0 && $14 > 0)) { print "no MFU/ceiling in: " $0; exit 1 }
                if (!($15 > 0 && $16 > 0 && $17 > 0)) { print "no RSS in: " $0; exit 1 }
                # auto and the AVX2 run: on the tiny rows (--quick runs them there only).
                if (s == "tiny" && !($22 > 0 && $23 ~ /^(fp32|bf16)$/ && $24 ~ /^[0-9.]+x$/)) { print "no auto column in: " $0; exit 1 }
                if (s == "tiny" && !($26 > 0 && $27 ~ /^(fp32|bf16)$/)) { print "no avx2 column in: " $0; exit 1 }
                if (s != "tiny" && ($22 != "-" || $23 != "-")) { print "auto ran on a --quick row other than tiny: " $0; exit 1 } }
            END { if (!found) { print "no row for " s " " a; exit 1 } }' "$out"
    done
done
grep -Eq '^bench_vs_torch: cpu=".+" cpu_isa=[a-z0-9]+ matmul="oneDNN [0-9.]+ [a-z0-9_]+' "$out" || { echo "no CPU line"; exit 1; }
[ "$(grep -c '^speed vs mha: ' "$out")" -eq 6 ] || { echo "want 6 'speed vs mha' lines"; exit 1; }
if sh "$MHE_SOURCE_DIR/tests/bench/bench_vs_torch.sh" --sizes huge --quick >"$out" 2>&1; then
    echo "unknown size accepted"; exit 1
fi
echo "bench_vs_torch smoke: ok"
