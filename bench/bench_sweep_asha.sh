#!/usr/bin/env bash
# ASHA against the full grid on a real small workload (docs/tracking.md, "Sweeps"): the tiny
# Llama on the fortunes set, 27 trials = learning rate x warmup x weight decay (3 x 3 x 3), 90
# steps each (seq 64, batch 8), the metric the validation loss at the end of each segment.
#   grid  every trial trained to 90 steps (early_stopping none)
#   asha  the same 27 trials, ASHA with grace period 10 and reduction factor 4 (Ray's rungs
#         grace * rf^k below max_t: 10, 40; then 90); in the grid's order, or with SHUFFLE=1
#         in the permutation `shuffle: true` draws from SEED
# Compute is counted in training steps (the sum over trials of the step each one reached), which
# does not depend on the machine's load; wall time is printed beside it. The goal (issue text):
# ASHA's best validation loss within 2% of the grid's best for <= 1/3 of the grid's compute.
# A resumed ASHA segment continues bit for bit (the schedule is the 90-step one in every
# segment), so a trial ASHA trains to 90 steps reports exactly the grid's value for it.
#   bash bench/bench_sweep_asha.sh [BUILD_DIR=build] [DATA_DIR=BUILD_DIR/train-data]
# Environment: SLOTS (2), STEPS (90), GRACE (10), RF (4), SHUFFLE (0), SEED (0); KEEP=DIR keeps
# the sweeps' sweep.json (every trial's reports) there; GRID_BEST=LOSS GRID_STEPS=N skip the
# grid and compare with those figures of an earlier grid run (same code, data and CPU: a grid
# trial's loss does not depend on the sweep's order or load). About 5-8 minutes on 2 idle cores.
set -euo pipefail
build=${1:-build}
data=${2:-$build/train-data}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/header.inc"
bench_header
slots=${SLOTS:-2} steps=${STEPS:-90} grace=${GRACE:-10} rf=${RF:-4}
shuffle=false
[ "${SHUFFLE:-0}" = 1 ] && shuffle=true
sweeps="grid asha"
[ -n "${GRID_BEST:-}" ] && sweeps=asha
dtrain=$build/dtrain
[ -x "$dtrain" ] || { echo "bench_sweep_asha.sh: no $dtrain (build first)" >&2; exit 2; }
[ -d "$data/fortunes/val" ] || { echo "bench_sweep_asha.sh: no $data/fortunes/val (ctest -R import_fortunes)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000
spec() { # RULE-LINE
    cat <<EOS
base: $repo/examples/llama-tiny-fortunes.yaml
overrides:
  data.train: $(cd "$data" && pwd)/fortunes/train
  data.val: $(cd "$data" && pwd)/fortunes/val
  data.seq_len: 64
  data.batch: 8
  train.eval_every: 0
  output.dir: $tmp/runs
  output.export: false
parameters:
  optim.lr: [1.0e-3, 3.0e-3, 1.0e-2]
  schedule.warmup_steps: [0, 10, 30]
  optim.weight_decay: [0.0, 0.01, 0.1]
sampler: grid
max_steps: $steps
metric: val_loss
mode: min
$1
EOS
}
spec "early_stopping: {rule: none}" > "$tmp/grid.yaml"
spec "early_stopping: {rule: asha, grace_period: $grace, reduction_factor: $rf}
shuffle: $shuffle
seed: ${SEED:-0}" > "$tmp/asha.yaml"
for s in $sweeps; do
    t0=$(date +%s.%N)
    "$dtrain" sweep "$tmp/$s.yaml" --name "$s" --slots "$slots" --threads-per-slot 1 -q \
        > "$tmp/$s.log" 2>&1 || { cat "$tmp/$s.log"; exit 1; }
    t1=$(date +%s.%N)
    echo "$s $(echo "$t1 - $t0" | bc)" >> "$tmp/wall"
done
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP"
    for s in $sweeps; do cp "$tmp/runs/llama-tiny-fortunes/$s/sweep.json" "$KEEP/$s.json"; done
fi
python3 - "$tmp/runs/llama-tiny-fortunes" "$tmp/wall" "${GRID_BEST:-}" "${GRID_STEPS:-}" <<'PY'
import json, sys
d, wall = sys.argv[1], dict(l.split() for l in open(sys.argv[2]))
r = {}
if sys.argv[3]:  # an earlier grid run's figures
    r["grid"] = dict(steps=int(sys.argv[4]), evals=27, best=float(sys.argv[3]), params={},
                     n=27, done=27, wall=None)
for s in [x for x in ("grid", "asha") if x not in r]:
    j = json.load(open(f"{d}/{s}/sweep.json"))
    t = j["trials"]
    steps = sum(x["step"] for x in t)
    evals = sum(len(x["reports"]) for x in t)
    # the best among the trials that reached the last step, as `dtrain sweep` names it
    full = [x for x in t if x["step"] == max(y["step"] for y in t)]
    best = min(full, key=lambda x: x["metric"])
    r[s] = dict(steps=steps, evals=evals, best=best["metric"], params=best["params"], n=len(t),
                done=len(full), wall=float(wall[s]))
g, a = r["grid"], r["asha"]
print("| sweep | trials | trained to the end | steps trained | evaluations | wall s | best val loss | best params |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for s in ("grid", "asha"):
    x = r[s]
    p = " ".join(f"{k}={v}" for k, v in x["params"].items()) or "(given: GRID_BEST)"
    w = "-" if x["wall"] is None else f"{x['wall']:.0f}"
    print(f"| {s} | {x['n']} | {x['done']} | {x['steps']} | {x['evals']} | {w} | {x['best']:.5f} | {p} |")
gap = (a["best"] - g["best"]) / g["best"]
frac = a["steps"] / g["steps"]
wall = "" if g["wall"] is None else f", {100 * a['wall'] / g['wall']:.1f}% of its wall time"
print(f"ASHA: best within {100 * gap:.2f}% of the grid's (goal <= 2%), {100 * frac:.1f}% of its "
      f"training steps (goal <= 33.3%){wall}: "
      f"{'goal met' if gap <= 0.02 and frac <= 1 / 3 else 'goal NOT met'}")
PY
