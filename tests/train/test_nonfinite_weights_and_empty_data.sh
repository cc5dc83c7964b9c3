#!/usr/bin/env bash
# NaN weights and data with nothing to learn never look like success:
#  - eval of a checkpoint with a NaN weight prints valid JSON (null + "nonfinite": true), exit 1;
#  - training from NaN weights stops after train.max_nonfinite skipped steps in a row, exit 1,
#    without writing a checkpoint of the NaN model;
#  - a corpus of only [PAD] ids refuses at the first step (exit 2) naming the data.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0)
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/good" train.steps=2 2>"$WORK/good.log" ||
  { cat "$WORK/good.log"; fail "setup run"; }
ck="$WORK/good/checkpoints/step_00000002"
# Poison one weight (first float of the first tensor) and re-record the checksums, so the
# checkpoint is valid but holds a NaN.
$PY "$MHE_SOURCE_DIR/tests/train/poison_checkpoint.py" "$ck"
set +e; "$MHETRAIN" eval "$ck" >"$WORK/eval.json" 2>"$WORK/eval.log"; status=$?; set -e
[ "$status" = 1 ] || { cat "$WORK/eval.log" "$WORK/eval.json"; fail "eval of NaN weights: exit $status, expected 1"; }
$PY - "$WORK/eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))   # must parse: no bare nan
assert r["valid_loss"] is None and r["nonfinite"] is True, r
PY
set +e
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/nan" train.steps=30 train.max_nonfinite=4 train.init_from="$ck" \
  2>"$WORK/nan.log"
status=$?
set -e
[ "$status" = 1 ] || { cat "$WORK/nan.log"; fail "training from NaN weights: exit $status, expected 1"; }
grep -q "steps 1-4: 4 non-finite steps in a row (train.max_nonfinite: 4); stopping" "$WORK/nan.log" ||
  { cat "$WORK/nan.log"; fail "no max_nonfinite message"; }
[ ! -e "$WORK/nan/checkpoints/latest" ] || fail "a checkpoint of the NaN model was written"
# Only padding: the train shard's tokens all set to id 0 ([PAD]); the index stays consistent.
mkdir -p "$WORK/pad"
cp "$CORPUS/shards/train_00000.idx" "$WORK/pad/train_00000.idx"
head -c "$(stat -c %s "$CORPUS/shards/train_00000.bin")" /dev/zero >"$WORK/pad/train_00000.bin"
set +e
"$MHETRAIN" train "${args[@]}" data.train="[$WORK/pad/train]" train.out_dir="$WORK/padrun" train.steps=3 2>"$WORK/pad.log"
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/pad.log"; fail "padding-only corpus: exit $status, expected 2"; }
grep -q "step 1: the global batch holds no trainable token (only padding?) in data.train $WORK/pad/train" "$WORK/pad.log" ||
  { cat "$WORK/pad.log"; fail "no message for the padding-only corpus"; }
echo PASS
