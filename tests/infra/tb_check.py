"""Oracle for tests/infra/test_tensorboard.c: TensorBoard's own reader on our event file.

usage: tb_check.py RUN_DIR METRICS_JSONL DUMP_JSON
Checks that TensorBoard reads file_version 2 and, for every JSON-lines record, scalars equal
to the JSON values (as float32); dumps everything it read as {tag: [[step, value, wall], ...]}
so the C side can compare with what it wrote.
"""
import glob
import json
import sys

import numpy as np
from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

JSON_TO_TAG = {"loss": "train/loss", "lr": "train/lr", "grad_norm": "train/grad_norm"}


def main():
    run_dir, jsonl, dump_path = sys.argv[1:4]
    files = glob.glob(f"{run_dir}/events.out.tfevents.*")
    assert len(files) == 1, files
    # The raw loader checks both CRCs of every record and stops at a bad one.
    raw = list(event_file_loader.RawEventFileLoader(files[0]).Load())
    ea = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    ea.Reload()
    assert ea.file_version == 2.0, ea.file_version
    dump = {}
    for tag in ea.Tags()["scalars"]:
        dump[tag] = [[e.step, e.value, e.wall_time] for e in ea.Scalars(tag)]
    compared = 0
    with open(jsonl) as f:
        for line in f:
            rec = json.loads(line)
            for key, tag in JSON_TO_TAG.items():
                got = [v for s, v, _ in dump[tag] if s == rec["step"]]
                assert len(got) == 1, (tag, rec["step"], got)
                want = float(np.float32(rec[key]))
                assert got[0] == want, (tag, rec["step"], got[0], want)
                compared += 1
    print(f"tensorboard {len(raw)} records, {len(dump)} tags, {compared} scalars equal to the JSON-lines values")
    with open(dump_path, "w") as f:
        json.dump({"records": len(raw), "scalars": dump}, f)


if __name__ == "__main__":
    main()
