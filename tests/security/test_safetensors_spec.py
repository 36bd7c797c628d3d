#!/usr/bin/env python3
"""dtrain's safetensors reader holds files to the format's specification (issue 26).

Each rule of the format (huggingface/safetensors: the README's format section and tensor.rs,
read_metadata and Metadata::validate) gets a file that breaks only that rule, written here, and
dtrain must refuse it with a message that names the file and the rule; files that keep every
rule (padding, metadata, empty tensors, any order in the header) must load. Where the reference
library is importable (the venv's `safetensors`), it must agree: it refuses every file dtrain
refuses and loads every file dtrain loads.
    test_safetensors_spec.py ST_PROBE
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

probe = sys.argv[1]
try:
    import safetensors  # noqa: F401
    from safetensors import safe_open
    have_ref = True
except ImportError:
    have_ref = False

W = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
B = {"dtype": "F32", "shape": [3], "data_offsets": [24, 36]}


def hdr(obj):
    return json.dumps(obj, separators=(",", ":")).encode()


def pack(header, data_len=36, pad=b"", hlen=None, data=None):
    h = header + pad
    n = len(h) if hlen is None else hlen
    return struct.pack("<Q", n) + h + (data if data is not None else bytes(data_len))


# name: (file bytes, None if it must load, else a phrase dtrain's message must hold)
cases = {
    # files that keep every rule
    "good": (pack(hdr({"w": W, "b": B})), None),
    "good-padded": (pack(hdr({"w": W, "b": B}), pad=b"     "), None),
    "good-metadata": (pack(hdr({"__metadata__": {"format": "pt", "x": ""}, "w": W, "b": B})), None),
    "good-reordered": (pack(hdr({"b": B, "w": W})), None),
    "good-empty-tensor": (pack(hdr({"w": W, "e": {"dtype": "F32", "shape": [0, 3],
                                                  "data_offsets": [24, 24]}, "b": B})), None),
    "good-no-tensors": (pack(b"{}", data_len=0), None),
    # 8-byte length and header bounds
    "short": (b"\x01\x00\x00", "too short"),
    "header-past-file": (pack(hdr({"w": W, "b": B}), hlen=10_000), "header size"),
    "header-over-100MB": (pack(b"{}", data_len=0, hlen=100_000_001), "limit"),
    # the header: UTF-8 JSON object, padding only after it
    "not-utf8": (pack(hdr({"w~": W, "b": B}).replace(b"~", b"\xff")), "not UTF-8"),
    "utf8-surrogate": (pack(hdr({"w~": W, "b": B}).replace(b"~", b"\xed\xa0\x80")),
                       "not UTF-8"),
    "utf8-overlong": (pack(hdr({"w~": W, "b": B}).replace(b"~", b"\xc0\xaf")), "not UTF-8"),
    "good-utf8-name": (pack(hdr({"w~": W, "b": B}).replace(b"~", "\u00e9\u4e2d\U0001f600".encode())),
                       None),
    "not-json": (pack(hdr({"w": W, "b": B})[:-1] + b" "), "not a JSON object"),
    "json-array": (pack(b"[1,2]", data_len=0), "not a JSON object"),
    "trailing-garbage": (pack(hdr({"w": W, "b": B}) + b"xx"), "not padding"),
    "trailing-second-object": (pack(hdr({"w": W, "b": B}) + b"{}"), "not padding"),
    # __metadata__: a string-to-string map
    "metadata-object-value": (pack(hdr({"__metadata__": {"a": {"b": "c"}}, "w": W, "b": B})),
                              "__metadata__ key 'a' is an object"),
    "metadata-number-value": (pack(hdr({"__metadata__": {"a": 1}, "w": W, "b": B})),
                              "__metadata__ key 'a' is a number"),
    "metadata-not-object": (pack(hdr({"__metadata__": "pt", "w": W, "b": B})),
                            "__metadata__ is a string"),
    # a tensor's entry
    "tensor-not-object": (pack(hdr({"w": W, "b": 3})), "tensor 'b' is a number"),
    "no-dtype": (pack(hdr({"w": W, "b": {"shape": [3], "data_offsets": [24, 36]}})),
                 "no \"dtype\""),
    "no-shape": (pack(hdr({"w": W, "b": {"dtype": "F32", "data_offsets": [24, 36]}})),
                 "no \"shape\""),
    "no-offsets": (pack(hdr({"w": W, "b": {"dtype": "F32", "shape": [3]}})),
                   "no \"data_offsets\""),
    "unknown-dtype": (pack(hdr({"w": W, "b": dict(B, dtype="Q7")})), "not a safetensors dtype"),
    "dtype-not-string": (pack(hdr({"w": W, "b": dict(B, dtype=4)})), "dtype is a number"),
    "shape-negative": (pack(hdr({"w": W, "b": dict(B, shape=[-3])})), "shape[0]"),
    "shape-fraction": (pack(hdr({"w": W, "b": dict(B, shape=[2.5])})), "shape[0]"),
    "shape-string": (pack(hdr({"w": W, "b": dict(B, shape=["3"])})), "shape[0] is a string"),
    "offsets-three": (pack(hdr({"w": W, "b": dict(B, data_offsets=[24, 36, 36])})),
                      "[begin, end]"),
    "offsets-fraction": (pack(hdr({"w": W, "b": dict(B, data_offsets=[24, 35.5])})),
                         "[begin, end]"),
    "offsets-reversed": (pack(hdr({"w": W, "b": dict(B, data_offsets=[36, 24])})),
                         "end before they begin"),
    "bytes-not-numel": (pack(hdr({"w": W, "b": dict(B, shape=[4])})), "16 bytes"),
    # the data section: covered from byte 0 to its end, contiguously, once
    "past-end": (pack(hdr({"w": W, "b": B}), data_len=30), "past the end"),
    "hole-at-start": (pack(hdr({"w": dict(W, data_offsets=[4, 28]),
                                "b": dict(B, data_offsets=[28, 40])}), data_len=40), "a hole"),
    "hole-between": (pack(hdr({"w": W, "b": dict(B, data_offsets=[28, 40])}), data_len=40),
                     "a hole before 'b'"),
    "overlap": (pack(hdr({"w": W, "b": dict(B, data_offsets=[12, 24])}), data_len=24),
                "overlap"),
    "same-bytes-twice": (pack(hdr({"w": W, "v": W, "b": B})), "overlap"),
    "bytes-after-last": (pack(hdr({"w": W, "b": B}), data_len=40),
                         "follow the last tensor"),
    # names
    "duplicate-tensor": (pack(hdr({"w": W, "b": B}).replace(
        b"}}", b'},"w":' + hdr(dict(W, data_offsets=[36, 60])) + b"}", 1)[:-1] + b"}",
        data_len=60), "'w' appears twice"),
    # the second copy also disagrees with its bytes: the duplicate is what is reported
    "duplicate-tensor-bad-size": (pack(hdr({"w": W, "b": B})[:-1] + b',"w":'
                                       + hdr(dict(W, shape=[5])) + b"}"), "'w' appears twice"),
    "duplicate-metadata": (pack(b'{"__metadata__":{"a":"b"},"__metadata__":{"a":"c"},'
                                + hdr({"w": W, "b": B})[1:]), "__metadata__ appears twice"),
    # a metadata key twice: the reference takes the last (dtrain reads no metadata)
    "good-duplicate-metadata-key": (pack(b'{"__metadata__":{"a":"b","a":"c"},'
                                         + hdr({"w": W, "b": B})[1:]), None),
    # whitespace before the object: JSON allows it, and so does the reference
    "good-leading-space": (pack(b"  " + hdr({"w": W, "b": B})), None),
}


def ref_loads(path):
    """None if the reference library loads every tensor, else its error."""
    try:
        with safe_open(path, framework="numpy") as f:
            for k in f.keys():
                f.get_tensor(k)
        return None
    except Exception as e:  # noqa: BLE001 -- any refusal counts
        return f"{type(e).__name__}: {e}"


fail = 0
with tempfile.TemporaryDirectory() as d:
    paths = {}
    for name, (blob, _) in cases.items():
        paths[name] = os.path.join(d, name + ".safetensors")
        with open(paths[name], "wb") as f:
            f.write(blob)
    out = subprocess.run([probe] + list(paths.values()), capture_output=True, text=True,
                         timeout=120, check=True).stdout
    got = {}
    for line in out.splitlines():
        p, _, rest = line.partition("\t")
        got[p] = rest
    for name, (_, want) in cases.items():
        p = paths[name]
        r = got.get(p, "missing from the probe's output")
        if want is None:
            ok = r == "ok"
            what = "loads" if ok else f"FAIL: refused a valid file: {r}"
        else:
            msg = r.partition("\t")[2]
            ok = r.startswith("error\t") and p in msg and want in msg
            what = (f"refused: {msg[len(p) + 2:] if msg.startswith(p) else msg}" if ok else
                    f"FAIL: expected a refusal naming the file and saying '{want}': {r}")
        line = f"{name:24} {what}"
        if have_ref:
            ref = ref_loads(p)
            agree = (ref is None) == (want is None)
            if not agree:
                line += f"\n    FAIL: the safetensors library {'loads it' if ref is None else 'refuses it: ' + ref}"
                ok = False
        print(("ok   " if ok else "FAIL ") + line)
        fail |= not ok
if not have_ref:
    print("note: the safetensors library is not importable here: dtrain's verdicts not compared")
print(f"{len(cases)} cases, {'all as the format says' if not fail else 'FAILURES above'}")
sys.exit(1 if fail else 0)
