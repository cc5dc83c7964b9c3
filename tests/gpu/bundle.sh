#!/usr/bin/env bash
# Packs what tests/gpu/check.sh needs on a bare GPU machine (driver, CUDA toolkit, PyTorch; none
# of our Debian packages) into one archive:
#   tests/gpu/bundle.sh [ARCHIVE]          default build-gpu/mhegpu.tar.xz
# A Release build for sm_80 and sm_90 (CUDA runtime linked statically), the GPU test programs,
# configs, a small prepared corpus (a book through the BERT vocabulary), check.sh and its helpers
# (compare.sh, sanitize.sh and the Python ones), and every shared library the programs load
# except the C library family, the driver, cuBLAS/cuBLASLt and NCCL (check.sh finds those in the
# CUDA toolkit or PyTorch's nvidia wheels).
# Open MPI's plugins and help files come too, so one rank runs without mpirun. At most 48 MiB (the
# device tool carries 64 MiB, the working tree ~4 MiB of it): xz, because the eight statically
# linked programs and oneDNN/OpenBLAS compress to half of gzip -9's size (26 MiB against 51 at
# 2026-12-04's build, in about the same 25 s on 2 cores).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${MHE_BUILD_DIR:-$here/build-gpu}"
archive="$(realpath -m "${1:-$build/mhegpu.tar.xz}")"
shared="${MHE_SHARED_DIR:-$here/../shared}"
export PATH="/usr/local/cuda/bin:$PATH"
fail() { echo "bundle.sh: $*" >&2; exit 1; }
command -v nvcc >/dev/null || fail "nvcc not found (the CUDA toolkit is expected in /usr/local/cuda)"
progs=(mhetrain gpu_parity gpu_act gpu_attention gpu_model gpu_nccl gpu_bench gpu_attn_bench)

# MHE_BUNDLE_NO_BUILD=1 (the ctest): package what MHE_BUILD_DIR already holds.
if [ "${MHE_BUNDLE_NO_BUILD:-0}" != 1 ]; then
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMHE_CUDA=ON >/dev/null
  cmake --build "$build" -j "$(nproc)" --target "${progs[@]}" >/dev/null
fi
for p in "${progs[@]}"; do [ -x "$build/$p" ] || fail "$build/$p is missing (build with -DMHE_CUDA=ON)"; done

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
B="$stage/mhegpu"
mkdir -p "$B/bin" "$B/lib" "$B/tests" "$B/corpus"
for p in "${progs[@]}"; do cp "$build/$p" "$B/bin/"; strip --strip-unneeded "$B/bin/$p"; done
cp -r "$here/configs" "$B/"
cp "$here/tests/gpu/check.sh" "$here/tests/gpu/torch_gpu.py" "$here/tests/gpu/report.py" \
  "$here/tests/gpu/sanitize.sh" "$here/tests/gpu/compare.sh" "$B/tests/"

# Open MPI's plugins and help files in its own layout under a relocatable prefix (OPAL_PREFIX).
ompi_lib=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_lib=/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
mkdir -p "$B/openmpi/lib/x86_64-linux-gnu/openmpi/lib" "$B/openmpi/share" "$B/pmix"
cp -r "$ompi_lib" "$B/openmpi/lib/x86_64-linux-gnu/openmpi/lib/"
cp -r /usr/share/openmpi "$B/openmpi/share/"
[ -d "$pmix_lib" ] && cp -r "$pmix_lib"/. "$B/pmix/"
[ -d /usr/share/pmix ] && cp -r /usr/share/pmix "$B/openmpi/share/"

# Every shared library the programs and plugins load, minus what the GPU machine has its own of.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libresolv\.so|libutil\.so|libcuda\.so|libcublas|libcublasLt|libnccl|libnvidia)'
objs=("$B"/bin/* "$B"/openmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$B"/pmix/*.so)
for o in "${objs[@]}"; do
  [ -e "$o" ] || continue
  ldd "$o" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  [[ "$name" =~ $skip ]] && continue
  [ -e "$B/lib/$name" ] || cp -L "$path" "$B/lib/$name"
done
# Plugins whose own libraries stayed behind would only make noise: drop those that do not resolve.
for so in "$B"/openmpi/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$B"/pmix/*.so; do
  [ -e "$so" ] || continue
  if LD_LIBRARY_PATH="$B/lib" ldd "$so" 2>/dev/null | grep -q 'not found'; then rm -f "$so"; fi
done
strip --strip-unneeded "$B"/lib/*.so* 2>/dev/null || true

# A small corpus for `mhetrain train` there: one book through the BERT vocabulary.
cp "$shared/data/tokenizers/bert-base-uncased-vocab.txt" "$B/corpus/vocab.txt"
"$build/mhetrain" prepare --tokenizer "$B/corpus/vocab.txt" --out "$B/corpus/shards" --valid-fraction 0.1 \
  "$shared/data/books/twain-tom-sawyer.txt" >/dev/null
# The compare group's corpus: every book and the Wikipedia sample (1.17M training tokens, 13x the
# one book, +1.3 MiB in the archive), so 40 s of BERT-small on a GPU repeats it a few times, not
# hundreds; the book alone stays the learning check's corpus, comparable with earlier runs.
mkdir -p "$B/corpus/compare"
cp "$B/corpus/vocab.txt" "$B/corpus/compare/vocab.txt"
"$build/mhetrain" prepare --tokenizer "$B/corpus/vocab.txt" --out "$B/corpus/compare/shards" --valid-fraction 0.05 \
  "$shared/data/books/"*.txt "$shared/data/wikipedia/enwiki-pages-articles-shortened.xml.bz2" >/dev/null

mkdir -p "$(dirname "$archive")"
command -v xz >/dev/null || fail "xz not found (Debian's xz-utils)"
tar -C "$stage" -cf - mhegpu | xz -6 -T0 > "$archive"
size=$(stat -c %s "$archive")
[ "$size" -le $((48 * 1024 * 1024)) ] || fail "$archive is $((size / 1048576)) MiB, over the 48 MiB limit"
echo "bundle.sh: $archive ($((size / 1048576)) MiB)"
