#!/usr/bin/env bash
# Two ranks (mpirun MPMD: each its own arguments) that disagree must both stop before the first
# collective, exit 2, and rank 0 must name every differing key with both values, once.  One run
# per kind of disagreement: the model's shape (was: SIGSEGV inside Open MPI, exit 139), what the
# ranks train on (was: exit 0, "replicas identical"), the optimisation (was: "weights of rank 1
# differ" a few steps in), and the same data.train path holding another corpus on one node.
# Rank-local keys (runtime.threads) may differ: that run trains.
source "$(dirname "$0")/lib.sh"
base=("$TINY" "${DATA[@]}" train.steps=2 train.eval_every=0 train.checkpoint_every=0)
disagree() {  # disagree NAME "RANK1 OVERRIDES" EXPECTED-REGEX
  local name=$1 extra=$2 want=$3 status
  set +e
  # shellcheck disable=SC2086
  timeout 120 "${MPIRUN[@]}" -np 1 "$MHETRAIN" train "${base[@]}" train.out_dir="$WORK/$name" : \
    -np 1 "$MHETRAIN" train "${base[@]}" train.out_dir="$WORK/$name" $extra >"$WORK/$name.log" 2>&1
  status=$?
  set -e
  [ "$status" = 2 ] || { cat "$WORK/$name.log"; fail "$name: exit $status, expected 2"; }
  grep -Eq "$want" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: message does not match $want"; }
  [ "$(grep -c 'the ranks disagree' "$WORK/$name.log")" = 1 ] || { cat "$WORK/$name.log"; fail "$name: not one line"; }
  ! grep -q "step " "$WORK/$name.log" || fail "$name: a step ran"
  echo "ok $name: $(grep 'the ranks disagree' "$WORK/$name.log" | cut -c1-200)"
}
# The model's shape.
disagree hidden "model.hidden=32" "config and model.*rank 1: model.hidden 64 -> 32.*ranks.model_tensors"
disagree layers "model.layers=3" "rank 1: model.layers 2 -> 3"
# What is trained on.
disagree corpus "data.train=[$CORPUS/shards/valid]" "rank 1: data.train \[\"?$CORPUS/shards/train\"?\] -> \[\"?$CORPUS/shards/valid\"?\]"
disagree seq_len "data.seq_len=32" "rank 1: data.seq_len 64 -> 32"
disagree attention "attention.type=mhe_add" "rank 1: attention.type mhe_mul -> mhe_add"
# The optimisation, and how long.
disagree steps "train.steps=3" "rank 1: .*train.steps 2 -> 3"
disagree lr "optim.lr=1e-3" "rank 1: optim.lr 0.002 -> 0.001"
disagree mask_prob "objective.mask_prob=0.2" "rank 1: objective.mask_prob 0.15 -> 0.2"
# Same config text, another corpus behind the same relative path on rank 1 (a stale copy): the
# data's digest (shard index, sampled token windows) differs.
mkdir -p "$WORK/a" "$WORK/b"
ln -s "$CORPUS/shards" "$WORK/a/shards"
mkdir "$WORK/b/shards"
# Rank 1's node holds another corpus under the same name (here: the validation split).
cp "$CORPUS/shards/valid_00000.bin" "$WORK/b/shards/train_00000.bin"
cp "$CORPUS/shards/valid_00000.idx" "$WORK/b/shards/train_00000.idx"
rel=("$TINY" data.train="[shards/train]" data.valid="[]" data.tokenizer="$CORPUS/tokenizer/tokenizer.json"
     train.steps=2 train.eval_every=0 train.checkpoint_every=0 train.out_dir="$WORK/stale")
set +e
timeout 120 "${MPIRUN[@]}" -np 1 -wdir "$WORK/a" "$MHETRAIN" train "${rel[@]}" : \
  -np 1 -wdir "$WORK/b" "$MHETRAIN" train "${rel[@]}" >"$WORK/stale.log" 2>&1
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/stale.log"; fail "stale corpus: exit $status, expected 2"; }
grep -Eq "disagree on their data.*rank 1: ranks.train_data [0-9]+ tokens, [0-9]+ samples, digest [0-9a-f]+ -> " \
  "$WORK/stale.log" || { cat "$WORK/stale.log"; fail "stale corpus: no data message"; }
echo "ok stale corpus"
# The same relative tokenizer path holding another file on rank 1 (here the same vocabulary
# re-saved with other bytes): its digest differs, and the special ids it defines could.
mkdir -p "$WORK/ta/tok" "$WORK/tb/tok"
cp "$CORPUS/tokenizer/tokenizer.json" "$WORK/ta/tok/"
$PY -c "import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], 'w'), indent=1)" \
  "$CORPUS/tokenizer/tokenizer.json" "$WORK/tb/tok/tokenizer.json"
tk=("$TINY" "${DATA[@]}" data.tokenizer=tok/tokenizer.json train.steps=2 train.eval_every=0 train.checkpoint_every=0
    train.out_dir="$WORK/tok")
set +e
timeout 120 "${MPIRUN[@]}" -np 1 -wdir "$WORK/ta" "$MHETRAIN" train "${tk[@]}" : \
  -np 1 -wdir "$WORK/tb" "$MHETRAIN" train "${tk[@]}" >"$WORK/tok.log" 2>&1
status=$?
set -e
[ "$status" = 2 ] && grep -Eq "disagree on their data.*rank 1: ranks.tokenizer_file [0-9]+ bytes, digest [0-9a-f]+ -> " \
  "$WORK/tok.log" || { cat "$WORK/tok.log"; fail "another tokenizer file on rank 1: exit $status"; }
echo "ok stale tokenizer"
# Rank-local: another thread count on rank 1 trains to the end.
"${MPIRUN[@]}" -np 1 "$MHETRAIN" train "${base[@]}" train.out_dir="$WORK/threads" : \
  -np 1 "$MHETRAIN" train "${base[@]}" train.out_dir="$WORK/threads" runtime.threads=2 >"$WORK/threads.log" 2>&1 ||
  { cat "$WORK/threads.log"; fail "runtime.threads differing stopped the run"; }
test -d "$WORK/threads/checkpoints/step_00000002" || fail "threads run: no final checkpoint"
echo PASS
