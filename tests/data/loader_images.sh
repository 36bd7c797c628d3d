#!/usr/bin/env bash
# Encoded photos through the loader, end to end (the venv's Pillow + torchvision; exit 77 without
# them): a generated photo folder (JPEG baseline/progressive/4:4:4/EXIF-rotated, PNG, WebP) is
# imported; the loader's batches for train, train with DCT scaling, eval and eval with DCT
# scaling equal torchvision's pipeline on the same boxes (tests/data/loader_images.py); a tiny
# ResNet-18 (examples/resnet-photos-tiny.yaml: RandomResizedCrop 64 + flip + jitter, label
# smoothing) trains 6 steps with checkpoints, and a run resumed at step 3 logs the same losses
# and ends with the same weights, bit for bit.
#   loader_images.sh DTRAIN TEST_LOADER_IMAGES REPO WORK_DIR
set -euo pipefail
dtrain=$1 dumper=$2 repo=$3 work=$4/loader_images
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
if ! "$py" -c 'import PIL, numpy' 2>/dev/null || [ ! -d "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torchvision" ]; then
    echo "skipped: no torchvision for $py (scripts/setup-venv.sh installs it)"
    exit 77
fi
fail() { echo "FAIL: $*" >&2; exit 1; }
helper=$repo/tests/data/loader_images.py
rm -rf "$work" && mkdir -p "$work"
"$py" "$helper" make "$work"
"$dtrain" data import images "$work/photos" -o "$work/ds" -q
pairs=()
for m in train train-dct eval eval-dct; do
    "$dumper" dump "$work/ds/train" "$work/$m.bin" "$m" 64 6 || fail "dump $m"
    pairs+=("$work/$m.bin" "$m")
done
"$py" "$helper" check "$work/photos" 64 "${pairs[@]}" || fail "batches differ from torchvision's"

args=("$repo/examples/resnet-photos-tiny.yaml" data.train="$work/ds/train"
      output.dir="$work/runs" train.progress=off)
"$dtrain" train "${args[@]}" output.run_name=full >"$work/full.log" 2>&1 || fail "train: $(tail -3 "$work/full.log")"
ck=$work/runs/photos-tiny/full/checkpoints
[ -d "$ck/step-000000003" ] || fail "no step-3 checkpoint: $(ls "$ck")"
"$dtrain" train "${args[@]}" output.run_name=resumed ckpt.resume="$ck/step-000000003" \
    >"$work/resumed.log" 2>&1 || fail "resume: $(tail -3 "$work/resumed.log")"
losses() { grep -E '^step +[456]/6' "$1" | awk '{print $2, $6}'; }
[ "$(losses "$work/full.log" | wc -l)" = 3 ] || fail "full run: no steps 4-6 in $(cat "$work/full.log")"
[ "$(losses "$work/full.log")" = "$(losses "$work/resumed.log")" ] \
    || fail "resumed losses differ: $(losses "$work/full.log") vs $(losses "$work/resumed.log")"
rk=$work/runs/photos-tiny/resumed/checkpoints/step-000000006
cmp "$ck/step-000000006/model.safetensors" "$rk/model.safetensors" \
    || fail "the resumed run's step-6 weights differ"
echo "loader_images: all checks passed ($(losses "$work/resumed.log" | tr '\n' ' '))"
