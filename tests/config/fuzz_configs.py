"""Mutates shipped and bad configs at random (fixed seed) and runs `mhetrain train --dry-run`
on each: the loader must exit 0 or 2, never crash or hang, and a failure must be one line
"file[:line[:col]]: message"."""
import os
import random
import re
import subprocess
import sys
import tempfile

SRC = os.environ["MHE_SOURCE_DIR"]
EXE = os.environ["MHETRAIN"]
CASES = int(os.environ.get("MHE_FUZZ_CASES", "400"))
TOKENS = [":", " ", "\n", "-", "[", "]", "{", "}", "'", '"', "&a", "*a", "#", "~", "0", "-1",
          "1e9", "base: ", "model:", "  x: 1", "\t", "\\", "\xff", "null", "!!int", "<<: *a"]


def mutate(text, rng):
    for _ in range(rng.randint(1, 4)):
        pos = rng.randint(0, len(text))
        op = rng.randrange(5)
        if op == 0:
            text = text[:pos] + rng.choice(TOKENS) + text[pos:]
        elif op == 1:
            text = text[:pos] + text[pos + rng.randint(1, 8):]
        elif op == 2 and text:
            lines = text.split("\n")
            i = rng.randrange(len(lines))
            lines.insert(rng.randrange(len(lines) + 1), lines[i])
            text = "\n".join(lines)
        elif op == 3:
            text = text[:pos] + chr(rng.randrange(1, 256)) + text[pos + 1:]
        else:
            lines = text.split("\n")
            rng.shuffle(lines)
            text = "\n".join(lines)
    return text


def main():
    rng = random.Random(20261122)
    seeds = []
    for folder in ("configs", "tests/config/bad"):
        d = os.path.join(SRC, folder)
        for name in sorted(os.listdir(d)):
            if name.endswith(".yaml"):
                with open(os.path.join(d, name), encoding="utf-8") as f:
                    seeds.append(f.read())
    line_re = re.compile(r"^(\S.*?)(:\d+(:\d+)?)?: .+$")
    failures = 0
    exits = {0: 0, 2: 0}
    with tempfile.TemporaryDirectory() as tmp:
        # Bases named by mutated files resolve against copies of the real configs.
        for name in os.listdir(os.path.join(SRC, "configs")):
            if name.endswith(".yaml"):
                with open(os.path.join(SRC, "configs", name), "rb") as f:
                    data = f.read()
                with open(os.path.join(tmp, name), "wb") as f:
                    f.write(data)
        path = os.path.join(tmp, "case.yaml")
        for i in range(CASES):
            text = mutate(rng.choice(seeds), rng)
            with open(path, "wb") as f:
                f.write(text.encode("utf-8", "surrogateescape"))
            p = subprocess.run([EXE, "train", path, "--dry-run"], capture_output=True, timeout=20)
            err = p.stderr.decode("utf-8", "replace").rstrip("\n")
            bad = None
            if p.returncode not in (0, 2):
                bad = f"exit status {p.returncode}"
            elif p.returncode == 2 and (len(err.split("\n")) != 1 or not line_re.match(err)):
                bad = f"not a one-line file:line:col message: {err!r}"
            if bad:
                failures += 1
                print(f"FAIL case {i}: {bad}\n--- input ---\n{text}\n-------------")
            else:
                exits[p.returncode] += 1
    print(f"{CASES} cases: {exits[0]} accepted, {exits[2]} rejected, {failures} failures")
    return 1 if failures or exits[2] == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
