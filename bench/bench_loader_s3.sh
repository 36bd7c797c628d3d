#!/bin/sh
# Loader throughput from S3 (a SeaweedFS gateway on this machine, tests/storage/seaweed.sh) vs
# the local copy of the same dataset (bench/bench_loader_s3.c), two datasets: 256 generated JPEG
# photos (500x375 .. 1024x768, ~150 kB; decode + RandomResizedCrop(224) + flip + normalise) and
# Fashion-MNIST's train split (47 MB of 28x28 pixels; normalise only: the fetch is all the
# work). The s3:// side reads with data.cache_mb=16 (BENCH_CACHE_MB), so blocks keep being fetched (the datasets
# are larger). BENCH_WINDOW_MB > 0: block-aware shuffling (data.shuffle_window_mb) on both
# sides. Prints samples/s of both and the ratio. About a minute.
# Usage: bench/bench_loader_s3.sh [BUILD_DIR=build]   (BENCH_LOADER_SECONDS, BENCH_THREADS,
#        BENCH_CACHE_MB, BENCH_WINDOW_MB)
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
SECS=${BENCH_LOADER_SECONDS:-8}
TH=${BENCH_THREADS:-2}
BIN=$BUILD/bench/bench_loader_s3
[ -x "$BIN" ] || { echo "bench_loader_s3.sh: $BIN not found; build first" >&2; exit 2; }
[ -x "$PY" ] || { echo "bench_loader_s3.sh: no virtual environment at $PY (set DT_VENV)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PY" "$ROOT/bench/gen_photos.py" "$TMP/photos"
"$BUILD/dtrain" data import images "$TMP/photos" -o "$TMP/photo" -q --shard-mb 16
"$BUILD/dtrain" data import fashion-mnist "${DT_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}" -o "$TMP/fm" -q
cat > "$TMP/run.sh" <<RUNEOF
set -e
"$BUILD/tests/s3_get" mkbucket "\$DT_S3_BUCKET" >/dev/null
for ds in photo/train fm/train; do
  for f in "$TMP/\$ds"/*; do
    "$BUILD/tests/s3_get" put "s3://\$DT_S3_BUCKET/\$ds" "\$(basename "\$f")" "\$f"
  done
  OMP_NUM_THREADS=1 "$BIN" "$TMP/\$ds" "s3://\$DT_S3_BUCKET/\$ds" $TH $SECS ${BENCH_CACHE_MB:-16} ${BENCH_WINDOW_MB:-0}
done
RUNEOF
bash "$ROOT/tests/storage/seaweed.sh" run -- bash "$TMP/run.sh"
