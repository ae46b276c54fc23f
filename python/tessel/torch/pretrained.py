"""load_pretrained: a model file into a torch model's parameters and buffers.

Reads the three formats `tesselctl checkpoint export` writes, and the same
formats from anywhere else:
  safetensors  parsed here from the published format (no safetensors package):
               8-byte little-endian header length N, N bytes of JSON
               {name: {"dtype", "shape", "data_offsets"}, "__metadata__": {...}},
               then the data
  torch        torch.load(path, map_location="cpu"), a mapping name -> tensor
               (a state_dict)
  npz          np.load(path), one array per name
The format is recognised from the file's first bytes (a zip holding
data.pkl is torch's, one holding .npy members numpy's), or given.

Contract. Every check happens before anything is copied, so on any error
the model is unchanged:
  - keys are matched against model.state_dict() (parameters and persistent
    buffers). Missing keys (the model's, not in the file) and unexpected keys
    (the file's, not in the model) raise ValueError naming all of them,
    sorted, unless strict=False, which loads the keys both have and reports
    the rest in the result;
  - a shape that differs raises ValueError naming every such key with both
    shapes, strict or not (as torch's load_state_dict does). One exception:
    a file's shape [1] loads into a 0-d tensor, because Tessel registers 0-d
    parameters as [1] and its exports keep that shape;
  - a file that cannot be read, or is no mapping of names to tensors, raises
    ValueError saying why; an unknown format raises ValueError.
Values are copied into the model's own tensors (its device and dtype;
float32 into float32 is bitwise). Returns a Loaded: the keys loaded (in the
model's order), the missing and unexpected ones (empty when strict), and
the format.

When. On the freshly built model, before DistributedOptimizer(...) is made,
it fills the torch model: the optimizer takes rank 0's parameters as the
job's initial ones (on every rank, load the same file, or at least on rank
0). While a DistributedOptimizer made with model= trains the model, it loads
through it (DistributedOptimizer.load_model_state_dict, model_state.py): the
parameters go to the shard servers and the optimizer state and step stay;
that is collective, so every rank calls it with the same file between
steps. Threads: the caller's.

Example:
    model = Net()
    tessel.torch.load_pretrained(model, "mlp.safetensors")
    opt = tessel.torch.DistributedOptimizer(torch.optim.Adam(model.parameters()), model=model)
"""
import collections
import collections.abc
import json
import struct
import zipfile

import numpy as np
import torch

FORMATS = ("safetensors", "torch", "npz")

Loaded = collections.namedtuple("Loaded", ["keys", "missing", "unexpected", "format"])

# safetensors dtype names -> torch dtypes.
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}


def _detect(path):
    with open(path, "rb") as f:
        head = f.read(9)
    if head[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except zipfile.BadZipFile as e:
            raise ValueError(f"{path}: a damaged zip file ({e})") from None
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise ValueError(f"{path}: a zip file that is neither torch.save's (no data.pkl) nor "
                         f"numpy's .npz (members other than .npy)")
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    raise ValueError(f"{path}: unknown format (not safetensors, torch.save's zip or .npz); "
                     f"formats read: {', '.join(FORMATS)}")


def _read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: {len(raw)} bytes, shorter than a safetensors header")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8:
        raise ValueError(f"{path}: the header length {n} passes the end of the file")
    try:
        header = json.loads(raw[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"{path}: the safetensors header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    data = memoryview(raw)[8 + n:]
    out = collections.OrderedDict()
    for name, info in header.items():
        try:
            dtype = _SAFETENSORS_DTYPES[info["dtype"]]
            shape = [int(d) for d in info["shape"]]
            begin, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: tensor {name!r} has a malformed or unsupported entry "
                             f"{info!r}") from None
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        size = numel * torch.empty((), dtype=dtype).element_size()
        if min(shape, default=0) < 0 or not 0 <= begin <= end <= len(data) or end - begin != size:
            raise ValueError(f"{path}: tensor {name!r} of shape {shape} ({info['dtype']}) has "
                             f"data_offsets [{begin}, {end}] outside the {len(data)} data bytes "
                             f"or of the wrong size (wants {size})")
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dtype)
        else:
            out[name] = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype).reshape(shape)
    return out


def _read_torch(path):
    try:
        obj = torch.load(path, map_location="cpu")
    except Exception as e:  # torch raises many kinds for a bad file
        raise ValueError(f"{path}: torch.load failed: {e}") from None
    if not isinstance(obj, collections.abc.Mapping) or not all(
            isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in obj.items()):
        raise ValueError(f"{path}: torch.load gave a {type(obj).__name__}, not a state_dict "
                         f"(a mapping of names to tensors)")
    return collections.OrderedDict(obj)


def _read_npz(path):
    try:
        with np.load(path, allow_pickle=False) as z:
            return collections.OrderedDict((k, torch.from_numpy(np.array(z[k]))) for k in z.files)
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ValueError(f"{path}: np.load failed: {e}") from None


_READERS = {"safetensors": _read_safetensors, "torch": _read_torch, "npz": _read_npz}


def read_tensors(path, format=None):
    """The file's tensors as an OrderedDict name -> CPU tensor (format None: detected)."""
    path = str(path)
    if format is None:
        format = _detect(path)
    if format not in _READERS:
        raise ValueError(f"unknown format {format!r}; formats read: {', '.join(FORMATS)}")
    return _READERS[format](path), format


def _fits(target, source):
    """source's shape loads into target's: equal, or [1] into a 0-d tensor."""
    return target.shape == source.shape or (target.dim() == 0 and list(source.shape) == [1])


def load_pretrained(model, path, strict=True, format=None):
    """Loads `path` into `model`'s parameters and buffers (see the module's docs);
    returns a Loaded. ValueError, with the model unchanged, on any mismatch."""
    tensors, format = read_tensors(path, format)
    own = model.state_dict(keep_vars=True)
    missing = sorted(k for k in own if k not in tensors)
    unexpected = sorted(k for k in tensors if k not in own)
    problems = []
    if strict and missing:
        problems.append(f"Missing keys (in the model, not in the file): {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"Unexpected keys (in the file, not in the model): "
                        f"{', '.join(unexpected)}")
    shapes = sorted(f"{k}: model {list(own[k].shape)}, file {list(tensors[k].shape)}"
                    for k in own if k in tensors and not _fits(own[k], tensors[k]))
    if shapes:
        problems.append(f"Shapes differ: {'; '.join(shapes)}")
    if problems:
        raise ValueError(f"{path} does not fit {type(model).__name__}. " + ". ".join(problems))
    keys = [k for k in own if k in tensors]
    state = getattr(model, "_tessel_model_state", None)
    if state is not None and state.is_open():  # a DistributedOptimizer trains it: its servers
        loaded = collections.OrderedDict(
            (k, tensors[k].to(torch.float32 if k in state.param_keys else own[k].dtype)
             .reshape(own[k].shape)) for k in keys)
        state.load(loaded, strict=False)
        return Loaded(keys, [] if strict else missing, [] if strict else unexpected, format)
    # Converted first, so a failure (memory, device) leaves the model as it was.
    staged = [tensors[k].to(device=own[k].device, dtype=own[k].dtype).reshape(own[k].shape)
              for k in keys]
    with torch.no_grad():
        for k, value in zip(keys, staged):
            own[k].copy_(value)
    return Loaded(keys, [] if strict else missing, [] if strict else unexpected, format)
