"""What every tests/hf script shares: its work directory (with transformers' cache inside, so
concurrent runs never share remote code copied there by folder name), the check/failure
bookkeeping, running mhetrain's tools, and the ending (work dir kept only on failure)."""
import os
import shutil
import subprocess
import sys
import tempfile

failures = []


def make_workdir(prefix):
    """Call before importing transformers: it reads HF_HOME when imported."""
    work = tempfile.mkdtemp(prefix=prefix, dir=os.environ.get("MHE_BINARY_DIR"))
    os.environ["HF_HOME"] = os.path.join(work, "hf_home")
    return work


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def sh(*args, cwd=None):
    p = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError(f"{os.path.basename(args[0])} {' '.join(args[1:2])} exited {p.returncode}: "
                           f"{p.stderr.strip()[-2000:]}")
    return p.stdout


def registered_types(mhetrain):
    """Every attention type of the registry (trainer/config/attention_types.h), in registry order,
    as `mhetrain info --attention-types` lists them (the first column): a test iterating these
    checks a new type without a line of its own."""
    names = [line.split("\t", 1)[0] for line in sh(mhetrain, "info", "--attention-types").splitlines() if line]
    if "mha" not in names:
        raise RuntimeError(f"mhetrain info --attention-types lists no mha: {names}")
    return names


def finish(work):
    """Prints the count and exits 1 on any failure (keeping the work dir), else 0."""
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} failure(s)" + (f"; work dir kept: {work}" if failures else ""))
    sys.exit(1 if failures else 0)
