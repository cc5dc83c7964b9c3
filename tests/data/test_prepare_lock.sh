#!/usr/bin/env bash
# One prepare per --out folder (issue 32): while another process holds the folder's lock (here a
# shell holding flock on it, as a running prepare does, with the holder line prepare writes), a
# second prepare exits 2 at once naming the holder and removes nothing; once the holder is gone
# (its flock dies with it, the file stays) prepare runs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
: "${MHETRAIN:?}" "${MHE_SOURCE_DIR:?}"
mhe_workdir prepare-lock
data="$MHE_SOURCE_DIR/../shared/data"
args=(--tokenizer "$data/tokenizers/bert-base-uncased-vocab.txt" --out "$WORK/shards" "$data/books/twain-tom-sawyer.txt")
mkdir -p "$WORK/shards"
echo "keep" >"$WORK/shards/train_00000.bin"  # an unfinished run's file: prepare would remove it
exec 9>"$WORK/shards/.prepare.lock"
echo "pid 424242 on otherhost" >&9
flock -x 9
set +e
"$MHETRAIN" prepare "${args[@]}" 2>"$WORK/second.log" >/dev/null
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/second.log"; fail "second prepare: exit $status, expected 2"; }
grep -q "prepare: --out $WORK/shards is being written by another mhetrain prepare (pid 424242 on otherhost)" \
  "$WORK/second.log" || { cat "$WORK/second.log"; fail "the refusal does not name the other run"; }
[ "$(cat "$WORK/shards/train_00000.bin")" = keep ] || fail "the refused prepare removed the other run's file"
exec 9>&-
"$MHETRAIN" prepare "${args[@]}" 2>"$WORK/after.log" >/dev/null || { cat "$WORK/after.log"; fail "prepare after release"; }
test -s "$WORK/shards/manifest.json" || fail "no manifest after the lock was released"
echo PASS
