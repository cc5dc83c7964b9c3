#!/usr/bin/env python3
"""Every folder README's file table against the folder's files.

For each README.md under the given roots: its file tables (markdown tables whose first header
cell is "file") name files in the first column, in backticks: `a.c`, `a.c`, `b.h` (several),
`a.{h,c}` (a brace list), `a.h/.cu` (a second extension), `tok*` (a glob, at least one match),
`sub/` or `sub/x.py` (a subfolder); only a cell's first word counts (`check.sh ARGS`).  Every file and subfolder of the folder (hidden names, README.md and
Python caches aside) must be named by a row, and every name a row gives must exist: a file
added, removed or renamed fails until the table says so.

Every source file of those folders (.c .h .cu .cpp .py .sh .cmake) also opens with a comment saying
what it is (after a shebang): the header comment a reader meets first.  A .c, .cu or .cpp file
with a same-named header is described by the header's comment.

usage: check_file_tables.py SOURCE_DIR ROOT...    exit 0 all agree, 1 a table disagrees
"""
import fnmatch
import os
import re
import sys

IGNORED = {"README.md", "__pycache__"}


def folder_entries(folder):
    out = set()
    for name in os.listdir(folder):
        if name.startswith(".") or name in IGNORED or name.endswith(".pyc"):
            continue
        out.add(name + "/" if os.path.isdir(os.path.join(folder, name)) else name)
    return out


def expand(token):
    """One backticked name of a row -> the names (or glob patterns) it stands for."""
    m = re.fullmatch(r"(.*)\{([^{}]*)\}(.*)", token)
    if m:
        return [m.group(1) + part.strip() + m.group(3) for part in m.group(2).split(",")]
    m = re.fullmatch(r"([^/]+)(\.[A-Za-z0-9]+)/(\.[A-Za-z0-9]+)", token)
    if m:
        return [m.group(1) + m.group(2), m.group(1) + m.group(3)]
    return [token]


def table_names(readme):
    """(line number, name) for every name in the first column of the README's file tables."""
    names, in_table = [], False
    for lineno, line in enumerate(open(readme, encoding="utf-8"), 1):
        s = line.strip()
        if not s.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in s.strip("|").split("|")]
        if not in_table:
            if cells and cells[0].lower() in ("file", "files"):
                in_table = True
            continue
        if set(cells[0]) <= set("-: "):
            continue  # the header's rule
        for token in re.findall(r"`([^`]+)`", cells[0]):
            token = token.strip().split(" ")[0]  # `check.sh ARCHIVE OUTDIR`: the file
            if "/" in token.rstrip("/") and not re.fullmatch(r"[^/]+\.\w+/\.\w+", token):
                token = token.split("/")[0] + "/"  # `sub/x.py`: a row for the subfolder
            names += [(lineno, n) for n in expand(token)]
    return names


SOURCES = (".c", ".h", ".cu", ".cpp", ".py", ".sh", ".cmake")
COMMENTS = ("//", "/*", "#", '"""', "'''")


def opens_with_comment(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 1 if lines and lines[0].startswith("#!") else 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    first = lines[i].strip() if i < len(lines) else ""
    if first.startswith("#include") or first.startswith("#if") or first.startswith("#define"):
        return False  # C preprocessor, not a comment
    return first.startswith(COMMENTS)


def header_comment_errors(folder):
    errors = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        stem, ext = os.path.splitext(name)
        if ext not in SOURCES or not os.path.isfile(path) or opens_with_comment(path):
            continue
        header = os.path.join(folder, stem + ".h")
        if ext in (".c", ".cu", ".cpp") and os.path.isfile(header) and opens_with_comment(header):
            continue
        errors.append(f"{path}: no header comment (the first lines say what the file is)")
    return errors


def check(readme):
    folder = os.path.dirname(readme)
    entries = folder_entries(folder)
    names = table_names(readme)
    errors = []
    if not names:
        return [f"{readme}: no file table (a markdown table whose first column is headed 'file')"]
    covered = set()
    for lineno, name in names:
        if any(c in name for c in "*?["):
            hits = {e for e in entries if fnmatch.fnmatch(e.rstrip("/"), name.rstrip("/"))}
            if not hits:
                errors.append(f"{readme}:{lineno}: `{name}` matches no file of {folder}/")
            covered |= hits
        elif name in entries or name.rstrip("/") + "/" in entries:
            covered.add(name if name in entries else name.rstrip("/") + "/")
        else:
            errors.append(f"{readme}:{lineno}: `{name}` is not a file of {folder}/ (removed or renamed?)")
    for e in sorted(entries - covered):
        errors.append(f"{readme}: {folder}/{e} has no row in the file table")
    return errors + header_comment_errors(folder)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    src = sys.argv[1]
    readmes = []
    for root in sys.argv[2:]:
        for dirpath, dirnames, filenames in os.walk(os.path.join(src, root)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in IGNORED)
            if "README.md" in filenames:
                readmes.append(os.path.join(dirpath, "README.md"))
    errors = [e for r in readmes for e in check(r)]
    for e in errors:
        print(os.path.relpath(e, src) if e.startswith(src) else e)
    print(f"{len(readmes)} READMEs, {len(errors)} disagreements")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
