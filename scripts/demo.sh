#!/usr/bin/env bash
# `make demo`: the whole system at work on the embedded defaults, in about two minutes.
#   1. imports Debian's Fashion-MNIST (dataset-fashion-mnist) into data/fmnist;
#   2. `dtrain launch` trains ResNet-18 (small-image stem, width 8) on 2 MPI workers for two
#      epochs, with a checkpoint every 200 steps under runs/, the run recorded in the embedded
#      experiment store (runs/dtrain.db), and the dashboard + Prometheus /metrics served;
#   3. kills one worker on purpose after the second checkpoint (announced; DEMO_FAULT=0 skips
#      it): the launcher restarts the job from that checkpoint and it finishes;
#   4. prints the test accuracy, where the checkpoints and the exported model are, plots the
#      run and gives the commands to resume, inspect and plot it.
#   scripts/demo.sh [BUILD_DIR]     (DEMO_DIR: where data/ and runs/ go, default the checkout;
#                                    DEMO_PORT: dashboard port, default 8765)
set -euo pipefail
build=${1:-build}
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${DEMO_DIR:-$repo}
port=${DEMO_PORT:-8765}
fault=${DEMO_FAULT:-1}
dtrain=$(cd "$build" && pwd)/dtrain
cd "$dir"
if [ ! -f data/fmnist/train/manifest.json ]; then
  echo "== importing Fashion-MNIST from /usr/share/datasets/fashion-mnist into data/fmnist"
  "$dtrain" data import fashion-mnist /usr/share/datasets/fashion-mnist -o data/fmnist -q
fi
# A free port for the dashboard: the next one up if DEMO_PORT is taken.
for _ in $(seq 20); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
  port=$((port + 1))
done
run=demo-$(date +%Y%m%d-%H%M%S)
cfg=(examples/resnet18-fmnist.yaml data.train=data/fmnist/train data.val=data/fmnist/test
     model.width=8 data.batch=64 data.augment=false train.epochs=2 train.log_every=100
     train.eval_every=470 schedule.warmup_steps=50 ckpt.every_steps=200 ckpt.keep_last=3
     output.dir=runs output.run_name="$run")
[ -f "$repo/examples/resnet18-fmnist.yaml" ] && cfg[0]=$repo/examples/resnet18-fmnist.yaml
launch=("$dtrain" launch -n 2 --threads-per-worker 1 --oversubscribe --monitor-port "$port")
ckdir=runs/resnet18-fmnist/$run/checkpoints
echo "== training ResNet-18 (width 8) on Fashion-MNIST: 2 workers x batch 64, 2 epochs (937 steps)"
echo "   checkpoints every 200 steps to $dir/$ckdir"
echo "   run recorded in $dir/runs/dtrain.db as resnet18-fmnist/$run"
echo "   dashboard http://127.0.0.1:$port/   Prometheus metrics http://127.0.0.1:$port/metrics"
[ "$fault" != 0 ] &&
  echo "   fault drill: one worker is killed after the checkpoint of step 400 (DEMO_FAULT=0: off)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"${launch[@]}" "${cfg[@]}" 2>&1 | tee "$log" &
pid=$!
if [ "$fault" != 0 ]; then
  # Wait for the second commit, then SIGKILL the newest worker of this run: what a crashed
  # process or a lost node looks like to the launcher.
  for _ in $(seq 1200); do
    grep -q "checkpoint step 400 committed" "$log" && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.25
  done
  if victim=$(pgrep -n -f "dtrain train .*output.run_name=$run"); then
    echo "== demo: killing worker process $victim with SIGKILL on purpose; the launcher should"
    echo "   restart the job from the checkpoint of step 400"
    kill -KILL "$victim" || true
  fi
fi
rc=0
wait $pid || rc=$?
echo
if [ $rc != 0 ]; then
  echo "demo: the training job failed (exit $rc); its log is above" >&2
  exit $rc
fi
acc=$(grep -o "eval  step [0-9]* .*accuracy [0-9.]*%" "$log" | tail -1 | grep -o "[0-9.]*%$" || true)
echo "== done: test accuracy ${acc:-?} on the 10,000 Fashion-MNIST test images (target >= 88%)"
echo "   checkpoints:    $dir/$ckdir ($(ls "$ckdir" | tr '\n' ' '))"
echo "   exported model: $dir/runs/resnet18-fmnist/$run/model.safetensors (torchvision names)"
"$dtrain" runs plot "resnet18-fmnist/$run" --metric loss,eval_accuracy -o "runs/$run.svg" \
  > /dev/null && echo "   loss and accuracy curves: $dir/runs/$run.svg"
echo
echo "next:"
echo "  inspect the run:   $dtrain runs show resnet18-fmnist/$run"
echo "  list all runs:     $dtrain runs ls"
echo "  plot it:           $dtrain runs plot resnet18-fmnist/$run --metric loss -o loss.png"
echo "  its checkpoints:   $dtrain ckpt ls $ckdir"
echo "  resume it for a third epoch (from its newest checkpoint):"
echo "    ${launch[*]:0:6} ${cfg[*]/train.epochs=2/train.epochs=3}"
echo "  dashboard of all runs: $dtrain serve --port $port"
case "$acc" in
  "") echo "demo: no final evaluation in the log" >&2; exit 1 ;;
esac
