#!/usr/bin/python3
"""Runs the PyTorch oracle (tests/reference/ref_model.py) on many cases in one process, so
torch is imported once.  Each line of the job file: cfg weights inputs out dtype."""
import os
import sys

sys.path.insert(0, os.path.join(os.environ.get("MHE_SOURCE_DIR", "."), "tests", "reference"))
import ref_model  # noqa: E402
import torch  # noqa: E402

# The cases are tiny: one thread avoids OpenMP barrier spinning (ruinous on a loaded machine).
torch.set_num_threads(1)


def main():
    status = 0
    with open(sys.argv[1]) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            cfg, weights, inputs, out, dtype = parts
            rc = ref_model.main(["--config", cfg, "--weights", weights, "--inputs", inputs,
                                 "--out", out, "--dtype", dtype])
            if rc:
                print(f"run_oracle: case {cfg} failed with status {rc}", file=sys.stderr)
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
