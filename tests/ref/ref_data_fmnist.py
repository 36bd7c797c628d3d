"""Independent Fashion-MNIST statistics from the IDX files (numpy + gzip; no dtrain code).

usage: ref_data_fmnist.py OUT_DIR [IDX_DIR]
Writes OUT_DIR/data_fmnist.json: per split (train, test) the image count, image size, the sum of
all pixels, the label counts, and the pixel sums of a few images by index.
"""
import gzip
import json
import os
import struct
import sys

import numpy as np

out = sys.argv[1]
src = sys.argv[2] if len(sys.argv) > 2 else "/usr/share/datasets/fashion-mnist"


def read(name):
    p = os.path.join(src, name)
    if os.path.exists(p):
        return open(p, "rb").read()
    return gzip.open(p + ".gz", "rb").read()


res = {}
for split, prefix in (("train", "train"), ("test", "t10k")):
    img = read(f"{prefix}-images-idx3-ubyte")
    lab = read(f"{prefix}-labels-idx1-ubyte")
    magic, n, h, w = struct.unpack(">IIII", img[:16])
    assert magic == 0x803
    lmagic, ln = struct.unpack(">II", lab[:8])
    assert lmagic == 0x801 and ln == n
    x = np.frombuffer(img, dtype=np.uint8, offset=16).reshape(n, h, w)
    y = np.frombuffer(lab, dtype=np.uint8, offset=8)
    probe = [0, 1, 2, n // 2, n - 1]
    res[split] = {"n": int(n), "h": int(h), "w": int(w),
                  "pixel_sum": int(x.astype(np.int64).sum()),
                  "label_counts": np.bincount(y, minlength=10).astype(int).tolist(),
                  "probe": probe,
                  "probe_sums": [int(x[i].astype(np.int64).sum()) for i in probe],
                  "probe_labels": [int(y[i]) for i in probe]}
json.dump(res, open(os.path.join(out, "data_fmnist.json"), "w"), indent=1)
print("ref_data_fmnist:", {k: (v["n"], v["pixel_sum"]) for k, v in res.items()})
