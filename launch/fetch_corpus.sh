#!/usr/bin/env bash
# Fetches the default corpus through the package registries into DIR (default corpus/raw):
#   - the shortened English Wikipedia dump shipped inside the gensim wheel (PyPI),
#   - four Project Gutenberg books shipped as test data in Debian packages.
# Files already present are kept, so a second run costs nothing.
set -euo pipefail
dest="${1:-corpus/raw}"
mkdir -p "$dest/wikipedia" "$dest/books"
dest="$(cd "$dest" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

wiki="$dest/wikipedia/enwiki-pages-articles-shortened.xml.bz2"
if [ ! -s "$wiki" ]; then
  echo "fetch: gensim wheel from PyPI (for its shortened Wikipedia dump)" >&2
  py=python3; [ -x "$(dirname "$0")/../.venv/bin/python" ] && py="$(dirname "$0")/../.venv/bin/python"
  "$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 gensim -d "$work" >&2
  whl=$(ls "$work"/gensim-*.whl | head -1)
  member="gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
  "$py" - "$whl" "$member" "$wiki" <<'PY'
import sys, zipfile, shutil
whl, member, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z, z.open(member) as src, open(out + ".tmp", "wb") as dst:
    shutil.copyfileobj(src, dst)
import os; os.replace(out + ".tmp", out)
PY
fi

# The Debian packages that carry the books, and the book files inside them.
PACKAGES=(golang-github-colinmarc-hdfs-dev golang-github-pierrec-lz4-dev golang-github-andybalholm-brotli-dev)
BOOK_FILES=(mobydick.txt pg1661.txt Mark.Twain-Tom.Sawyer.txt Isaac.Newton-Opticks.txt)
if [ -z "$(ls "$dest/books" 2>/dev/null)" ]; then
  echo "fetch: books from Debian packages" >&2
  (cd "$work" && apt-get download "${PACKAGES[@]}" >/dev/null 2>&1) || {
    apt-get update -qq >/dev/null 2>&1 || true
    (cd "$work" && apt-get download "${PACKAGES[@]}" >&2)
  }
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
  for name in "${BOOK_FILES[@]}"; do
    f=$(find "$work/x" -type f -name "$name" | head -1)
    [ -n "$f" ] || { echo "fetch: $name not found in ${PACKAGES[*]}" >&2; exit 1; }
    cp "$f" "$dest/books/$name"
  done
fi
ls "$dest/books" | grep -q . || { echo "fetch: no books found in the Debian packages" >&2; exit 1; }
echo "$dest"
