#!/usr/bin/env python3
"""DESIGN.md §3's layout against the build's library dependencies.

The layout block of §3 names folders (indentation nests them: `config/` under `trainer/` is
trainer/config) and, for each folder that is a library of the root CMakeLists.txt
(`mhe_folder_library(NAME FOLDERS first... DEPS ...)`, the library's first folder), the folders
it depends on: `(-> a, b)` by their last name, or `(depends on nothing)`.  These must be exactly
the library's direct DEPS; every library must be in the block; every folder the block names must
exist.  A library added, a dependency changed or a folder renamed fails until §3 says so.

usage: check_layout.py SOURCE_DIR    exit 0 agree, 1 disagree
"""
import os
import re
import sys


def libraries(cmake_text):
    """name -> (first folder, [dep names]) from mhe_folder_library calls."""
    out = {}
    for m in re.finditer(r"^mhe_folder_library\(([^)]*)\)", cmake_text, re.M | re.S):
        words = m.group(1).split()
        name, key, parts = words[0], None, {"FOLDERS": [], "DEPS": [], "SOURCES_EXCLUDE": []}
        for w in words[1:]:
            if w in parts:
                key = w
            elif key:
                parts[key].append(w)
        out[name] = (parts["FOLDERS"][0], parts["DEPS"])
    return out


def layout(design_text):
    """folder -> (line number, its text with continuation lines) from §3's first code block."""
    sec = re.search(r"^## 3\..*?$(.*?)^## 4\.", design_text, re.M | re.S)
    if not sec:
        sys.exit("DESIGN.md: no section 3")
    start = design_text[: sec.start(1)].count("\n") + 1
    block = re.search(r"```\n(.*?)```", sec.group(1), re.S)
    first = start + sec.group(1)[: block.start(1)].count("\n")
    entries, stack, last = {}, [], None
    for i, line in enumerate(block.group(1).split("\n")):
        m = re.match(r"( *)([A-Za-z0-9_.-]+/)\s", line + " ")
        if m:
            depth = len(m.group(1)) // 2
            stack = stack[:depth] + [m.group(2).rstrip("/")]
            last = "/".join(stack)
            entries[last] = [first + i, line]
        elif last and line.strip():
            entries[last][1] += " " + line.strip()
    return entries


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    src = sys.argv[1]
    libs = libraries(open(os.path.join(src, "CMakeLists.txt"), encoding="utf-8").read())
    entries = layout(open(os.path.join(src, "DESIGN.md"), encoding="utf-8").read())
    folder_of = {name: folder for name, (folder, _) in libs.items()}
    errors = []
    for folder, (lineno, _) in entries.items():
        if not os.path.isdir(os.path.join(src, folder)):
            errors.append(f"DESIGN.md:{lineno}: §3 names {folder}/, which is not a folder of the repository")
    lib_folders = set(folder_of.values())
    for folder, (lineno, text) in entries.items():
        if re.search(r"\(->|depends on nothing", text) and folder not in lib_folders:
            errors.append(f"DESIGN.md:{lineno}: §3 gives {folder}/ dependencies, but no library of CMakeLists.txt has it first")
    for name, (folder, deps) in sorted(libs.items()):
        want = sorted(os.path.basename(folder_of.get(d, d)) for d in deps)
        if folder not in entries:
            errors.append(f"DESIGN.md: §3 has no line for {folder}/ (library {name})")
            continue
        lineno, text = entries[folder]
        m = re.search(r"\(->\s*([^)]*)\)", text)
        if m:
            said = sorted(w.strip() for w in m.group(1).split(","))
        elif "depends on nothing" in text:
            said = []
        else:
            errors.append(f"DESIGN.md:{lineno}: §3's {folder}/ says no dependencies; CMakeLists.txt: {name} DEPS {', '.join(want) or 'none'}")
            continue
        if said != want:
            errors.append(f"DESIGN.md:{lineno}: §3's {folder}/ depends on ({', '.join(said)}), "
                          f"CMakeLists.txt's {name} on ({', '.join(want)})")
    for e in errors:
        print(e)
    print(f"{len(libs)} libraries, {len(entries)} folders in §3, {len(errors)} disagreements")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
