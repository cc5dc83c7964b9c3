#!/usr/bin/env bash
# Randomly mutated configs never crash the loader (see fuzz_configs.py).
set -eu
# Rejected inputs exit on the spot by design, holding memory: no leak reports for them
# (test_shipped_configs.sh checks the successful path with leak detection on).
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
exec /usr/bin/python3 "$MHE_SOURCE_DIR/tests/config/fuzz_configs.py"
