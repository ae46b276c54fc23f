"""safetensors read and written from the format's published description
alone, for the tests: a reference beside the code under test (tesselctl's
writer, tessel.torch.load_pretrained's reader), sharing no code with either.

    8 bytes  N, little-endian unsigned
    N bytes  JSON {"__metadata__": {str: str}, NAME: {"dtype": "F32",
             "shape": [...], "data_offsets": [begin, end]}, ...}
    rest     the data; offsets are relative to its start

Example:
    write("m.safetensors", {"w": np.ones((2, 3), np.float32)}, {"format": "pt"})
    tensors, meta = read("m.safetensors")      # name -> np.ndarray (float32)
"""
import json
import struct

import numpy as np


def write(path, arrays, metadata=None):
    """float32 arrays (name -> array, in order) as a safetensors file."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    for name, a in arrays.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(a)),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# The safetensors dtypes this reader takes (the format's names), as numpy's.
_NUMPY = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "BOOL": "?"}


def read(path):
    """(OrderedDict name -> float32 array, metadata dict); asserts the layout
    the format requires: offsets that tile the data section in order."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    out, end = {}, 0
    for name, info in header.items():
        assert info["dtype"] in _NUMPY, (name, info)
        b, e = info["data_offsets"]
        assert b == end, f"{name}: data_offsets {b} does not follow the previous tensor's {end}"
        end = e
        out[name] = np.frombuffer(data[b:e], dtype=_NUMPY[info["dtype"]]).reshape(info["shape"])
    assert end == len(data), f"{len(data) - end} bytes after the last tensor"
    return out, meta
