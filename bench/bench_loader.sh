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
bench_photos "$BUILD" "$PY" "$TMP"
OMP_NUM_THREADS=1 "$BUILD/bench/bench_loader" "$TMP/ds/train" 1 "$SECS" | tee "$TMP/dt.txt"
OMP_NUM_THREADS=1 "$PY" "$ROOT/bench/bench_loader.py" "$TMP/photos" 1 "$SECS" | tee "$TMP/tv.txt"
tv=$(awk '{print $(NF-1)}' "$TMP/tv.txt")
raw=$(awk '/^raw libjpeg-turbo/ {print $(NF-1)}' "$TMP/dt.txt")
awk -v tv="$tv" -v raw="$raw" '/^dtrain loader/ { sub(",", "", $4); printf "ratio, dct_scaling %s: %.2fx torchvision per core, %.0f%% of raw libjpeg-turbo decode\n", $4, $(NF-1) / tv, 100 * $(NF-1) / raw }' "$TMP/dt.txt"
