#!/usr/bin/env bash
# `make demo`: a real small distributed training job on the embedded defaults -- ResNet-18
# (width 8) on Fashion-MNIST (Debian's dataset-fashion-mnist) over 2 MPI ranks, with
# asynchronous checkpoints every 50 steps, then a resume from the last one.
#   scripts/demo.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${DEMO_DIR:-$repo/demo-out}
dtrain="$build/dtrain"
mkdir -p "$out"
if [ ! -f "$out/fmnist/train/manifest.json" ]; then
  "$dtrain" data import fashion-mnist /usr/share/datasets/fashion-mnist -o "$out/fmnist" -q
fi
np=2
launch=(mpirun --oversubscribe --bind-to none -np "$np")
[ "$(id -u)" = 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np")
command -v mpirun >/dev/null || { echo "demo: mpirun not found; running one process"; launch=(); }
args=("$repo/examples/resnet18-fmnist.yaml" data.train="$out/fmnist/train" data.val="$out/fmnist/test"
      model.width=8 data.batch=64 data.augment=false train.steps=150 train.log_every=25
      schedule.warmup_steps=20 train.threads=1 ckpt.every_steps=50 output.dir="$out/runs"
      output.run_name=demo ckpt.resume=never)
echo "== training on $np ranks: $(basename "${args[0]}") width 8, 150 steps, checkpoints every 50"
OMP_NUM_THREADS=1 "${launch[@]}" "$dtrain" train "${args[@]}"
echo
echo "== the checkpoints (trainer_state.json written last, every file checksummed):"
ls "$out/runs/resnet18-fmnist/demo/checkpoints"
echo
echo "== resuming the same run for 50 more steps from its newest checkpoint"
args=("${args[@]/train.steps=150/train.steps=200}")
args=("${args[@]/ckpt.resume=never/ckpt.resume=auto}")
OMP_NUM_THREADS=1 "${launch[@]}" "$dtrain" train "${args[@]}" | grep -v "^step"
echo
echo "demo done: run directory $out/runs/resnet18-fmnist/demo (config.yaml, run.json, model.safetensors, checkpoints/)"
