#!/bin/sh
# `make evaluate EVAL_IMAGE=224` at a tiny size: scripts/evaluate.py --image 224 --only
# formations,peers with ResNet-18, 8-image slices of batch 2 (about 3 minutes on 2 cores). Checks
# that the runs trained on the imported photos at 224x224, that each formation's throughput is the
# mean of the experiment store's samples_per_s after the first interval (not the log's whole
# img/s), and that the loading column holds bench_loader's figure. The peers
# (bench/peers/ray_resnet.py --photos): PyTorch DDP on 1 and 2 workers, and Ray Train with a
# killed worker where the venv has Ray (scripts/setup-ray.sh), else not run: each trained the
# same model as dtrain (the same parameter count) on the JPEGs at 224x224, its throughput is the
# median step after the first including the wait for the batch, and the page renders their rows.
#   evaluate_224.sh REPO_ROOT BUILD_DIR     exit 77 (skipped) without mpirun or Pillow in the venv
set -eu
root=$1
build=$2
py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
command -v mpirun >/dev/null 2>&1 || { echo "evaluate_224.sh: no mpirun; skipped"; exit 77; }
"$py" -c 'import PIL, numpy' 2>/dev/null || { echo "evaluate_224.sh: no Pillow at $py; skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peers=torch-1,torch-2
"$py" -c 'import ray.train.torch' 2>/dev/null && peers=$peers,ray-2 || echo "evaluate_224.sh: no Ray in the venv; ray-2 not run"
python3 "$root/scripts/evaluate.py" --build "$build" --image 224 --depth 18 --images 8 --batch 2 \
  --only formations,peers --peers "$peers" --work "$tmp/w"
grep -q "images: 256 images" "$tmp/w/logs/f1x1.log" || { echo "FAIL: f1x1 did not train on the photos" >&2; exit 1; }
params=$("$build/dtrain" runs show evaluate-resnet/f1x1 --db "$tmp/w/runs/dtrain.db")
for want in "data.image_size +224$" "model.small_stem +false$" "data.train +$tmp/w/photos-ds/train$"; do
  echo "$params" | grep -Eq "^ +$want" || { echo "FAIL: the run's params lack '$want'" >&2; exit 1; }
done
python3 - "$tmp/w" "$peers" <<'PY'
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
P = r["peers"]
want_keys = sys.argv[2].split(",")
assert sorted(P) == sorted(want_keys), (sorted(P), want_keys)
for k, p in P.items():
    nw = p["workers"]
    assert p["completed"] and p["error"] is None, (k, p["error"])
    assert p["input_shape"] == [2, 3, 224, 224], (k, p["input_shape"])
    assert "ImageFolder" in p["data"] and "256 images, 4 classes" in p["data"], (k, p["data"])
    assert "stock stem" in p["model"], (k, p["model"])
    assert p["params"] == r["params"], f"{k}: {p['params']} parameters, dtrain's model {r['params']}"
    assert all(s["steps"] == 8 // (2 * nw) for s in p["slices"]), (k, p["slices"])
    # throughput: rank 0's steps after each slice's first, each with the wait for its batch
    ev = [json.loads(l) for l in open(os.path.join(w, f"{k}.json.events.jsonl"))]
    st = sorted(a + b for e in ev if e["ev"] == "slice" and e["rank"] == 0
                for a, b in zip(e["step_s"][1:], e["wait_s"][1:]))
    med = st[len(st) // 2] if len(st) % 2 else (st[len(st) // 2 - 1] + st[len(st) // 2]) / 2
    assert abs(p["img_per_s"] - 2 * nw / med) <= 1e-3 * p["img_per_s"] + 2e-3, (k, p["img_per_s"], 2 * nw / med)
    if k == "ray-2":
        rec = p["recovery"]
        assert rec["resumed_at_slice"] == 1 and rec["recover_s"] > 0, rec
    print(f"evaluate_224.sh: peer {k} {p['img_per_s']:.3f} img/s, data-wait {p['data_wait_pct']}%")
PY
python3 "$root/scripts/evaluate.py" --build "$build" --image 224 --depth 18 --images 8 --batch 2 \
  --render-only --work "$tmp/w" --out "$tmp/page.md"
for k in $(echo "$peers" | tr , ' '); do
  grep -q "^| $k | " "$tmp/page.md" || { echo "FAIL: the page has no row for peer $k" >&2; exit 1; }
done
! grep -q "Fashion-MNIST" "$tmp/page.md" || { echo "FAIL: the 224 page mentions Fashion-MNIST" >&2; exit 1; }
echo "evaluate_224.sh: ok"
