#!/usr/bin/env bash
# Settings checked against each other and the machine before any work:
#  - model.vocab_size above the tokenizer's vocabulary: a warning naming both sizes;
#  - data.valid equal to data.train: a warning naming the entry;
#  - a model the machine cannot hold (10000 layers of width 1024) refuses at once (exit 2) with
#    the memory it needs and has, instead of failing minutes into the allocation.
source "$(dirname "$0")/lib.sh"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.steps=1)
"$MHETRAIN" train "${args[@]}" model.vocab_size=2048 train.out_dir="$WORK/v" 2>"$WORK/v.log" ||
  { cat "$WORK/v.log"; fail "vocab run"; }
grep -q "warning: model.vocab_size 2048 is larger than the 2000 tokens of .*tokenizer.json: 48 embedding rows" \
  "$WORK/v.log" || { cat "$WORK/v.log"; fail "no vocab_size warning"; }
"$MHETRAIN" train "${args[@]}" data.valid="[$CORPUS/shards/train]" train.out_dir="$WORK/o" 2>"$WORK/o.log" ||
  { cat "$WORK/o.log"; fail "overlap run"; }
grep -q "warning: data.valid $CORPUS/shards/train is also in data.train" "$WORK/o.log" ||
  { cat "$WORK/o.log"; fail "no overlap warning"; }
grep -q "warning" "$WORK/v.log" && ! grep -q "also in data.train" "$WORK/v.log" || fail "spurious overlap warning"
start=$(date +%s)
set +e
"$MHETRAIN" train "${args[@]}" model.layers=10000 model.hidden=1024 model.ffn=4096 train.out_dir="$WORK/big" 2>"$WORK/big.log"
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/big.log"; fail "oversized model: exit $status, expected 2"; }
grep -q "model: [0-9]* parameters need [0-9.]* GiB for weights.* but this machine has" \
  "$WORK/big.log" || { cat "$WORK/big.log"; fail "no memory message"; }
[ $(( $(date +%s) - start )) -lt 30 ] || fail "the refusal took over 30 s"
echo PASS
