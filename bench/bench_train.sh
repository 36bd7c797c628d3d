#!/usr/bin/env bash
# Does the loader keep up? Trains the ResNet-18 Fashion-MNIST example (full width, augmentation,
# the configured prefetch threads) for a few dozen steps and prints the share of step time the
# trainer waited for data (target: under 2%), plus throughput.
#   bash bench/bench_train.sh [BUILD_DIR] [STEPS]
set -euo pipefail
. "$(dirname "$0")/header.inc"
bench_header
build=${1:-build}
steps=${2:-60}
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$build/dtrain" data import fashion-mnist /usr/share/datasets/fashion-mnist -o "$tmp/fm" -q
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$build/dtrain" train \
  "$repo/examples/resnet18-fmnist.yaml" data.train="$tmp/fm/train" data.val= \
  train.steps="$steps" train.log_every=20 schedule.warmup_steps=0 output.dir="$tmp/runs" output.export=false \
  ckpt.every_steps=0 | tee "$tmp/log"
echo "data-wait share per 20-step interval (target < 2%):" \
  $(grep -o 'data-wait [0-9.]*%' "$tmp/log" | awk '{print $2}')
