"""Helper of tests/data/import_images.sh: makes image folders and checks an encoded-image import
against torchvision.datasets.ImageFolder.

  import_images.py make DIR          ImageFolder DIR/folder (classes "Zebra", "a b", "cat",
                                     "dog"; JPEG/PNG/WebP, some with the wrong extension, a nested
                                     folder; corrupt.jpg, truncated.jpg, readme.jpg (text),
                                     notes.txt), DIR/splits/{train,val} and DIR/list.csv
  import_images.py check {ROOT SPLIT_DIR STDERR MAX_SIDE SKIPPED}...
                                     the dataset SPLIT_DIR (read from its shards here) holds
                                     ImageFolder(ROOT)'s samples in order, less the files the
                                     import reported skipped (STDERR), with its class_to_idx; the
                                     bytes equal the files (or, with MAX_SIDE, larger images are
                                     JPEGs with that longer side); SKIPPED: the base names
                                     that must have been skipped (comma-separated, or -)
"""
import io
import json
import os
import struct
import sys

import numpy as np
from PIL import Image


def photo(rng, w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) % 256], -1)
    a = a + rng.integers(0, 40, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def enc(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def make(root):
    rng = np.random.default_rng(7)
    sizes = [(40, 30), (33, 47), (64, 20), (17, 17), (50, 61)]

    def fill(base, classes, per):
        for ci, c in enumerate(classes):
            d = os.path.join(base, c)
            os.makedirs(os.path.join(d, "sub"), exist_ok=True)
            for k in range(per):
                w, h = sizes[(ci + k) % len(sizes)]
                im = photo(rng, w, h)
                kind = (ci + k) % 4
                if kind == 0:
                    name, data = f"img{k:02d}.jpg", enc(im, "JPEG", quality=85)
                elif kind == 1:
                    name, data = f"img{k:02d}.png", enc(im, "PNG")
                elif kind == 2:
                    name, data = f"img{k:02d}.webp", enc(im, "WEBP", quality=80)
                else:  # a PNG named .jpg: kept by its content
                    name, data = f"img{k:02d}.jpg", enc(im, "PNG")
                sub = "sub" if k % 3 == 2 else ""
                with open(os.path.join(d, sub, name), "wb") as f:
                    f.write(data)
    classes = ["cat", "dog", "Zebra", "a b"]
    folder = os.path.join(root, "folder")
    fill(folder, classes, 6)
    good = enc(photo(rng, 80, 60), "JPEG", quality=90)
    with open(os.path.join(folder, "cat", "corrupt.jpg"), "wb") as f:
        f.write(good[:200] + bytes(rng.integers(0, 256, 600, dtype=np.uint8)) + good[-2:])
    with open(os.path.join(folder, "dog", "truncated.jpg"), "wb") as f:
        f.write(good[: len(good) // 2])
    with open(os.path.join(folder, "dog", "readme.jpg"), "w") as f:
        f.write("not an image, despite its name\n")
    with open(os.path.join(folder, "Zebra", "notes.txt"), "w") as f:
        f.write("notes\n")
    splits = os.path.join(root, "splits")
    fill(os.path.join(splits, "train"), classes[:3], 4)
    fill(os.path.join(splits, "val"), classes[:3], 2)
    with open(os.path.join(root, "list.csv"), "w") as f:
        f.write("path,label\n")
        for ci, c in enumerate(["cat", "dog"]):
            for name in sorted(os.listdir(os.path.join(splits, "train", c))):
                p = os.path.join("splits", "train", c, name)
                if os.path.isfile(os.path.join(root, p)):
                    f.write(f"{p},{['kitten', 'puppy'][ci]}\n")


def read_split(d):
    """Records of an encoded-image dataset, parsed from its shards (docs/data.md's layout)."""
    man = json.load(open(os.path.join(d, "manifest.json")))
    assert man["kind"] == "encoded-image", man["kind"]
    recs = []
    for s in man["shards"]:
        b = open(os.path.join(d, s["file"]), "rb").read()
        assert b[:8] == b"DTSHARD\x1a"
        kind, n = struct.unpack_from("<I", b, 16)[0], struct.unpack_from("<Q", b, 24)[0]
        assert kind == 3
        sec = {}
        for i in range(struct.unpack_from("<I", b, 56)[0]):
            sid, _, off, nb, _ = struct.unpack_from("<IIQQQ", b, 64 + 32 * i)
            sec[sid] = b[off:off + nb]
        offs = struct.unpack(f"<{n + 1}Q", sec[4])
        labels = struct.unpack(f"<{n}i", sec[2])
        info = struct.unpack(f"<{4 * n}I", sec[7])
        for i in range(n):
            recs.append((sec[6][offs[i]:offs[i + 1]], labels[i], info[4 * i:4 * i + 4]))
    return man, recs


def check(root, split_dir, stderr, max_side=0):
    from torchvision.datasets import ImageFolder
    ds = ImageFolder(root)
    skipped = set()
    for line in open(stderr):
        if line.startswith("import images: skipped "):
            skipped.add(line[len("import images: skipped "):].split(": ")[0])
    man, recs = read_split(split_dir)
    names = man["encoded"]["class_names"]
    assert {c: i for i, c in enumerate(names)} == ds.class_to_idx, (names, ds.class_to_idx)
    want = [(p, t) for p, t in ds.samples if p not in skipped]
    assert len(want) == len(recs), (len(want), len(recs))
    for (p, t), (data, label, info) in zip(want, recs):
        assert label == t, (p, label, t)
        src = open(p, "rb").read()
        im = Image.open(io.BytesIO(src))
        if max_side and max(im.size) > max_side:
            out = Image.open(io.BytesIO(data))
            assert out.format == "JPEG" and max(out.size) == max_side, (p, out.format, out.size)
            assert tuple(info[:2]) == out.size and info[2] == 1, (p, info)
        else:
            assert data == src, f"{p}: stored bytes differ from the file"
            assert tuple(info[:2]) == im.size, (p, info, im.size)
    print(f"check: {len(recs)} records equal ImageFolder's (less {len(skipped)} skipped), "
          f"classes {ds.class_to_idx}")
    return skipped


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:  # one torchvision start for several checks: ROOT SPLIT_DIR STDERR MAX_SIDE SKIPPED
        a = sys.argv[2:]
        for i in range(0, len(a), 5):
            sk = check(a[i], a[i + 1], a[i + 2], int(a[i + 3]))
            if a[i + 4] != "-":  # the files that must have been skipped, by base name
                got = sorted(os.path.basename(p) for p in sk)
                assert got == sorted(a[i + 4].split(",")), got
