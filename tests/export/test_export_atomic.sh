#!/usr/bin/env bash
# Exports are written whole (issue 32).  A previous export in a small tmpfs (made here, in a private
# mount namespace) is hit by a second, --force export of another model that runs out of space
# half-way through model.safetensors: the command must exit 1 naming the file and the reason
# (strerror: "No space left on device"), leave no staging folder, and leave the previous export
# byte for byte as it was and loadable by transformers with the logits it gave before.  On an
# ordinary disk: a non-empty --out is refused without --force (exit 2, untouched); --force
# replaces it whole (config.json and weights of the new model together); an --out that holds the
# checkpoint (the run folder) is refused even with --force; a tokenizer of the other kind than
# the checkpoint's data.tokenizer_kind (WordPiece for a GPT) is refused, writing nothing.
# Where no mount namespace can be made, RLIMIT_FSIZE stands in for the full disk (EFBIG).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
: "${MHETRAIN:?}" "${MHE_MAKE_CHECKPOINT:?}" "${MHE_SOURCE_DIR:?}"
PY="$MHE_SOURCE_DIR/.venv/bin/python"
if [ -z "${MHE_IN_NS:-}" ]; then
  if unshare -m --propagation private true 2>/dev/null; then
    exec env MHE_IN_NS=mount unshare -m --propagation private bash "$0" "$@"
  elif unshare -rm --propagation private true 2>/dev/null; then
    exec env MHE_IN_NS=mount unshare -rm --propagation private bash "$0" "$@"
  fi
  MHE_IN_NS=none
fi
mhe_workdir export-atomic
"$MHE_MAKE_CHECKPOINT" bert mha "$WORK/run1" 1 random >/dev/null
"$MHE_MAKE_CHECKPOINT" bert mha "$WORK/run2" 2 random >/dev/null

logits() {  # logits EXPORT_DIR OUT.npy: BertForMaskedLM's logits on fixed ids (fails if it does not load)
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$PY" - "$1" "$2" <<'PY'
import sys, numpy as np, torch, transformers as tf
m = tf.BertForMaskedLM.from_pretrained(sys.argv[1]).eval()
tok = tf.AutoTokenizer.from_pretrained(sys.argv[1])
ids = torch.tensor([tok("the quick brown fox jumps over the lazy dog")["input_ids"]])
with torch.no_grad():
    np.save(sys.argv[2], m(input_ids=ids).logits.numpy())
PY
}
same_npy() { "$PY" -c "import sys, numpy as np; a, b = np.load(sys.argv[1]), np.load(sys.argv[2]); sys.exit(0 if a.shape == b.shape and (a == b).all() else 1)" "$1" "$2"; }
digest() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }

# --- ordinary disk: refusal without --force, whole replacement with it, the run folder kept.
"$MHETRAIN" export "$WORK/run1" --out "$WORK/plain" >/dev/null
logits "$WORK/plain" "$WORK/l1.npy"
before=$(digest "$WORK/plain")
set +e
"$MHETRAIN" export "$WORK/run2" --out "$WORK/plain" 2>"$WORK/refused.log" >/dev/null
status=$?
set -e
[ "$status" = 2 ] || { cat "$WORK/refused.log"; fail "export into a non-empty folder: exit $status, expected 2"; }
grep -q "export: --out $WORK/plain exists and is not empty: pass --force" "$WORK/refused.log" ||
  { cat "$WORK/refused.log"; fail "no --force message"; }
[ "$(digest "$WORK/plain")" = "$before" ] || fail "the refused export changed the folder"
touch "$WORK/plain/stale-file"
"$MHETRAIN" export "$WORK/run2" --out "$WORK/plain" --force >/dev/null
[ ! -e "$WORK/plain/stale-file" ] || fail "--force mixed the old folder's files into the new export"
logits "$WORK/plain" "$WORK/l2.npy"
! same_npy "$WORK/l1.npy" "$WORK/l2.npy" || fail "--force export still gives the first model's logits"
set +e
"$MHETRAIN" export "$WORK/run1" --out "$WORK/run1" --force 2>"$WORK/self.log" >/dev/null
status=$?
set -e
[ "$status" = 2 ] && grep -q "is or holds the checkpoint" "$WORK/self.log" ||
  { cat "$WORK/self.log"; fail "export over its own run folder: exit $status"; }
test -f "$WORK/run1/checkpoints/latest" || fail "the run folder was touched"
"$MHE_MAKE_CHECKPOINT" gpt mha "$WORK/gpt" 1 random >/dev/null
set +e
"$MHETRAIN" export "$WORK/gpt" --out "$WORK/gpt-hf" --tokenizer "$MHE_SOURCE_DIR/../shared/data/tokenizers/bert-base-uncased-vocab.txt" \
  2>"$WORK/kind.log" >/dev/null
status=$?
set -e
[ "$status" = 2 ] && grep -q "bert-base-uncased-vocab.txt is WordPiece but .*config.yaml says data.tokenizer_kind bpe (a gpt model)" \
  "$WORK/kind.log" && [ ! -e "$WORK/gpt-hf" ] || { cat "$WORK/kind.log"; fail "WordPiece tokenizer for a GPT: exit $status"; }
echo "ok ordinary disk"

# --- a full disk in the middle of the second export.
size_kb=$(du -sk "$WORK/plain" | cut -f1)
mkdir -p "$WORK/disk"
if [ "$MHE_IN_NS" = mount ]; then
  mount -t tmpfs -o size=$(( size_kb * 3 / 2 ))k tmpfs "$WORK/disk"
  trap 'umount "$WORK/disk" 2>/dev/null; rm -rf "$WORK"' EXIT
  limit() { "$@"; }
  reason="No space left on device"
else
  limit() { (trap '' XFSZ; ulimit -f $(( size_kb / 2 )); "$@"); }
  reason="File too large"
fi
"$MHETRAIN" export "$WORK/run1" --out "$WORK/disk/hf" >/dev/null
logits "$WORK/disk/hf" "$WORK/before.npy"
same_npy "$WORK/before.npy" "$WORK/l1.npy" || fail "the export in the small disk differs from the first one"
before=$(digest "$WORK/disk/hf")
set +e
limit "$MHETRAIN" export "$WORK/run2" --out "$WORK/disk/hf" --force 2>"$WORK/full.log" >/dev/null
status=$?
set -e
cat "$WORK/full.log"
[ "$status" = 1 ] || fail "export onto a full disk: exit $status, expected 1"
grep -q "cannot write $WORK/disk/.hf.partial-[0-9]*/model.safetensors: $reason" "$WORK/full.log" ||
  fail "the message does not name the file and the reason"
[ -z "$(ls -A "$WORK/disk" | grep -v '^hf$')" ] || { ls -la "$WORK/disk"; fail "a staging folder was left behind"; }
[ "$(digest "$WORK/disk/hf")" = "$before" ] || fail "the previous export was changed"
logits "$WORK/disk/hf" "$WORK/after.npy"
same_npy "$WORK/before.npy" "$WORK/after.npy" || fail "the previous export no longer gives its logits"
echo "ok full disk ($MHE_IN_NS)"
echo PASS
