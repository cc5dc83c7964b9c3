#!/usr/bin/env bash
# The test command: installs what is missing, builds into build/, runs ctest.
#   tests/run.sh [ctest args...]     e.g. tests/run.sh -R config
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
launch/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cuda=OFF
command -v nvcc >/dev/null 2>&1 && cuda=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DMHE_CUDA="${MHE_CUDA:-$cuda}" >/dev/null
cmake --build build -j "$(nproc)"
cd build
ctest --output-on-failure --timeout 900 -j "${MHE_TEST_JOBS:-2}" "$@"
