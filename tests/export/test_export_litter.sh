#!/usr/bin/env bash
# No litter, no silent refusal (issue 50):
# - an export killed outright (kill -9; here SIGXFSZ, as abrupt and deterministic) leaves its ".NAME.partial-PID" staging folder; the next
#   export into the same --out removes it, saying so, and names (but keeps) one whose process
#   still runs;
# - an --out that is a symbolic link is refused with the link as the reason (exit 2), and
#   nothing is written through it.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../common/lib.sh"
: "${MHETRAIN:?}" "${MHE_MAKE_CHECKPOINT:?}"
mhe_workdir export-litter
"$MHE_MAKE_CHECKPOINT" bert mha "$WORK/run" 1 random >/dev/null
# An export killed mid-way without any cleanup, deterministically: a 16 KiB file-size limit kills
# it with SIGXFSZ (default action: terminate, like kill -9 no atexit runs) while it writes
# model.safetensors into its staging folder.
set +e; (ulimit -f 16; exec "$MHETRAIN" export "$WORK/run" --out "$WORK/hf" >/dev/null 2>&1) & pid=$!; wait "$pid"; status=$?; set -e
[ "$status" = $((128 + $(kill -l XFSZ))) ] || fail "the export was not killed by SIGXFSZ (exit $status)"
[ -d "$WORK/.hf.partial-$pid" ] && [ ! -e "$WORK/hf" ] || { ls -la "$WORK"; fail "no staging folder left by the killed export"; }
dead=$pid
# A staging folder whose process still runs (a stand-in: a sleeping process with a known PID).
sleep 60 & live=$!
mkdir "$WORK/.hf.partial-$live"
"$MHETRAIN" export "$WORK/run" --out "$WORK/hf" >/dev/null 2>"$WORK/next.log" || { cat "$WORK/next.log"; kill "$live"; fail "export"; }
kill "$live"; wait "$live" 2>/dev/null || true
grep -q "export: removed $WORK/.hf.partial-$dead, left by process $dead, which ended without finishing (killed?)" \
  "$WORK/next.log" || { cat "$WORK/next.log"; fail "the stale staging folder was not named"; }
[ ! -e "$WORK/.hf.partial-$dead" ] || fail "the stale staging folder is still there"
grep -q "note: $WORK/.hf.partial-$live is the staging folder of process $live, which is still running" "$WORK/next.log" ||
  { cat "$WORK/next.log"; fail "the live staging folder was not named"; }
[ -d "$WORK/.hf.partial-$live" ] || fail "the live process's staging folder was removed"
test -s "$WORK/hf/config.json" || fail "no export"
# --out a symbolic link to an empty folder: refused naming the link.
mkdir "$WORK/real"
ln -s "$WORK/real" "$WORK/link"
set +e; "$MHETRAIN" export "$WORK/run" --out "$WORK/link" >/dev/null 2>"$WORK/link.log"; status=$?; set -e
[ "$status" = 2 ] || { cat "$WORK/link.log"; fail "--out a symlink: exit $status, expected 2"; }
grep -q "export: --out $WORK/link is a symbolic link (to $WORK/real)" "$WORK/link.log" || { cat "$WORK/link.log"; fail "no symlink reason"; }
[ -z "$(ls -A "$WORK/real")" ] && [ -L "$WORK/link" ] || fail "something was written through the link"
echo PASS
