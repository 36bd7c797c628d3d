"""Writes the loader benchmarks' photos: 256 JPEGs (500x375 .. 1024x768, quality 90, gradients
plus noise: ~150 kB each) in 4 class folders of DIR (an ImageFolder).
Usage: python bench/gen_photos.py DIR [N]   (N: the first N of the 256, for small tests)"""
import os
import sys

import numpy as np
from PIL import Image

rng = np.random.default_rng(1)
sizes = [(500, 375), (640, 480), (800, 600), (1024, 768), (375, 500)]
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 256):
    d = os.path.join(sys.argv[1], f"c{i % 4}")
    os.makedirs(d, exist_ok=True)
    w, h = sizes[i % len(sizes)]
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // w, y * 255 // h, (x * y // 97) % 256], -1) + rng.integers(0, 40, (h, w, 3))
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(os.path.join(d, f"{i}.jpg"), quality=90)
