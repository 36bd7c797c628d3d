"""References for dtrain's image transforms (src/data/image_transform.h) from torchvision and
Pillow (PyPI, the project's virtual environment), on images generated here.

usage: ref_imgaug.py OUT_DIR
Writes OUT_DIR/imgaug.safetensors:
  img{k}                f32 [H, W, 3]   the test images (integer values 0..255)
  rrc{c}.meta           i32 [5]         replay case: img_w, img_h, n calls, scale/ratio set index
  rrc{c}.uni            f32 [n, 20]     the uniforms each get_params call drew (NaN padded)
  rrc{c}.int            i32 [n, 2]      its two randint results (-1 when the fallback was taken)
  rrc{c}.box            i32 [n, 4]      its result (top, left, height, width)
  rrcp                  f32 [P, 4]      scale_lo, scale_hi, ratio_lo, ratio_hi of each set
  stat{s}.meta          i32 [2]         img_w, img_h
  stat{s}.area, .logr   f32 [N]         box area fraction and log(w / h) of N boxes (torch RNG)
  stat{s}.fallback      i32 [N]         1 where get_params took the centre-crop fallback
  rc{n}.meta            i32 [6]         image k, top, left, height, width, output size
  rc{n}.out             f32 [S, S, 3]   F.resized_crop(PIL, ..., BILINEAR)
  ev{k}.out             f32 [224, 224, 3]  Resize(256) + CenterCrop(224) of img{k}
  ev{k}.norm            f32 [3, 224, 224]  the same + ToTensor + Normalize(ImageNet)
  norm.in               f32 [H, W, 3]   pixels; norm.mean, norm.std f32 [3]
  norm.out, norm.flip   f32 [3, H, W]   ToTensor + Normalize, without / with hflip first
  jit{j}.meta           f32 [5]         image k, op (0 brightness, 1 contrast, 2 saturation,
                                        -1 a sequence), factor (or -1)
  jit{j}.seq            f32 [3, 2]      for op -1: (op, factor) rows applied in order
  jit{j}.out            f32 [H, W, 3]
  pil.vfirst            i32 [1]         1 when this Pillow runs the vertical pass first for tall
                                        reductions (Pillow 13), as dtrain does
"""
import math
import os
import sys

import numpy as np
import torch
import torchvision.transforms as T
import torchvision.transforms.functional as F
import torchvision.transforms.transforms as TT
from PIL import Image

import reflib


