#!/usr/bin/env bash
# The main job: set up, build, fetch the default corpus, train the quickstart model, export.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
launch/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
echo "quickstart: built build/mhetrain; training is not wired up yet" >&2
