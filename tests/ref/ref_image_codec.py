"""Encoded images and Pillow's decoding of them, for tests/data/test_image_codec.c.

usage: ref_image_codec.py OUT_DIR
Writes photo-like images (gradients, noise, shapes; odd sizes) as JPEG (baseline, progressive,
4:2:0 / 4:2:2 / 4:4:4, grayscale, CMYK, every EXIF orientation 1-8), PNG (8-bit RGB, RGBA, gray,
gray+alpha, palette with and without transparency, 1-bit, 16-bit RGB / RGBA / gray) and WebP
(lossless and lossy, with and without alpha), and for each the RGB array torchvision's default
loader would see: Image.open, ImageOps.exif_transpose, convert("RGB"); for some JPEGs also the
1/2, 1/4, 1/8 DCT-scaled decode (Image.draft). OUT_DIR/cases.txt has one line per reference:
  file scale width height exact   (exact 1: PNG/WebP lossless; 0: JPEG or lossy WebP)
and OUT_DIR/<file>.<scale>.rgb its HWC uint8 pixels.
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageDraw, ImageOps

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1234)


def photo(w, h, channels=3):
    """Gradients + noise + a few shapes: content with edges and smooth areas, like a photo."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1),
                     127 + 120 * np.sin((x + y) / 7.0)], -1)
    base += rng.normal(0, 12, base.shape)
    im = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8), "RGB")
    d = ImageDraw.Draw(im)
    for _ in range(4):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(1, w // 2 + 2)), y0 + int(rng.integers(1, h // 2 + 2))
        col = tuple(int(c) for c in rng.integers(0, 256, 3))
        (d.ellipse if rng.integers(0, 2) else d.rectangle)([x0, y0, x1, y1], fill=col)
    if channels == 4:
        a = np.clip(255 * (x / max(w - 1, 1)) + rng.normal(0, 30, (h, w)), 0, 255)
        a[: h // 3, : w // 3] = 0  # fully transparent corner: RGB there must survive too
        im.putalpha(Image.fromarray(a.astype(np.uint8), "L"))
    return im


cases = []


def ref(name, data, exact, scales=(1,)):
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    for s in scales:
        im = Image.open(io.BytesIO(data))
        if min(im.size) < s:  # draft() needs a requested size of at least 1
            continue
        if s > 1:
            im.draft(im.mode if im.mode in ("L",) else "RGB", (im.size[0] // s, im.size[1] // s))
        im = ImageOps.exif_transpose(im).convert("RGB")
        a = np.asarray(im, dtype=np.uint8)
        a.tofile(os.path.join(out, f"{name}.{s}.rgb"))
        cases.append(f"{name} {s} {a.shape[1]} {a.shape[0]} {int(exact)}")


def save(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


# ---- JPEG ----
scaled = (1, 2, 4, 8)
for i, (w, h) in enumerate([(64, 48), (37, 23), (101, 77), (1, 1), (17, 250)]):
    im = photo(w, h)
    ref(f"j420_{i}.jpg", save(im, "JPEG", quality=85, subsampling=2), 0, scaled)
    ref(f"j444_{i}.jpg", save(im, "JPEG", quality=92, subsampling=0), 0, scaled)
    ref(f"j422_{i}.jpg", save(im, "JPEG", quality=75, subsampling=1), 0)
    ref(f"jprog_{i}.jpg", save(im, "JPEG", quality=80, progressive=True), 0, scaled)
    ref(f"jgray_{i}.jpg", save(im.convert("L"), "JPEG", quality=88), 0, scaled)
for i, (w, h) in enumerate([(45, 31), (64, 64)]):  # CMYK (Pillow writes Adobe-inverted CMYK)
    ref(f"jcmyk_{i}.jpg", save(photo(w, h).convert("CMYK"), "JPEG", quality=85), 0, (1, 2, 4))
ref("jrestart.jpg", save(photo(90, 70), "JPEG", quality=70, restart_marker_blocks=2), 0)
for o in range(1, 9):
    ex = Image.Exif()
    ex[0x0112] = o
    ref(f"jexif{o}.jpg", save(photo(45, 29), "JPEG", quality=90, exif=ex.tobytes()), 0, (1, 2))

# ---- PNG ----
for i, (w, h) in enumerate([(40, 30), (33, 17), (1, 1)]):
    im = photo(w, h)
    ref(f"p_rgb_{i}.png", save(im, "PNG"), 1)
    ref(f"p_rgba_{i}.png", save(photo(w, h, 4), "PNG"), 1)
    ref(f"p_gray_{i}.png", save(im.convert("L"), "PNG"), 1)
    ref(f"p_la_{i}.png", save(photo(w, h, 4).convert("LA"), "PNG"), 1)
    ref(f"p_pal_{i}.png", save(im.quantize(37), "PNG"), 1)
    ref(f"p_palt_{i}.png", save(im.quantize(16), "PNG", transparency=3), 1)
    ref(f"p_bit1_{i}.png", save(im.convert("1"), "PNG"), 1)
    g16 = (np.asarray(im.convert("L"), np.uint16) * 3).astype(np.uint16)
    g16[0, 0] = 200  # some values below 256: Pillow clips, so not all of them become 255
    ref(f"p_gray16_{i}.png", save(Image.fromarray(g16), "PNG"), 1)


def png16(w, h, ct, nc):
    """16-bit RGB / RGBA PNG written by hand (Pillow does not write them)."""
    a = rng.integers(0, 65536, (h, w, nc), dtype=np.uint16)
    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, ct, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


ref("p_rgb16.png", png16(21, 13, 2, 3), 1)
ref("p_rgba16.png", png16(19, 11, 6, 4), 1)

# ---- WebP ----
for i, (w, h) in enumerate([(48, 32), (31, 19)]):
    ref(f"w_ll_{i}.webp", save(photo(w, h), "WEBP", lossless=True), 1)
    ref(f"w_lla_{i}.webp", save(photo(w, h, 4), "WEBP", lossless=True, exact=True), 1)
    ref(f"w_lossy_{i}.webp", save(photo(w, h), "WEBP", quality=80), 0)
    ref(f"w_lossya_{i}.webp", save(photo(w, h, 4), "WEBP", quality=80), 0)

with open(os.path.join(out, "cases.txt"), "w") as f:
    f.write("\n".join(cases) + "\n")
print(f"ref_image_codec: {len(cases)} references")
