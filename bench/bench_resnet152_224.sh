#!/usr/bin/env bash
# Does the photo pipeline keep ResNet-152 at 224x224 fed? Writes bench/gen_photos.py's 256 JPEGs
# (500x375 .. 1024x768, 4 classes), imports them (`dtrain data import images`: the encoded
# files), then trains examples/resnet152-imagenet.yaml (stock 7x7 stem, RandomResizedCrop(224) +
# flip + normalise, DCT-scaled decoding, decoded in the loader's prefetch threads) for a few
# steps with the default prefetch threads (data.workers 1) and prints, per logged interval, the
# step time beside the share of it the trainer waited for data (target: under 2%).
# One run, about 2-4 minutes on 2 cores (the first interval pays for oneDNN's primitive creation).
#   bash bench/bench_resnet152_224.sh [BUILD_DIR=build] [STEPS=16]
# Environment: BATCH (per worker, default 8), WORKERS (data.workers, default 1), DT_VENV.
set -euo pipefail
. "$(dirname "$0")/header.inc"
bench_header
build=${1:-build}
steps=${2:-16}
batch=${BATCH:-8}
workers=${WORKERS:-1}
repo=$(cd "$(dirname "$0")/.." && pwd)
py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
[ -x "$build/dtrain" ] || { echo "bench_resnet152_224.sh: build first" >&2; exit 2; }
[ -x "$py" ] || { echo "bench_resnet152_224.sh: no virtual environment at $py (set DT_VENV)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_photos "$build" "$py" "$tmp"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/dtrain" train \
  "$repo/examples/resnet152-imagenet.yaml" data.train="$tmp/ds/train" data.val= \
  data.batch="$batch" data.workers="$workers" model.num_classes=4 train.epochs=0 \
  train.steps="$steps" train.log_every=4 schedule.warmup_steps=0 train.progress=off \
  ckpt.every_steps=0 ckpt.every_minutes=0 output.dir="$tmp/runs" output.run_name=bench \
  output.export=false |
  tee "$tmp/log"
# The step lines round img/s to whole images; the experiment store keeps the exact figures
# (samples_per_s and data_wait, a fraction, per logged interval). Step time = batch / samples_per_s.
"$build/dtrain" runs export resnet152-imagenet/bench --format csv --db "$tmp/runs/dtrain.db" \
  -o "$tmp/metrics.csv"
echo "ResNet-152 224x224, batch $batch, data.workers $workers, per 4-step interval (target < 2%):"
awk -F, -v b="$batch" '$1 == "samples_per_s" { s[$2] = $4 } $1 == "data_wait" { w[$2] = $4; o[++n] = $2 }
  END { for (i = 1; i <= n; i++) {
          k = o[i]; printf "  steps to %3d  step time %6.2f s  data-wait %.2f%%\n", k, b / s[k], 100 * w[k]
          if (i > 1) { t += b / s[k]; d += w[k] * b / s[k]; m++ } }
        if (m) printf "after the first interval (start-up): step time %.2f s, data-wait %.2f%%\n", t / m, 100 * d / t }' \
  "$tmp/metrics.csv"
