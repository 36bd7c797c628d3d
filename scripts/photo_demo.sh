#!/usr/bin/env bash
# `make photo-demo`: photos end to end on generated images (well under 2 minutes):
#   1. writes a small ImageFolder of JPEG/PNG/WebP photos of varied sizes with Pillow from the
#      venv (tests/data/loader_images.py make: 3 classes, 24 images);
#   2. imports it (`dtrain data import images`: the encoded files, not pixels);
#   3. trains a tiny ResNet-18 (examples/resnet-photos-tiny.yaml: RandomResizedCrop 64 + flip +
#      jitter, decoded in the loader) on 2 MPI workers for 6 steps, checkpointing every 3.
#   scripts/photo_demo.sh [BUILD_DIR]
# Environment: PHOTO_DEMO_DIR (output, default demo-out/photos), PHOTO_DEMO_NP (2 workers),
# DT_VENV_PYTHON (the venv's python, default ~/.cache/dtrain/venv/bin/python).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
dtrain="$build/dtrain"
out=${PHOTO_DEMO_DIR:-$repo/demo-out/photos}
np=${PHOTO_DEMO_NP:-2}
py=${DT_VENV_PYTHON:-$HOME/.cache/dtrain/venv/bin/python}
"$py" -c 'import PIL, numpy' 2>/dev/null || { echo "photo-demo: no Pillow for $py (make venv)"; exit 1; }
rm -rf "$out" && mkdir -p "$out"
out=$(cd "$out" && pwd)
launch=(mpirun --oversubscribe --bind-to none -np "$np")
[ "$(id -u)" = 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np")
command -v mpirun >/dev/null || { echo "photo-demo: mpirun not found; one process"; launch=(); }
echo "== 1. generating photos in $out/photos"
"$py" "$repo/tests/data/loader_images.py" make "$out"
echo "== 2. importing"
"$dtrain" data import images "$out/photos" -o "$out/data"
echo "== 3. training on ${np} workers"
OMP_NUM_THREADS=1 "${launch[@]}" "$dtrain" train "$repo/examples/resnet-photos-tiny.yaml" \
    data.train="$out/data/train" output.dir="$out/runs" train.progress=off
ls "$out/runs/photos-tiny"/*/checkpoints
echo "photo-demo: done ($out)"
