#!/usr/bin/env bash
# ctest fixture: a small real corpus for the training tests -- a 2,000-token WordPiece
# vocabulary trained on the shared Wikipedia sample and one book, and shards of both.
set -euo pipefail
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}" "${MHE_BINARY_DIR:?}"
data="$MHE_SOURCE_DIR/../shared/data"
out="$MHE_BINARY_DIR/test-corpus"
rm -rf "$out"
mkdir -p "$out"
inputs=("$data/wikipedia/enwiki-pages-articles-shortened.xml.bz2" "$data/books/twain-tom-sawyer.txt")
"$MHETRAIN" prepare --text-out "$out/text.txt" "${inputs[@]}" >/dev/null
"$MHETRAIN" tokenizer train --type wordpiece --vocab-size 2000 --lowercase --out "$out/tokenizer" "$out/text.txt" >/dev/null
"$MHETRAIN" prepare --tokenizer "$out/tokenizer/tokenizer.json" --out "$out/shards" --valid-fraction 0.05 \
  --seed 7 "${inputs[@]}" >/dev/null
test -s "$out/shards/train_00000.idx" && test -s "$out/shards/valid_00000.idx"
echo "test corpus ready in $out"
