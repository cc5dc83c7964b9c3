#!/usr/bin/env bash
# Settings checked against each other and against the data before any step (exit 2, one line
# naming the file):
#  - data.tokenizer_kind against the tokenizer file: bpe with a WordPiece vocab.txt, wordpiece
#    with a GPT-2 vocab.json;
#  - model.vocab_size below the tokenizer's vocabulary;
#  - model.vocab_size against the largest id in the shards (a 1,000-token vocabulary over shards
#    whose ids reach 1,999): the .bin, the byte and the id;
#  - the shards' manifest.json: read strictly; another tokenizer file than the one the shards
#    were made with is a warning.
source "$(dirname "$0")/lib.sh"
TOKS="$MHE_SOURCE_DIR/../shared/data/tokenizers"
args=("$TINY" "${DATA[@]}" train.eval_every=0 train.checkpoint_every=0 train.steps=1 optim.warmup_steps=1)
refuses() {  # NAME PATTERN OVERRIDES...: exit 2, one stderr line matching PATTERN, no step
  local name=$1 pattern=$2 status
  shift 2
  set +e
  "$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.log"
  status=$?
  set -e
  [ "$status" = 2 ] || { cat "$WORK/$name.log"; fail "$name: exit $status, expected 2"; }
  # Warnings (another tokenizer file than the shards' manifest names) may precede the error.
  [ "$(grep -vc '^mhetrain: warning: ' "$WORK/$name.log")" = 1 ] || { cat "$WORK/$name.log"; fail "$name: not one line"; }
  grep -v '^mhetrain: warning: ' "$WORK/$name.log" | grep -q -- "$pattern" || { cat "$WORK/$name.log"; fail "$name: expected /$pattern/"; }
  if grep -q "^step " "$WORK/$name.out" "$WORK/$name.log"; then fail "$name: trained"; fi
}
refuses bpe_on_vocab_txt \
  "$TOKS/bert-base-uncased-vocab.txt: a WordPiece tokenizer, but data.tokenizer_kind is bpe (set data.tokenizer_kind: wordpiece" \
  data.tokenizer="$TOKS/bert-base-uncased-vocab.txt" data.tokenizer_kind=bpe model.vocab_size=30522
refuses wordpiece_on_bpe \
  "$TOKS/gpt2-vocab.json: a byte-level BPE tokenizer, but data.tokenizer_kind is wordpiece (set data.tokenizer_kind: bpe" \
  data.tokenizer="$TOKS/gpt2-vocab.json" model.vocab_size=50257
refuses vocab_below_tokenizer \
  "tokenizer.json: the tokenizer has 2000 tokens but model.vocab_size is 1500: ids 1500..1999 would have no embedding row" \
  model.vocab_size=1500
# The first 1,000 lines of bert-base-uncased hold [PAD] [UNK] [CLS] [SEP] [MASK]; the shards
# were written with the fixture's 2,000-token vocabulary.
head -n 1000 "$TOKS/bert-base-uncased-vocab.txt" >"$WORK/vocab.txt"
refuses shard_ids_above_vocab \
  "shards/train_00000.bin: byte [0-9]*: token id 1[0-9][0-9][0-9] of sequence [0-9]* is outside the vocabulary: ids must be in \[0, 1000) (model.vocab_size)" \
  data.tokenizer="$WORK/vocab.txt" model.vocab_size=1000
# The manifest prepare wrote beside the shards is read strictly (a cut one refuses, naming it
# with the position), and shards tokenized with another tokenizer file than data.tokenizer get
# a warning naming both (here the same vocabulary as vocab.txt: the run goes on).
mkdir "$WORK/shards"
cp "$CORPUS"/shards/* "$WORK/shards/"
head -c 200 "$CORPUS/shards/manifest.json" >"$WORK/shards/manifest.json"
refuses cut_manifest "^$WORK/shards/manifest.json:[0-9]*:[0-9]*: invalid JSON" data.train="[$WORK/shards/train]"
cp "$CORPUS/shards/manifest.json" "$WORK/shards/manifest.json"
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/m" data.train="[$WORK/shards/train]" \
  data.tokenizer="$CORPUS/tokenizer/vocab.txt" 2>"$WORK/m.log" || { cat "$WORK/m.log"; fail "other tokenizer file run"; }
grep -q "^mhetrain: warning: $WORK/shards/manifest.json: these shards were tokenized with .*tokenizer.json (sha256 [0-9a-f]*…), not with data.tokenizer $CORPUS/tokenizer/vocab.txt" \
  "$WORK/m.log" || { cat "$WORK/m.log"; fail "no other-tokenizer warning"; }
# eval warns the same way (was: a loss without a word).
"$MHETRAIN" eval "$WORK/m" data.valid="[$WORK/shards/valid]" data.tokenizer="$CORPUS/tokenizer/vocab.txt" \
  2>"$WORK/e.log" >"$WORK/e.json" || { cat "$WORK/e.log"; fail "eval with another tokenizer file"; }
grep -q "^mhetrain: warning: $WORK/shards/manifest.json: these shards were tokenized with .*tokenizer.json (sha256 [0-9a-f]*…), not with data.tokenizer $CORPUS/tokenizer/vocab.txt" \
  "$WORK/e.log" || { cat "$WORK/e.log"; fail "eval: no other-tokenizer warning"; }
"$MHETRAIN" eval "$WORK/m" data.valid="[$WORK/shards/valid]" data.tokenizer="$CORPUS/tokenizer/tokenizer.json" \
  2>"$WORK/e2.log" >/dev/null || { cat "$WORK/e2.log"; fail "eval with the shards' tokenizer"; }
if grep -q "warning" "$WORK/e2.log"; then cat "$WORK/e2.log"; fail "eval: a warning for the shards' own tokenizer"; fi
# The consistent settings train (the checks above are not refusing everything).
"$MHETRAIN" train "${args[@]}" train.out_dir="$WORK/ok" 2>"$WORK/ok.log" || { cat "$WORK/ok.log"; fail "consistent run"; }
if grep -q "warning" "$WORK/ok.log"; then cat "$WORK/ok.log"; fail "a warning for consistent settings"; fi
echo PASS
