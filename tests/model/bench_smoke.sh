#!/bin/sh
# mhetrain bench on a shrunken tiny config: prints every figure it promises, for the three
# attention types the benchmark note covers; bad arguments exit 2 with a message.
set -eu
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for cfg in tiny-bert-mha tiny-bert-mhe-add tiny-gpt-mhe-mul; do
    "$MHETRAIN" bench "$MHE_SOURCE_DIR/configs/$cfg.yaml" model.layers=1 train.micro_batch=2 \
        data.seq_len=16 model.vocab_size=512 --steps 2 >"$out"
    for want in "tokens/s:" "matmul" "attention" "norm/activation" "loss " "other" \
                "achieved:" "MFU:" "peak RSS"; do
        grep -q -- "$want" "$out" || { echo "bench $cfg: no '$want' in:"; cat "$out"; exit 1; }
    done
    # The loss on random tokens is near ln(V) = ln(512) = 6.24 at initialisation.
    awk '/^loss/ { if ($4 < 5.5 || $4 > 7.0) { print "loss " $4 " not near ln 512"; exit 1 } }' "$out"
done
if "$MHETRAIN" bench "$MHE_SOURCE_DIR/configs/tiny-bert-mha.yaml" --steps 0 2>"$out"; then
    echo "bench --steps 0 succeeded"; exit 1
else
    rc=$?; [ "$rc" -eq 2 ] || { echo "bench --steps 0: exit $rc, want 2"; exit 1; }
fi
grep -q "bench: --steps expects an integer in \[1, 1000000\], got \"0\"" "$out" || { cat "$out"; exit 1; }
# The CPU backend's ISA level is printed; an unknown MHE_CPU_ISA is one line on stderr, exit 1.
"$MHETRAIN" bench "$MHE_SOURCE_DIR/configs/tiny-bert-mha.yaml" model.layers=1 train.micro_batch=2 \
    data.seq_len=16 model.vocab_size=512 --steps 1 >"$out"
grep -Eq "^bench: cpu_isa=(avx512|avx2|baseline) " "$out" || { echo "no cpu_isa line in:"; cat "$out"; exit 1; }
if MHE_CPU_ISA=sse9 "$MHETRAIN" bench "$MHE_SOURCE_DIR/configs/tiny-bert-mha.yaml" --steps 1 >/dev/null 2>"$out"; then
    echo "MHE_CPU_ISA=sse9 succeeded"; exit 1
fi
[ "$(wc -l <"$out")" -eq 1 ] && grep -q "MHE_CPU_ISA=sse9: expected avx512, avx2 or baseline" "$out" ||
    { echo "MHE_CPU_ISA=sse9:"; cat "$out"; exit 1; }
echo "bench smoke: ok"
