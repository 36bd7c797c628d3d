"""Helper of tests/data/loader_images.sh: makes a photo folder and checks the loader's batches
(dumped by `test_loader_images dump`) against Pillow + torchvision on the same boxes.

  loader_images.py make DIR      ImageFolder DIR/photos: 3 classes, JPEG (baseline, progressive,
                                 4:4:4, EXIF orientations 3/6/8), PNG and WebP, 40x30 .. 640x480
  loader_images.py check ROOT SIZE {DUMP MODE}...
                                 every dumped sample equals torchvision's pipeline on image
                                 ImageFolder(ROOT).samples[id] with the dumped box and flip:
                                 train: resized_crop(box, SIZE, BILINEAR) + hflip + ToTensor +
                                 Normalize; eval: Resize(SIZE*8//7) + CenterCrop(SIZE) + ...;
                                 *-dct: the JPEG decoded by Pillow's draft() at the scale the
                                 rule gives (checked here: the largest of 1, 2, 4, 8 with the box
                                 at least scale x the resized size), the box mapped to it.
"""
import io
import os
import sys

import numpy as np
from PIL import Image, ImageOps

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def photo(rng, w, h):
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1),
                  ((x // 7 + y // 5) % 2) * 200], -1)
    a = a + rng.integers(0, 30, a.shape)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def make(root):
    rng = np.random.default_rng(5)
    sizes = [(640, 480), (480, 360), (300, 500), (40, 30), (257, 193), (600, 90), (128, 128)]
    for ci, c in enumerate(["ant", "bee", "cow"]):
        d = os.path.join(root, "photos", c)
        os.makedirs(d, exist_ok=True)
        for k in range(8):
            w, h = sizes[(ci * 3 + k) % len(sizes)]
            im = photo(rng, w, h)
            kind = (ci + k) % 6
            b = io.BytesIO()
            if kind == 0:
                im.save(b, "JPEG", quality=90)
            elif kind == 1:
                im.save(b, "JPEG", quality=85, progressive=True)
            elif kind == 2:
                im.save(b, "JPEG", quality=92, subsampling=0)
            elif kind == 3:
                ex = Image.Exif()
                ex[0x0112] = [3, 6, 8][k % 3]
                im.save(b, "JPEG", quality=88, exif=ex.tobytes())
            elif kind == 4:
                im.save(b, "PNG")
            else:
                im.save(b, "WEBP", quality=80)
            ext = {4: "png", 5: "webp"}.get(kind, "jpg")
            with open(os.path.join(d, f"p{k}.{ext}"), "wb") as f:
                f.write(b.getvalue())


def load(path, denom):
    im = Image.open(path)
    if denom > 1:
        W, H = im.size  # stored orientation
        im.draft("RGB", (W // denom, H // denom))
        want = ((W + denom - 1) // denom, (H + denom - 1) // denom)
        assert im.size == want, f"{path}: draft gave {im.size}, want {want}"
    return ImageOps.exif_transpose(im).convert("RGB")


def check(root, dump, mode, size):
    # torchvision only here: its import takes seconds, `make` does without it
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    from torchvision.datasets import ImageFolder

    samples = ImageFolder(root).samples
    raw = np.fromfile(dump, dtype=np.int32)
    per = 16 + 3 * size * size
    assert raw.size % per == 0 and raw.size > 0, "dump size"
    recs = raw.reshape(-1, per)
    norm = T.Compose([T.ToTensor(), T.Normalize(MEAN, STD)])
    worst, scaled, n = 0.0, 0, 0
    for r in recs:
        sid, label, denom, w, h, top, left, bh, bw, flip, ow, oh, wx, wy = (int(v) for v in r[:14])
        got = r[16:].view(np.float32).reshape(3, size, size)
        path, want_label = samples[sid]
        assert label == want_label, f"sample {sid}: label {label}, ImageFolder {want_label}"
        is_jpeg = open(path, "rb").read(3) == b"\xff\xd8\xff"
        # the DCT rule, independently
        d = 1
        if mode.endswith("dct") and is_jpeg:
            while 2 * d <= 8 and bw >= 2 * d * ow and bh >= 2 * d * oh:
                d *= 2
        assert d == denom, f"sample {sid}: scale 1/{denom}, the rule gives 1/{d}"
        scaled += d > 1
        im = load(path, d)
        assert (im.size[0] + 0) == (w + d - 1) // d and im.size[1] == (h + d - 1) // d, \
            f"sample {sid}: decoded {im.size}, manifest {w}x{h} at 1/{d}"
        if mode.startswith("train"):
            x0, y0 = left // d, top // d
            x1 = min(im.size[0], -(-(left + bw) // d))
            y1 = min(im.size[1], -(-(top + bh) // d))
            out = F.resized_crop(im, y0, x0, y1 - y0, x1 - x0, [size, size],
                                 T.InterpolationMode.BILINEAR, antialias=True)
            if flip:
                out = F.hflip(out)
        else:
            if d == 1:
                out = T.CenterCrop(size)(T.Resize(size * 8 // 7)(im))
            else:  # resized to the full-size image's Resize size, then the centre crop
                out = T.CenterCrop(size)(im.resize((ow, oh), Image.BILINEAR))
                assert (ow, oh) == T.Resize(size * 8 // 7)(load(path, 1)).size
        want = norm(out).numpy()
        levels = np.abs(want - got) * np.array(STD)[:, None, None] * 255
        worst = max(worst, float(levels.max()))
        n += 1
    print(f"{mode}: {n} samples, {scaled} decoded scaled, worst {worst:.4f} levels of 255")
    assert worst <= 1.0 + 1e-3, f"{mode}: worst {worst} levels"
    if mode.endswith("dct"):
        assert scaled > 0, "no sample took the DCT path"


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        for i in range(4, len(sys.argv), 2):
            check(sys.argv[2], sys.argv[i], sys.argv[i + 1], int(sys.argv[3]))
