#!/usr/bin/python3
"""poison_checkpoint.py CHECKPOINT_DIR: set the first float of the first tensor to NaN and
re-record the checksums, so the checkpoint is valid but holds a NaN weight."""
import hashlib
import json
import os
import struct
import sys

d = sys.argv[1]
p = os.path.join(d, "model.safetensors")
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
b[8 + n:8 + n + 4] = struct.pack("<f", float("nan"))
open(p, "wb").write(b)
s = json.load(open(os.path.join(d, "state.json")))
s["files"]["model.safetensors"]["sha256"] = hashlib.sha256(b).hexdigest()
# state.json's own checksum: sha256 of its text with the value zeroed.
s["state_sha256"] = "0" * 64
text = json.dumps(s)
text = text.replace('"state_sha256": "' + "0" * 64, '"state_sha256": "' + hashlib.sha256(text.encode()).hexdigest())
open(os.path.join(d, "state.json"), "w").write(text)
