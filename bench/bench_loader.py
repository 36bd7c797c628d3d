"""torchvision's DataLoader on the same photo folder as bench_loader: ImageFolder + Pillow,
RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, batch 32, W worker
processes, images/s over S seconds after one warm-up batch.
  bench_loader.py ROOT WORKERS SECONDS"""
import sys
import time

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

root, workers, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(1)
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = ImageFolder(root, transform=tf)
dl = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers,
                                 persistent_workers=workers > 0, drop_last=True)
n, t0, first = 0, None, True
while True:
    for x, y in dl:
        if first:
            first, t0 = False, time.perf_counter()
            continue
        n += x.shape[0]
        if time.perf_counter() - t0 >= secs:
            break
    if t0 is not None and time.perf_counter() - t0 >= secs:
        break
dt = time.perf_counter() - t0
print(f"torchvision DataLoader ({workers} worker{'s' if workers != 1 else ''}): {n / dt:.1f} images/s")
