#!/usr/bin/env bash
# Every reader of a kind of file refuses a bad one with the same positioned line, whichever
# command reads it (issue 17: `tokenizer encode` took invalid UTF-8 that `prepare` refuses):
#   text with invalid UTF-8     prepare, tokenizer encode, tokenizer train
#   a bad tokenizer vocab.txt   tokenizer encode, prepare --tokenizer, train, eval, export --tokenizer
#   a shard with a bad index    train (data.train), eval (data.valid)
# Each command must exit 2 with exactly one stderr line, identical across the commands.
source "$MHE_SOURCE_DIR/tests/train/lib.sh"
same() {  # NAME EXPECTED-PATTERN -- CMD... -- CMD... : every CMD fails with the same one line
  local name=$1 pattern=$2 first="" n=0 status line
  shift 3
  while [ $# -gt 0 ]; do
    local cmd=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do cmd+=("$1"); shift; done
    [ $# -gt 0 ] && shift
    n=$((n + 1))
    set +e; "$MHETRAIN" "${cmd[@]}" >/dev/null 2>"$WORK/err"; status=$?; set -e
    [ "$status" = 2 ] || { cat "$WORK/err"; fail "$name: mhetrain ${cmd[*]}: exit $status, expected 2"; }
    [ "$(grep -vc '^mhetrain: warning: ' "$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "$name: ${cmd[0]}: not one line"; }
    line=$(grep -v '^mhetrain: warning: ' "$WORK/err")
    grep -q -- "$pattern" <<<"$line" || fail "$name: ${cmd[0]}: '$line' does not match /$pattern/"
    [ -z "$first" ] && first=$line
    [ "$line" = "$first" ] || fail "$name: ${cmd[0]} says '$line' but the first command said '$first'"
    echo "ok $name: mhetrain ${cmd[0]} ${cmd[1]:-}: $line"
  done
}
TOK="$CORPUS/tokenizer/tokenizer.json"
printf 'hello world\nbad \xff byte\n' >"$WORK/bad.txt"
same invalid_utf8_text "^$WORK/bad.txt: byte 16: invalid UTF-8 (byte 0xff)$" -- \
  prepare --tokenizer "$TOK" --out "$WORK/p1" "$WORK/bad.txt" -- \
  tokenizer encode "$TOK" "$WORK/bad.txt" -- \
  tokenizer train --type wordpiece --vocab-size 100 --out "$WORK/t1" "$WORK/bad.txt"
# A good run to evaluate and export.
run_args=("$TINY" "${DATA[@]}" train.out_dir="$WORK/run" train.steps=1 train.eval_every=0 train.checkpoint_every=1)
"$MHETRAIN" train "${run_args[@]}" 2>"$WORK/run.log" || { cat "$WORK/run.log"; fail "good run"; }
{ printf '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n'; printf 'ok\nwor\xffld\n'; } >"$WORK/vocab.txt"
printf 'some text\n' >"$WORK/good.txt"
same bad_vocab "^$WORK/vocab.txt:7:4: invalid UTF-8 (byte 0xff)$" -- \
  tokenizer encode "$WORK/vocab.txt" "$WORK/good.txt" -- \
  prepare --tokenizer "$WORK/vocab.txt" --out "$WORK/p2" "$WORK/good.txt" -- \
  train "${run_args[@]}" train.out_dir="$WORK/run2" data.tokenizer="$WORK/vocab.txt" -- \
  eval "$WORK/run" data.tokenizer="$WORK/vocab.txt" -- \
  export "$WORK/run" --out "$WORK/exp" --tokenizer "$WORK/vocab.txt"
cp "$CORPUS/shards/valid_00000.bin" "$WORK/bad_00000.bin"
{ printf 'MMIDIDX\0\0\2\0\0\0\0\0\0\0'; tail -c +18 "$CORPUS/shards/valid_00000.idx"; } >"$WORK/bad_00000.idx"
same bad_shard "^$WORK/bad_00000.idx: byte 9: unsupported version 2 (expected 1)$" -- \
  train "${run_args[@]}" train.out_dir="$WORK/run3" data.train="[$WORK/bad_00000]" -- \
  eval "$WORK/run" data.valid="[$WORK/bad_00000]"
echo PASS
