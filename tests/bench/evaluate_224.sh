#!/bin/sh
# `make evaluate EVAL_IMAGE=224` at a tiny size: scripts/evaluate.py --image 224 --only formations
# with ResNet-18, 8-image slices of batch 2 (about 2 minutes on 2 cores). Checks that the runs
# trained on the imported photos at 224x224, that each formation's throughput is the mean of the
# experiment store's samples_per_s after the first interval (not the log's whole img/s), and that
# the loading column holds bench_loader's figure.
#   evaluate_224.sh REPO_ROOT BUILD_DIR     exit 77 (skipped) without mpirun or Pillow in the venv
set -eu
root=$1
build=$2
py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
command -v mpirun >/dev/null 2>&1 || { echo "evaluate_224.sh: no mpirun; skipped"; exit 77; }
"$py" -c 'import PIL, numpy' 2>/dev/null || { echo "evaluate_224.sh: no Pillow at $py; skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$root/scripts/evaluate.py" --build "$build" --image 224 --depth 18 --images 8 --batch 2 \
  --only formations --work "$tmp/w"
grep -q "images: 256 images" "$tmp/w/logs/f1x1.log" || { echo "FAIL: f1x1 did not train on the photos" >&2; exit 1; }
params=$("$build/dtrain" runs show evaluate-resnet/f1x1 --db "$tmp/w/runs/dtrain.db")
for want in "data.image_size +224$" "model.small_stem +false$" "data.train +$tmp/w/photos-ds/train$"; do
  echo "$params" | grep -Eq "^ +$want" || { echo "FAIL: the run's params lack '$want'" >&2; exit 1; }
done
python3 - "$tmp/w" <<'PY'
import csv, json, os, sys
w = sys.argv[1]
r = json.load(open(os.path.join(w, "evaluation.json")))
F = r["formations"]
for k in ("1x1", "1x2"):
    assert k in F, f"formation {k} missing"
    rows = [x for x in csv.DictReader(open(os.path.join(w, f"metrics-f{k}.csv")))
            if x["key"] == "samples_per_s"]
    rates = [float(x["value"]) for x in sorted(rows, key=lambda x: int(x["step"]))][1:]
    want = sum(rates) / len(rates)
    assert abs(F[k]["img_per_s"] - want) <= 1e-9 * want, (k, F[k]["img_per_s"], want)
    assert F[k]["loader"] > 0, f"{k}: no bench_loader figure"
    assert 0 <= F[k]["data_wait_pct"] <= 100, F[k]["data_wait_pct"]
    print(f"evaluate_224.sh: {k} {F[k]['img_per_s']:.3f} img/s (store), loader {F[k]['loader']:.0f}/s")
PY
echo "evaluate_224.sh: ok"