def make_image(w, h, seed):
    """Smooth gradients + a few edges + noise, uint8 [h, w, 3]: exercises every weight."""
    r = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, 3))
    for c in range(3):
        fx, fy = r.uniform(0.5, 6, 2)
        img[..., c] = 127 + 90 * np.sin(2 * math.pi * (fx * x / w + fy * y / h + c))
    img[(x // 7 + y // 5) % 9 == 0] = 255
    img[(x + 2 * y) % 31 < 2] = 0
    img += r.normal(0, 12, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


class Recorder:
    """Stands in for the torch module inside torchvision.transforms.transforms while
    RandomResizedCrop.get_params runs: draws still come from torch's RNG, and are recorded."""

    log, tensor, exp = torch.log, torch.tensor, torch.exp

    def __init__(self):
        self.uni, self.ints = [], []

    def empty(self, *a, **k):
        return self  # get_params calls empty(1).uniform_(lo, hi)

    def uniform_(self, lo, hi):
        t = torch.empty(1).uniform_(lo, hi)
        self.uni.append(t.item())
        return t

    def randint(self, lo, hi, size):
        t = torch.randint(lo, hi, size=size)
        self.ints.append(t.item())
        return t


def get_params_recorded(w, h, scale, ratio):
    rec = Recorder()
    saved = TT.torch
    TT.torch = rec
    try:
        box = T.RandomResizedCrop.get_params(Image.new("RGB", (w, h)), list(scale), list(ratio))
    finally:
        TT.torch = saved
    return box, rec


def main():
    out = reflib.out_dir()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    t = {}
    sizes = [(500, 375), (100, 1000), (224, 224), (37, 53), (1000, 90)]
    imgs = [make_image(w, h, 10 + k) for k, (w, h) in enumerate(sizes)]
    for k, im in enumerate(imgs):
        t[f"img{k}"] = im.astype(np.float32)
    pils = [Image.fromarray(im, "RGB") for im in imgs]

    # (a) Replay: the same draws must give the same box, including fallbacks.
    psets = [(0.08, 1.0, 3 / 4, 4 / 3), (0.5, 1.0, 0.2, 0.4), (0.9, 1.0, 2.0, 5.0), (0.01, 0.05, 1.0, 1.0)]
    t["rrcp"] = np.array(psets, np.float32)
    case = 0
    for w, h in [(500, 375), (100, 1000), (224, 224), (1000, 90), (3, 2)]:
        for pi, p in enumerate(psets):
            n = 300
            uni = np.full((n, 20), np.nan, np.float32)
            ints = np.full((n, 2), -1, np.int32)
            boxes = np.zeros((n, 4), np.int32)
            for i in range(n):
                box, rec = get_params_recorded(w, h, p[:2], p[2:])
                uni[i, : len(rec.uni)] = rec.uni
                ints[i, : len(rec.ints)] = rec.ints
                boxes[i] = box
            t[f"rrc{case}.meta"] = np.array([w, h, n, pi, 0], np.int32)
            t[f"rrc{case}.uni"], t[f"rrc{case}.int"], t[f"rrc{case}.box"] = uni, ints, boxes
            case += 1

    # (b) Statistics of torchvision's boxes with the default parameters.
    N = 20000
    for s, (w, h) in enumerate([(500, 375), (100, 1000), (224, 224)]):
        area = np.empty(N, np.float32)
        logr = np.empty(N, np.float32)
        fb = np.empty(N, np.int32)
        for i in range(N):
            (top, left, bh, bw), rec = get_params_recorded(w, h, (0.08, 1.0), (3 / 4, 4 / 3))
            area[i] = bh * bw / (w * h)
            logr[i] = math.log(bw / bh)
            fb[i] = 0 if rec.ints else 1  # no randint: the centre-crop fallback
        t[f"stat{s}.meta"] = np.array([w, h], np.int32)
        t[f"stat{s}.area"], t[f"stat{s}.logr"], t[f"stat{s}.fallback"] = area, logr, fb

    # Resize of crop boxes: down, up, odd sizes, whole image, one-pixel boxes.
    rcs = [(0, 0, 0, 375, 500, 224), (0, 10, 7, 300, 421, 224), (0, 200, 300, 20, 31, 224),
           (0, 1, 2, 373, 497, 97), (1, 0, 0, 1000, 100, 224), (1, 500, 10, 120, 80, 61),
           (2, 0, 0, 224, 224, 224), (2, 5, 9, 200, 150, 224), (3, 0, 0, 53, 37, 224),
           (3, 4, 3, 1, 1, 5), (4, 0, 0, 90, 1000, 128), (4, 11, 333, 79, 333, 224),
           (2, 17, 3, 150, 200, 300),
           # Pillow 13 resizes vertically first when the height shrinks by more than twice as
           # many pixels as the width: at the boundary (horizontal first) and one past it
           (0, 20, 30, 250, 150, 100), (0, 20, 30, 251, 150, 100)]
    # and torchvision's own random boxes (every filter width, boxes at the image edges)
    for k in (0, 1, 2):
        for _ in range(10):
            top, left, bh, bw = T.RandomResizedCrop.get_params(pils[k], [0.08, 1.0], [3 / 4, 4 / 3])
            rcs.append((k, top, left, bh, bw, 112))
    for n, (k, top, left, bh, bw, sz) in enumerate(rcs):
        o = F.resized_crop(pils[k], top, left, bh, bw, [sz, sz], T.InterpolationMode.BILINEAR)
        t[f"rc{n}.meta"] = np.array([k, top, left, bh, bw, sz], np.int32)
        t[f"rc{n}.out"] = np.asarray(o, np.float32)

    ev = T.Compose([T.Resize(256), T.CenterCrop(224)])
    norm = T.Compose([T.ToTensor(), T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    for k, p in enumerate(pils):
        o = ev(p)
        t[f"ev{k}.out"] = np.asarray(o, np.float32)
        t[f"ev{k}.norm"] = norm(o)

    # ToTensor + Normalize, plain and after a horizontal flip, with non-default statistics.
    mean, std = [0.3, 0.5, 0.7], [0.2, 0.31, 0.27]
    nz = T.Compose([T.ToTensor(), T.Normalize(mean, std)])
    t["norm.in"] = imgs[3].astype(np.float32)
    t["norm.mean"], t["norm.std"] = np.array(mean, np.float32), np.array(std, np.float32)
    t["norm.out"] = nz(pils[3])
    t["norm.flip"] = nz(F.hflip(pils[3]))

    # adjust_* with given factors, and sequences as ColorJitter applies them.
    fns = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation]
    j = 0
    for k in (3, 2):
        for op in range(3):
            for f in (0.0, 0.37, 0.6, 0.999, 1.0, 1.25, 1.4, 2.3) if k == 3 else (0.37, 1.4, 2.3):
                o = fns[op](pils[k], f)
                t[f"jit{j}.meta"] = np.array([k, op, f, 0, 0], np.float32)
                t[f"jit{j}.out"] = np.asarray(o, np.float32)
                j += 1
        for seq in ([(1, 1.3), (0, 0.7), (2, 1.4)], [(2, 0.6), (1, 0.65), (0, 1.35)]):
            o = pils[k]
            for op, f in seq:
                o = fns[op](o, f)
            t[f"jit{j}.meta"] = np.array([k, -1, -1, 0, 0], np.float32)
            t[f"jit{j}.seq"] = np.array(seq, np.float32)
            t[f"jit{j}.out"] = np.asarray(o, np.float32)
            j += 1

    # Pillow 13 resizes vertically first when the height shrinks by more than twice as many
    # pixels as the width (dtrain follows it); older Pillow always goes horizontally first.
    probe = Image.fromarray(make_image(100, 1000, 3), "RGB")
    full = np.asarray(probe.resize((224, 224), Image.BILINEAR))
    vfirst = np.asarray(probe.resize((100, 224), Image.BILINEAR).resize((224, 224), Image.BILINEAR))
    t["pil.vfirst"] = np.array([int(np.array_equal(full, vfirst))], np.int32)

    reflib.save(os.path.join(out, "imgaug.safetensors"), t)
    print(f"ref_imgaug: {len(imgs)} images, {case} replay sets, {len(rcs)} crops, {j} jitters")


if __name__ == "__main__":
    sys.exit(main())
