"""Helpers for reference scripts: write safetensors files without the safetensors package
(Debian's PyTorch 1.13 has none), deterministic random tensors, and a common CLI.

The format: 8-byte little-endian header length N, N bytes of JSON
{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}, then the data.
"""
import json
import struct
import sys
import os

import numpy as np

_DT = {np.dtype("float32"): "F32", np.dtype("int64"): "I64", np.dtype("int32"): "I32",
       np.dtype("uint16"): "BF16"}


def _np(x):
    try:
        import torch
        if isinstance(x, torch.Tensor):
            x = x.detach()
            if x.dtype == torch.bfloat16:
                return x.view(torch.int16).numpy().view(np.uint16)  # raw bf16 bits
            return x.contiguous().numpy()
    except ImportError:
        pass
    return np.asarray(x)


def save(path, tensors):
    """tensors: dict name -> torch.Tensor or numpy array (f32, i64, i32; bf16 torch)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(_np(t))
        if a.dtype == np.float64:
            a = a.astype(np.float32)
        if a.dtype not in _DT:
            raise TypeError(f"{name}: unsupported dtype {a.dtype}")
        b = a.tobytes()
        header[name] = {"dtype": _DT[a.dtype], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def out_dir():
    """The output directory given on the command line (CTest passes $DT_REF_DIR)."""
    d = sys.argv[1] if len(sys.argv) > 1 else "ref"
    os.makedirs(d, exist_ok=True)
    return d


def torch_setup(seed=0):
    import torch
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(False)
    return torch
