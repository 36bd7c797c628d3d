"""Images per second of torchvision's transforms on PIL images (single thread), on the images
bench_transform --write stored: the same three pipelines as bench_transform.c.

usage: bench_transform.py IMAGES_FILE [SECONDS]"""
import struct
import sys
import time

import numpy as np
import torch
import torchvision.transforms as T
from PIL import Image

torch.set_num_threads(1)
path = sys.argv[1]
seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
imgs = []
with open(path, "rb") as f:
    (n,) = struct.unpack("<i", f.read(4))
    for _ in range(n):
        w, h = struct.unpack("<2i", f.read(8))
        a = np.frombuffer(f.read(w * h * 3), np.uint8).reshape(h, w, 3)
        imgs.append(Image.fromarray(a, "RGB"))
norm = [T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]
pipes = [
    ("RRC(224)+flip+normalize", T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip()] + norm)),
    ("RRC(224)+flip+ColorJitter+normalize",
     T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4, 0.4)] + norm)),
    ("Resize(256)+CenterCrop(224)+normalize", T.Compose([T.Resize(256), T.CenterCrop(224)] + norm)),
]
for name, p in pipes:
    k, t0, c0 = 0, time.perf_counter(), time.thread_time()
    while True:
        for im in imgs:
            p(im)
            k += 1
        t = time.perf_counter() - t0
        if t >= seconds:
            break
    c = time.thread_time() - c0
    print(f"torchvision {name:<38} {k / t:6.0f} images/s, {k / c:6.0f} per CPU second ({k} images, 1 thread, PIL)")
