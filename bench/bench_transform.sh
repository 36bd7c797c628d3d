#!/bin/sh
# Image transforms: images/s of dtrain's per-image transforms (RandomResizedCrop(224) + flip +
# normalise, with and without ColorJitter, and Resize(256) + CenterCrop(224) + normalise) beside
# torchvision's on PIL images, single thread, on the same 32 decoded synthetic photos
# (333x500 .. 1024x768). About 20 s.
# Usage: bench/bench_transform.sh [BUILD_DIR=build]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
BIN="$BUILD/bench/bench_transform"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
[ -x "$BIN" ] || { echo "bench_transform.sh: $BIN not found; build first (cmake --build $BUILD)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OMP_NUM_THREADS=1 "$BIN" --write "$TMP/images.bin" --seconds 3
if [ -x "$PY" ]; then
  OMP_NUM_THREADS=1 "$PY" "$ROOT/bench/bench_transform.py" "$TMP/images.bin" 3
else
  echo "torchvision: no virtual environment at $PY (set DT_VENV); skipped"
fi
