"""PyTorch side of bench_conv: conv2d forward and forward+backward at ResNet-like shapes.

Run by bench/bench_conv.sh with Debian's PyTorch 1.13 (/usr/bin/python3) in the same
environment as bench_conv. The shape list must match SHAPES in bench/bench_conv.c.
Prints one line per shape: name fwd_ms fwdbwd_ms (medians).
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

# name, N, C, H, W, O, K, stride, pad  (same order and values as bench_conv.c)
SHAPES = [
    ("stem3x3_3-64_32", 0, 3, 32, 32, 64, 3, 1, 1),
    ("3x3_64_32", 0, 64, 32, 32, 64, 3, 1, 1),
    ("3x3_128_16", 0, 128, 16, 16, 128, 3, 1, 1),
    ("3x3_256_8", 0, 256, 8, 8, 256, 3, 1, 1),
    ("3x3_512_4", 0, 512, 4, 4, 512, 3, 1, 1),
    ("3x3s2_64-128_32", 0, 64, 32, 32, 128, 3, 2, 1),
    ("1x1_256-64_8", 0, 256, 8, 8, 64, 1, 1, 0),
    ("1x1_64-256_8", 0, 64, 8, 8, 256, 1, 1, 0),
    ("1x1s2_64-128_32", 0, 64, 32, 32, 128, 1, 2, 0),
]


def median_ms(fn, reps, warmup):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1e3 * statistics.median(ts)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    for name, _, c, h, w, o, k, s, pd in SHAPES:
        x = torch.randn(a.batch, c, h, w, requires_grad=True)
        wt = torch.randn(o, c, k, k, requires_grad=True)
        with torch.no_grad():
            gy = torch.randn_like(F.conv2d(x, wt, None, s, pd))

        def fwd():
            return F.conv2d(x, wt, None, s, pd)

        def fwdbwd():
            x.grad = None
            wt.grad = None
            F.conv2d(x, wt, None, s, pd).backward(gy)

        tf = median_ms(fwd, a.reps, a.warmup)
        tfb = median_ms(fwdbwd, a.reps, a.warmup)
        print(f"{name} {tf:.3f} {tfb:.3f}", flush=True)


if __name__ == "__main__":
    main()
