"""Minimal safetensors reader/writer (json + numpy), so the oracle needs no extra package.

Format: u64 little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the data;
offsets are relative to the start of the data.
"""
import json
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


class SafetensorsError(Exception):
    pass


def read(path):
    """Returns (dict name -> numpy array, metadata dict)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise SafetensorsError(f"{path}: byte 0: file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise SafetensorsError(f"{path}: byte 0: header length {n} runs past the end of the file")
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: byte 8: bad JSON header: {e}")
    data = memoryview(blob)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dt = info.get("dtype")
        shape = [int(s) for s in info.get("shape", [])]
        begin, end = (int(v) for v in info.get("data_offsets", [0, 0]))
        if end < begin or end > len(data):
            raise SafetensorsError(f"{path}: tensor {name!r}: data_offsets [{begin}, {end}] outside the data")
        count = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            raw = np.frombuffer(data[begin:end], dtype="<u2")
            if raw.size != count:
                raise SafetensorsError(f"{path}: tensor {name!r}: {end - begin} bytes do not fit shape {shape}")
            arr = (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        elif dt in _DTYPES:
            npdt = _DTYPES[dt]
            if end - begin != count * npdt.itemsize:
                raise SafetensorsError(f"{path}: tensor {name!r}: {end - begin} bytes do not fit {dt} {shape}")
            arr = np.frombuffer(data[begin:end], dtype=npdt).reshape(shape).copy()
        else:
            raise SafetensorsError(f"{path}: tensor {name!r}: unsupported dtype {dt!r}")
        out[name] = arr
    return out, meta


def _code(arr):
    for code, npdt in _DTYPES.items():
        if arr.dtype == npdt or arr.dtype == npdt.newbyteorder("="):
            return code
    raise SafetensorsError(f"cannot write numpy dtype {arr.dtype}")


def write(path, tensors, metadata=None):
    """tensors: dict name -> numpy array (written in insertion order, 8-byte aligned header)."""
    header = {}
    chunks = []
    offset = 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        code = _code(arr)
        raw = arr.astype(_DTYPES[code], copy=False).tobytes()
        header[name] = {"dtype": code, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)
