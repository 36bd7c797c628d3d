#!/usr/bin/env bash
# `dtrain data import images` end to end, checked against torchvision.datasets.ImageFolder (the
# venv's; exit 77 when it has none): an ImageFolder with four classes, mixed formats (some with
# the wrong extension), a nested folder, a corrupt, a truncated and a text file named .jpg and a
# .txt file. The labels and class_to_idx equal ImageFolder's, the stored bytes the files; the
# three bad files are listed and skipped (the .txt too); --strict refuses and leaves no output;
# the dataset verifies and is byte-identical for 1 and 2 threads; --val, a train/val folder
# layout, a CSV list with class names, --max-side re-encoding; inspect shows the kind.
#   import_images.sh DTRAIN SRC_DIR WORK_DIR
set -euo pipefail
dtrain=$1 src=$2 work=$3/import_images
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
if ! "$py" -c 'import torchvision, PIL, numpy' 2>/dev/null; then
    echo "skipped: no torchvision for $py (scripts/setup-venv.sh installs it)"
    exit 77
fi
helper=$src/tests/data/import_images.py
rm -rf "$work" && mkdir -p "$work"
"$py" "$helper" make "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
bad=corrupt.jpg,truncated.jpg,readme.jpg,notes.txt

# the folder, 1 and 2 threads
"$dtrain" data import images "$work/folder" -o "$work/t1" --threads 1 2>"$work/t1.err" \
    || fail "import: $(cat "$work/t1.err")"
"$dtrain" data import images "$work/folder" -o "$work/t2" --threads 2 -q 2>"$work/t2.err" \
    || fail "import (2 threads)"
grep -q "import images: train: 24 images (4 classes); skipped 2 bad images and 2 other files" \
    "$work/t1.err" || fail "no summary line: $(cat "$work/t1.err")"
grep -q "corrupt.jpg: jpeg: " "$work/t1.err" || fail "corrupt.jpg's reason: $(cat "$work/t1.err")"
grep -q "skipped .*truncated.jpg: jpeg: " "$work/t1.err" || fail "truncated.jpg not listed"
grep -q "skipped .*readme.jpg: not a JPEG, PNG or WebP file" "$work/t1.err" || fail "readme.jpg"
# quiet: no progress or summary, but the skipped files are still listed
[ "$(grep -c skipped "$work/t2.err")" = 4 ] && ! grep -q "train: 24" "$work/t2.err" \
    || fail "quiet: $(cat "$work/t2.err")"
for f in "$work"/t1/train/*; do
    cmp "$f" "$work/t2/train/$(basename "$f")" || fail "$f differs between 1 and 2 threads"
done
"$dtrain" data verify "$work/t1" | grep -q "OK" || fail "verify"
"$dtrain" data inspect "$work/t1/train" >"$work/inspect.txt"
grep -q "encoded-image" "$work/inspect.txt" && grep -q "0=Zebra:" "$work/inspect.txt" \
    || fail "inspect: $(cat "$work/inspect.txt")"

# --strict: refused, naming the file, nothing left behind
if "$dtrain" data import images "$work/folder" -o "$work/strict" --strict 2>"$work/strict.err"; then
    fail "--strict imported a folder with corrupt images"
fi
grep -q "corrupt.jpg: jpeg: .*--strict" "$work/strict.err" || fail "strict: $(cat "$work/strict.err")"
[ ! -e "$work/strict" ] || fail "--strict left $work/strict"
ls "$work" | grep -q "strict.tmp" && fail "--strict left a temporary folder"

# --val: every good image in train or val, none in both
"$dtrain" data import images "$work/folder" -o "$work/v" --val 0.25 --seed 3 -q 2>/dev/null
nt=$("$dtrain" data inspect "$work/v/train" | awk '$1 == "images" {print $2}')
nv=$("$dtrain" data inspect "$work/v/val" | awk '$1 == "images" {print $2}')
# (7 of the 28 files drawn for val, bad ones among them skipped)
[ $((nt + nv)) = 24 ] && [ "$nv" -ge 3 ] && [ "$nv" -le 7 ] \
    || fail "--val 0.25: train $nt, val $nv (want 24 in all, 3-7 in val)"

# train/ + val/ folders: val labelled by train's classes, as ImageFolder on each folder
"$dtrain" data import images "$work/splits" -o "$work/s" -q 2>"$work/s.err"

# a CSV list (paths relative to it, class names as labels)
"$dtrain" data import images --list "$work/list.csv" -o "$work/l" -q
"$dtrain" data inspect "$work/l/train" | grep -q "labels  *0=kitten:3 1=puppy:3" \
    || fail "list: $("$dtrain" data inspect "$work/l/train")"

# --max-side: larger images re-encoded as JPEG with that longer side
"$dtrain" data import images "$work/folder" -o "$work/m" --max-side 32 -q 2>"$work/m.err"
"$py" "$helper" check "$work/folder" "$work/t1/train" "$work/t1.err" 0 "$bad" \
    "$work/splits/train" "$work/s/train" "$work/s.err" 0 - \
    "$work/splits/val" "$work/s/val" "$work/s.err" 0 - \
    "$work/folder" "$work/m/train" "$work/m.err" 32 "$bad"
echo "import_images: all checks passed"
