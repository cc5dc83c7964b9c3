#!/usr/bin/python3
"""env_table.py SOURCE_DIR [README]: every MHE_* variable the programs and launch scripts read has a row
in README.md's "Environment variables" table, and every row names a variable still read.

Read in C/C++/CUDA sources outside tests/: getenv("MHE_X") and the common/env.h helpers
mhe_env_*("MHE_X", ...); in launch/*.sh and launch/slurm.sbatch: $MHE_X / ${MHE_X...} outside
comments."""
import os
import re
import sys

src = sys.argv[1]
read = {}
for root, dirs, files in os.walk(src):
    rel = os.path.relpath(root, src)
    dirs[:] = [d for d in dirs if not d.startswith(".") and d != "build" and not (rel == "." and d == "tests")]
    for f in files:
        p = os.path.join(root, f)
        if f.endswith((".c", ".h", ".cu", ".cpp", ".cuh")):
            text = open(p, errors="replace").read()
            pat = r'(?:getenv|mhe_env_\w+)\(\s*"(MHE_[A-Z0-9_]+)"'
        elif rel == "launch" and (f.endswith(".sh") or f.endswith(".sbatch")):
            text = "\n".join(l.split("#", 1)[0] if not l.lstrip().startswith("#") else "" for l in open(p))
            pat = r'\$\{?(MHE_[A-Z0-9_]+)'
        else:
            continue
        for v in re.findall(pat, text):
            read.setdefault(v, set()).add(os.path.relpath(p, src))
readme = open(sys.argv[2] if len(sys.argv) > 2 else os.path.join(src, "README.md")).read()
m = re.search(r"## Environment variables\n(.*?)\n## ", readme, re.S)
if not m:
    sys.exit("README.md: no \"## Environment variables\" section")
rows = {}
for line in m.group(1).splitlines():
    r = re.match(r"^\| `(MHE_[A-Z0-9_]+)` \|([^|]+)\|([^|]+)\|([^|]+)\|$", line)
    if r:
        if any(not c.strip() for c in r.groups()[1:]):
            sys.exit("README.md: the row of %s has an empty cell" % r.group(1))
        rows[r.group(1)] = line
missing = sorted(set(read) - set(rows))
stale = sorted(set(rows) - set(read))
for v in missing:
    print("README.md: no row for %s (read in %s)" % (v, ", ".join(sorted(read[v]))))
for v in stale:
    print("README.md: a row for %s, which no source reads" % v)
if missing or stale:
    sys.exit(1)
print("%d variables, each with a row" % len(rows))
