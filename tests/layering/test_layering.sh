#!/usr/bin/env bash
# Proves that the build enforces the one-way dependencies between folder libraries.
# Usage: test_layering.sh BUILD_DIR LIB|FORBIDDEN_HEADER...
# For each library: the probe including a forbidden header must fail to compile, and fail
# because that header is not found; the probe including allowed headers must compile.
set -u
build=$1; shift
fails=0
for pair in "$@"; do
  lib=${pair%%|*}; header=${pair#*|}
  if ! out=$(cmake --build "$build" --target "layering_${lib}_allowed" 2>&1); then
    echo "FAIL: $lib cannot compile the headers it may include:"; echo "$out" | tail -5
    fails=$((fails + 1)); continue
  fi
  if out=$(cmake --build "$build" --target "layering_${lib}_forbidden" 2>&1); then
    echo "FAIL: $lib compiled #include \"$header\", which it may not see"
    fails=$((fails + 1)); continue
  fi
  if ! grep -q "$header: No such file or directory" <<<"$out"; then
    echo "FAIL: $lib's forbidden probe failed, but not because $header is hidden:"
    echo "$out" | tail -5
    fails=$((fails + 1)); continue
  fi
  echo "ok: $lib sees its allowed headers and not $header"
done
[ "$fails" -eq 0 ] || { echo "$fails layering check(s) failed"; exit 1; }
