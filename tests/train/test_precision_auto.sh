#!/usr/bin/env bash
# runtime.precision: auto end to end (issue 49): the first run measures both precisions on the
# model's products (alternating, twice) and caches the rates, unless the machine is busy; the
# choice is printed in one line and saved in the
# checkpoint's resolved config; a resume keeps the checkpoint's choice and says so when the
# machine (here: a cache edited so the other precision wins) would choose otherwise; a fresh run
# takes the cached rates; a corrupt cache is named, measured again and rewritten; an explicit
# precision prints no choice; bf16 under an emulating oneDNN (ONEDNN_MAX_CPU_ISA=AVX2) gives the
# measured rate against fp32.
source "$(dirname "$0")/lib.sh"
DATA+=(runtime.precision=auto)  # tiny.yaml pins fp32
export MHE_CACHE_DIR="$WORK/cache"
export MHE_LOADAVG=0  # a quiet machine, whatever the real load (the busy case is tested below)
CACHE="$MHE_CACHE_DIR/precision.tsv"
other() { [ "$1" = fp32 ] && echo bf16 || echo fp32; }
saved() { sed -n 's/^  precision: //p' "$1/config.yaml"; }
# Rewrites every cached line so that $1 is the faster precision.
make_faster() {
  if [ "$1" = bf16 ]; then awk -F'\t' -v OFS='\t' '/^#/ { print; next } { $2 = 100; $3 = 200; print }' "$CACHE" >"$CACHE.new"
  else awk -F'\t' -v OFS='\t' '/^#/ { print; next } { $2 = 200; $3 = 100; print }' "$CACHE" >"$CACHE.new"; fi
  mv "$CACHE.new" "$CACHE"
}

"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/a" --stop-after 4 2>"$WORK/a1.log" ||
  { cat "$WORK/a1.log"; fail "first run"; }
line=$(grep '^precision: auto chose' "$WORK/a1.log") || { cat "$WORK/a1.log"; fail "no choice line"; }
echo "$line"
first=$(echo "$line" | sed -n 's/^precision: auto chose \(fp32\|bf16\): .*/\1/p')
[ -n "$first" ] || fail "the choice line names no precision: $line"
echo "$line" | grep -Eq "bf16 matmuls [0-9]+ GFLOP/s against fp32's [0-9]+ on the model's products .*\[measured in [0-9.]+ s, cached in $CACHE\]" ||
  fail "the line does not give the rates and the cache: $line"
[ "$(grep -vc '^#' "$CACHE")" = 1 ] || { cat "$CACHE"; fail "one cached line expected"; }
[ "$(saved "$WORK/a/checkpoints/step_00000004")" = "$first" ] || fail "the checkpoint's config does not name $first"

# The machine would now choose the other precision: the resume keeps the checkpoint's.
second=$(other "$first")
make_faster "$second"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/a" 2>"$WORK/a2.log" || { cat "$WORK/a2.log"; fail "resume"; }
grep -q "resumed from .*step_00000004" "$WORK/a2.log" || { cat "$WORK/a2.log"; fail "did not resume"; }
grep -q "^precision: auto keeps $first, the choice of the checkpoint .*step_00000004; this machine would choose $second now" \
  "$WORK/a2.log" || { cat "$WORK/a2.log"; fail "the resume does not say it keeps $first"; }
grep -q "changed settings.*runtime.precision" "$WORK/a2.log" && fail "the resume changed runtime.precision"
[ "$(saved "$WORK/a/checkpoints/step_00000008")" = "$first" ] || fail "the resumed run's checkpoint does not keep $first"

# A fresh run takes the cached rates (no measurement) and chooses the faster.
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/b" --stop-after 1 2>"$WORK/b.log" || { cat "$WORK/b.log"; fail "fresh run"; }
grep -q "^precision: auto chose $second: bf16 matmuls .* \[cached in $CACHE\]" "$WORK/b.log" ||
  { cat "$WORK/b.log"; fail "the fresh run did not choose $second from the cache"; }
[ "$(saved "$WORK/b/checkpoints/step_00000001")" = "$second" ] || fail "the fresh run's checkpoint does not name $second"

# On a busy machine the rates serve the run but are not remembered.
MHE_LOADAVG=1000 "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/busy" model.ffn=96 --stop-after 1 \
  2>"$WORK/busy.log" || { cat "$WORK/busy.log"; fail "busy run"; }
grep -Eq "^precision: auto chose .*\[measured in [0-9.]+ s on a busy machine \(load 1000.0 on [0-9]+ CPUs\): not cached\]" \
  "$WORK/busy.log" || { cat "$WORK/busy.log"; fail "a busy measurement was not marked"; }
grep -q "F 96 " "$CACHE" && fail "a busy measurement was cached"

# A corrupt cache: named with its line, measured again, rewritten whole.
printf 'garbage without tabs\n' >>"$CACHE"
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/c" --stop-after 1 2>"$WORK/c.log" || { cat "$WORK/c.log"; fail "corrupt cache run"; }
grep -q "$CACHE:3: expected KEY<tab>fp32 GFLOP/s<tab>bf16 GFLOP/s<tab>0|1; measuring again and rewriting the cache" "$WORK/c.log" ||
  { cat "$WORK/c.log"; fail "the corrupt line is not named"; }
grep -q "^precision: auto chose .*\[measured in" "$WORK/c.log" || { cat "$WORK/c.log"; fail "not measured again"; }
grep -q garbage "$CACHE" && fail "the corrupt line stayed"
[ "$(grep -vc '^#' "$CACHE")" = 1 ] || { cat "$CACHE"; fail "one cached line expected after the rewrite"; }

# Explicit choices stay explicit.
"$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/d" runtime.precision=fp32 --stop-after 1 2>"$WORK/d.log" ||
  { cat "$WORK/d.log"; fail "fp32 run"; }
grep -q "^precision:" "$WORK/d.log" && { cat "$WORK/d.log"; fail "an explicit fp32 printed a choice"; }
[ "$(saved "$WORK/d/checkpoints/step_00000001")" = fp32 ] || fail "explicit fp32 not saved"
# bf16 where oneDNN has no bf16 instructions: the notice and the measured rate against fp32.
ONEDNN_MAX_CPU_ISA=AVX2 "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/e" runtime.precision=bf16 --stop-after 1 \
  2>"$WORK/e.log" || { cat "$WORK/e.log"; fail "emulated bf16 run"; }
grep -q "^note: this CPU has no native bf16 instructions" "$WORK/e.log" || { cat "$WORK/e.log"; fail "no emulation notice"; }
grep -Eq "^note: runtime.precision: bf16 is emulated here: its matmuls ran at [0-9.]+x fp32's rate on this model's products" \
  "$WORK/e.log" || { cat "$WORK/e.log"; fail "no measured slowdown"; }
# auto under the same oneDNN: its own cache line (the key holds the library's ISA), emulation named.
ONEDNN_MAX_CPU_ISA=AVX2 "$MHETRAIN" train "$TINY" "${DATA[@]}" train.out_dir="$WORK/f" --stop-after 1 2>"$WORK/f.log" ||
  { cat "$WORK/f.log"; fail "auto under AVX2"; }
grep -q "^precision: auto chose .*bf16 emulated on this CPU" "$WORK/f.log" || { cat "$WORK/f.log"; fail "emulation not named"; }
grep -q "oneDNN [0-9.]* avx2 |" "$CACHE" || { cat "$CACHE"; fail "no avx2 line in the cache"; }
echo PASS
