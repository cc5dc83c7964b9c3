#!/usr/bin/env bash
# Installs what mhetrain needs to build and test, and nothing that is already there.
# Safe to run again; never prompts (CI has no terminal).
#   launch/setup.sh            install what is missing (apt packages, then .venv)
#   launch/setup.sh --run      only what building and running mhetrain needs (the quickstart):
#                              no test oracles (python3-torch, transformers, ...), a .venv with pyarrow
#   MHE_SKIP_VENV=1 launch/setup.sh   the packages only
set -euo pipefail
run_only=0
case "${1:-}" in
  "") ;;
  --run) run_only=1 ;;
  -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
  *) echo "setup: takes no argument or --run, got '$1' (see --help)" >&2; exit 2 ;;
esac
[[ "${MHE_SKIP_VENV:-0}" =~ ^[01]?$ ]] || { echo "setup: MHE_SKIP_VENV=$MHE_SKIP_VENV: expected 0 or 1" >&2; exit 2; }
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# Build and run-time libraries (Debian package names); python3-numpy is pyarrow's numpy, zstd
# fetch_corpus.sh's.  The tests add PyTorch (the oracles' torch), gnuplot (compare's plots),
# iproute2 (network namespaces), time and xz-utils (the GPU bundle's archive): on a fresh machine they are about half of the
# packages' download (launch/setup.sh --run leaves them out).
PACKAGES=(build-essential cmake pkg-config
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev liblapack-dev libopenmpi-dev openmpi-bin
  libyaml-dev libcjson-dev libexpat1-dev libbz2-dev libutf8proc-dev libcmocka-dev
  python3-numpy python3-venv zstd)
[ "$run_only" = 1 ] || PACKAGES+=(python3-torch gnuplot-nox iproute2 time xz-utils)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# Python oracles (Hugging Face tokenizers/transformers, safetensors, tensorboard) live in a venv
# that also sees Debian's torch; so does pyarrow, which `mhetrain prepare` runs to read parquet
# and Arrow files (it finds this .venv beside the build folder; MHE_PYTHON overrides).
if [ "${MHE_SKIP_VENV:-0}" != 1 ]; then
  venv="$here/.venv"
  if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  stamp="$venv/.requirements.sha"
  want=$(sha256sum "$here/tests/requirements.txt" | cut -d' ' -f1)
  if [ "$run_only" = 1 ]; then
    # pyarrow alone, at the oracles' pins (one list of versions: tests/requirements.txt)
    if ! "$venv/bin/python" -c "import pyarrow" 2>/dev/null; then
      mapfile -t pins < <(grep -E '^(pyarrow|numpy)==' "$here/tests/requirements.txt")
      "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" >&2
    fi
  elif [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/tests/requirements.txt" >&2
    echo "$want" > "$stamp"
  fi
fi

# The cuDNN frontend's header-only C++ graph API, for the CUDA backend's cuDNN attention core
# (kernels/cuda/cuda_attn_cudnn.cpp).  Only its headers are used: the wheel is fetched without
# its Python dependencies and its include/ unpacked into .deps/cudnn-frontend.  Pinned: the
# graph API moves between releases.  Skipped without the CUDA toolkit (nothing would use it).
CUDNN_FRONTEND_VERSION=1.32.0
fe="$here/.deps/cudnn-frontend"
if [ "${MHE_SKIP_CUDNN_FRONTEND:-0}" != 1 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ "$(cat "$fe/VERSION" 2>/dev/null)" != "$CUDNN_FRONTEND_VERSION" ]; then
  tmp="$(mktemp -d)"
  # The venv's pip: a fresh Debian has python3 but not python3-pip (seen by the quickstart in a
  # debootstrap'd bookworm, which then built no cuDNN core).
  pip_py=python3; [ -x "$here/.venv/bin/python" ] && pip_py="$here/.venv/bin/python"
  if "$pip_py" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
       -d "$tmp" "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION" >&2; then
    rm -rf "$fe"
    mkdir -p "$fe"
    python3 - "$tmp" "$fe" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("include/")])
PY
    echo "$CUDNN_FRONTEND_VERSION" > "$fe/VERSION"
  else
    echo "setup: could not fetch nvidia-cudnn-frontend $CUDNN_FRONTEND_VERSION; the cuDNN attention core will not be built" >&2
  fi
  rm -rf "$tmp"
fi
