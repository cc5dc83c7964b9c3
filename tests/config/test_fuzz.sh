#!/usr/bin/env bash
# Randomly mutated configs never crash the loader (see fuzz_configs.py).
set -eu
exec /usr/bin/python3 "$MHE_SOURCE_DIR/tests/config/fuzz_configs.py"
