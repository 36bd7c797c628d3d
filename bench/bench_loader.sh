#!/bin/sh
# Loader throughput per core on encoded JPEGs: dtrain's loader (decode + RandomResizedCrop(224)
# + flip + normalise into f32 batches, 1 prefetch thread, with and without DCT-scaled decoding)
# beside torchvision's DataLoader (ImageFolder + Pillow, the same transforms, 1 worker process)
# on the same 256 generated photos (500x375 .. 1024x768 JPEGs, quality 90), and raw libjpeg-turbo
# (each JPEG decoded whole, 1 thread, nothing else) on the same files. Prints the ratios.
# About 40 s. Usage: bench/bench_loader.sh [BUILD_DIR=build]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
SECS=${BENCH_LOADER_SECONDS:-8}
[ -x "$BUILD/bench/bench_loader" ] || { echo "bench_loader.sh: build first" >&2; exit 2; }
[ -x "$PY" ] || { echo "bench_loader.sh: no virtual environment at $PY (set DT_VENV)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" - "$TMP/photos" <<'PYEOF'
import os, sys
import numpy as np
from PIL import Image
rng = np.random.default_rng(1)
sizes = [(500, 375), (640, 480), (800, 600), (1024, 768), (375, 500)]
for i in range(256):
    d = os.path.join(sys.argv[1], f"c{i % 4}")
    os.makedirs(d, exist_ok=True)
    w, h = sizes[i % len(sizes)]
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // w, y * 255 // h, (x * y // 97) % 256], -1) + rng.integers(0, 40, (h, w, 3))
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(os.path.join(d, f"{i}.jpg"), quality=90)
PYEOF
"$BUILD/dtrain" data import images "$TMP/photos" -o "$TMP/ds" -q
OMP_NUM_THREADS=1 "$BUILD/bench/bench_loader" "$TMP/ds/train" 1 "$SECS" | tee "$TMP/dt.txt"
OMP_NUM_THREADS=1 "$PY" "$ROOT/bench/bench_loader.py" "$TMP/photos" 1 "$SECS" | tee "$TMP/tv.txt"
tv=$(awk '{print $(NF-1)}' "$TMP/tv.txt")
raw=$(awk '/^raw libjpeg-turbo/ {print $(NF-1)}' "$TMP/dt.txt")
awk -v tv="$tv" -v raw="$raw" '/^dtrain loader/ { sub(",", "", $4); printf "ratio, dct_scaling %s: %.2fx torchvision per core, %.0f%% of raw libjpeg-turbo decode\n", $4, $(NF-1) / tv, 100 * $(NF-1) / raw }' "$TMP/dt.txt"
