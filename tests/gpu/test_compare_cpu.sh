#!/usr/bin/env bash
# check.sh's compare group proven without a GPU: compare.sh itself, on the CPU, with the built
# mhetrain, configs/bert-small.yaml shrunk to a tiny model, and a corpus made as bundle.sh makes
# the bundle's (one book of ../shared/data through the BERT vocabulary), 3 s per type.  Asserts:
#   - mha, mhe_mul and sha each trained > 0 steps for at least the 3 s, at tokens/s > 0;
#   - each validation loss (mhetrain eval) is finite, below the untrained model's (step 0's
#     evaluation) and below ln(vocabulary);
#   - the side-by-side table has a row per type, and report.py turns the lines into
#     report.json's compare-result fields;
#   - an unknown type, a missing corpus, a bad device or seconds value: one line, exit 2, no training.
set -euo pipefail
: "${MHE_SOURCE_DIR:?}" "${MHETRAIN:?}"
source "$MHE_SOURCE_DIR/tests/common/lib.sh"
mhe_workdir gpu-compare
data="$MHE_SOURCE_DIR/../shared/data"
compare="$MHE_SOURCE_DIR/tests/gpu/compare.sh"
cfg="$MHE_SOURCE_DIR/configs/bert-small.yaml"

# The bundle's corpus, as bundle.sh makes it.
mkdir -p "$WORK/corpus"
cp "$data/tokenizers/bert-base-uncased-vocab.txt" "$WORK/corpus/vocab.txt"
"$MHETRAIN" prepare --tokenizer "$WORK/corpus/vocab.txt" --out "$WORK/corpus/shards" --valid-fraction 0.1 \
  "$data/books/twain-tom-sawyer.txt" >/dev/null || fail "mhetrain prepare"

# Bad input first: each is one line and exit 2, before anything trains.
bad() {  # bad WHAT EXPECTED_TEXT ENV... -- ARGS...
  local what="$1" want="$2"; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  set +e
  env "${envs[@]}" bash "$compare" "$@" >"$WORK/bad.out" 2>"$WORK/bad.err"
  local rc=$?
  set -e
  [ $rc -eq 2 ] || { cat "$WORK/bad.out" "$WORK/bad.err"; fail "$what: exit status $rc, expected 2"; }
  [ "$(wc -l <"$WORK/bad.err")" -eq 1 ] && grep -q "$want" "$WORK/bad.err" ||
    { cat "$WORK/bad.err"; fail "$what: not one line saying '$want'"; }
  [ ! -s "$WORK/bad.out" ] || { cat "$WORK/bad.out"; fail "$what: something ran"; }
}
bad "unknown type" "unknown attention type 'mha_typo'" MHE_COMPARE_VARIANTS="mha mha_typo" -- \
  "$MHETRAIN" "$cfg" "$WORK/corpus" "$WORK/bad-out"
bad "missing corpus" "no train_\* and valid_\* shards" X=1 -- "$MHETRAIN" "$cfg" "$WORK/nowhere" "$WORK/bad-out"
bad "bad device" "neither cuda nor cpu" MHE_COMPARE_DEVICE=tpu -- "$MHETRAIN" "$cfg" "$WORK/corpus" "$WORK/bad-out"
bad "bad seconds" "not a positive number" MHE_COMPARE_SECONDS=0 -- "$MHETRAIN" "$cfg" "$WORK/corpus" "$WORK/bad-out"
bad "missing config" "no such config" X=1 -- "$MHETRAIN" "$WORK/none.yaml" "$WORK/corpus" "$WORK/bad-out"
bad "not an override" "not a key=value override" X=1 -- "$MHETRAIN" "$cfg" "$WORK/corpus" "$WORK/bad-out" extra

# The comparison: a 1-layer D=64 model (the 30,522-token vocabulary stays), 3 s of training per
# type, an evaluation at step 0 only (the untrained model's loss).  No warm-up: on a loaded
# machine 3 s may hold only a few steps (~20 ms each when idle), and each must move the loss.
tiny=(model.layers=1 model.hidden=64 model.heads=4 model.ffn=128 data.seq_len=64 train.global_batch=8
      train.micro_batch=8 optim.warmup_steps=0 optim.lr=3e-3 runtime.threads=2 train.log_every=1000
      train.eval_every=100000000)
MHE_COMPARE_DEVICE=cpu MHE_COMPARE_SECONDS=3 bash "$compare" "$MHETRAIN" "$cfg" "$WORK/corpus" "$WORK/out" "${tiny[@]}" \
  >"$WORK/compare.txt" 2>"$WORK/compare.err" || { cat "$WORK/compare.txt" "$WORK/compare.err"; fail "compare.sh"; }
cat "$WORK/compare.txt"
ln_vocab=$(awk 'BEGIN{print log(30522)}')
for v in mha mhe_mul sha; do
  line="$(grep "^compare-result: attention=$v " "$WORK/compare.txt")" || fail "no compare-result line for $v"
  get() { sed -nE "s/.* $1=([^ ]+).*/\1/p" <<<"$line"; }
  steps=$(get steps) train_s=$(get train_s) tps=$(get tokens_per_s) loss=$(get valid_loss) untrained=$(get untrained_loss)
  [[ "$steps" =~ ^[0-9]+$ ]] && [ "$steps" -gt 0 ] || fail "$v: steps '$steps'"
  awk -v s="$train_s" -v t="$tps" 'BEGIN{exit !(s >= 3 && s < 20 && t > 0)}' || fail "$v: train_s '$train_s', tokens/s '$tps'"
  [[ "$loss" =~ ^[0-9.eE+-]+$ ]] || fail "$v: valid loss '$loss' is not a finite number"
  [[ "$untrained" =~ ^[0-9.eE+-]+$ ]] || fail "$v: no untrained loss ('$untrained')"
  awk -v l="$loss" -v u="$untrained" -v c="$ln_vocab" 'BEGIN{exit !(l < u && l < c)}' ||
    fail "$v: valid loss $loss not below the untrained model's $untrained and ln(vocab) $ln_vocab"
  grep -qE "^\| $v \| [0-9]+ \| $steps \| " "$WORK/compare.txt" || fail "no table row for $v"
done
grep -qF "| attention | parameters | steps | train s | tokens/s | valid loss | masked acc | best valid loss |" \
  "$WORK/compare.txt" || fail "no table header"

# report.py picks the lines up as check.sh's log holds them (under the step's header).
{ echo "== compare_bert-small (limit 240s)"; cat "$WORK/compare.txt"; } >"$WORK/check.log"
printf 'compare_bert-small\tpassed\t12.0\trc=0\n' >"$WORK/steps.tsv"
/usr/bin/python3 "$MHE_SOURCE_DIR/tests/gpu/report.py" "$WORK/steps.tsv" "$WORK/check.log" "$WORK/report.json" \
  cpu none 12 || fail "report.py"
/usr/bin/python3 - "$WORK/report.json" <<'EOF' || fail "report.json's compare-result"
import json, math, sys
rows = json.load(open(sys.argv[1]))["results"]["compare-result"]
assert [r["attention"] for r in rows] == ["mha", "mhe_mul", "sha"], rows
for r in rows:
    assert r["step"] == "compare_bert-small" and r["steps"] > 0 and math.isfinite(r["valid_loss"]), r
    assert isinstance(r["tokens_per_s"], float) and r["tokens_per_s"] > 0, r
EOF
echo PASS
