#!/usr/bin/env bash
# `make demo` end to end (scripts/demo.sh) in a scratch DEMO_DIR: it must finish, reach >= 88%
# test accuracy, recover from the worker it kills (2 attempts in the store, the first failed
# naming the signal, the second done), leave its checkpoints, exported model and plot, and
# print the commands it promises.
#   demo_test.sh BUILD_DIR REPO WORK_DIR
set -euo pipefail
build=$1 repo=$2 work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work/runs" && mkdir -p "$work"
port=$((20000 + RANDOM % 20000))
DEMO_DIR=$work DEMO_PORT=$port OMP_NUM_THREADS=1 "$repo/scripts/demo.sh" "$build" > "$work/demo.log" 2>&1 ||
  { cat "$work/demo.log"; fail "demo.sh exited $?"; }
log=$work/demo.log
acc=$(grep -o "^== done: test accuracy [0-9.]*%" "$log" | grep -o "[0-9.]*" | tail -1)
[ -n "$acc" ] || { cat "$log"; fail "no accuracy line"; }
awk -v a="$acc" 'BEGIN { exit !(a >= 88) }' || fail "test accuracy $acc% < 88%"
grep -q "killing worker process" "$log" || fail "the fault drill did not run"
grep -q "dtrain launch: attempt 0 failed: worker . killed by signal 9" "$log" || fail "no failed attempt line"
run=$(grep -o "as resnet18-fmnist/demo-[0-9-]*" "$log" | head -1 | cut -d' ' -f2)
cd "$work"
"$build/dtrain" runs export "$run" --format json -o run.json
python3 - run.json << 'PY'
import json, sys
r = json.load(open(sys.argv[1]))
att = r["attempts"]
assert r["run"]["status"] == "done", r["run"]
assert len(att) == 2, att
assert att[0]["status"] == "failed" and "signal 9" in att[0]["exit_reason"], att[0]
assert att[1]["status"] == "done", att[1]
print("demo: store ok:", len(att), "attempts")
PY
d=runs/${run}
ls "$d/checkpoints" | grep -q "step-000000936" || fail "no final checkpoint"
[ -s "$d/model.safetensors" ] || fail "no exported model"
[ -s "runs/${run#*/}.svg" ] || fail "no plot"
for c in "runs show" "runs plot" "ckpt ls" "train.epochs=3"; do
  grep -q -- "$c" "$log" || fail "the closing help lacks '$c'"
done
# the printed resume command really continues the run (one more epoch from step 936)
cmd=$(grep -A1 "resume it for a third epoch" "$log" | tail -1)
OMP_NUM_THREADS=1 $cmd train.epochs=3 train.steps=940 > resume.log 2>&1 ||
  { cat resume.log; fail "the printed resume command failed"; }
grep -q "resumed from .*step-000000936: step 936" resume.log || { cat resume.log; fail "did not resume from step 936"; }
echo "demo: ok (test accuracy $acc%)"
