#!/usr/bin/env bash
# Weak-scaling efficiency 1 -> 2 ranks from paired steps, dtrain (dt_ddp) beside PyTorch DDP (gloo).
#
# bench_scaling.sh times 1 rank and 2 ranks in separate runs, minutes apart; on a shared VM the
# machine's speed drifts by +-10% over minutes, more than the 1-2 points that separate the two
# sides. Here every measured step is a pair, inside one 2-rank job (bench_ddp --alternate,
# bench/peers/bench_ddp.py --alternate): a solo step, in which rank 0 trains a plain copy of the
# model while rank 1 sleeps in a barrier, and a DDP step on both ranks, in alternating order;
# efficiency = solo / DDP step time, per pair. The two sides' jobs alternate too (which one goes
# first swaps every round), so both see the same stretches of the VM. Printed: every pair's
# efficiency, then per model and side the median over all pairs with a 90% bootstrap interval, and
# the interval of the difference (dtrain - torch) of the medians.
#
# A pair still scatters (+-10% here): the two vCPUs change speed independently, and a DDP step
# waits for the slower rank while a solo step does not -- a real cost of synchronous data
# parallelism on such machines, which both sides pay alike.
#
#   bash bench/bench_paired.sh [BUILD_DIR=build]
# Environment: ROUNDS (3), RESNET_PAIRS (10), LLAMA_PAIRS (6), MODELS ("resnet18 llama56m"),
# RESNET_BATCH (64), LLAMA_BATCH (8), DT_VENV as in bench_scaling.sh. Ranks are pinned to cores
# (rank r on core r) on both sides, 1 thread each, in bench_models.sh's tuned environment (both
# OPENBLAS variables unset). About 25 minutes with the defaults on this 2-core VM.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
log=/tmp/bench_paired.log
. "$here/ddp_common.bash"
ddp_common bench_paired.sh "$build"
((py_ok)) || { echo "bench_paired.sh: $py has no torch/torchvision (make venv)" >&2; exit 2; }
tuned+=(DT_BENCH_PIN=1)
rounds=${ROUNDS:-3}
port=29633
: > "$log"
out=$(mktemp)

field() { grep -oE "(^| )$1=[^ ]+" | head -1 | cut -d= -f2; }

for m in ${MODELS:-resnet18 llama56m}; do
  if [[ $m == resnet18 ]]; then n=${RESNET_PAIRS:-10} b=${RESNET_BATCH:-64}; else n=${LLAMA_PAIRS:-6} b=${LLAMA_BATCH:-8}; fi
  for ((r = 1; r <= rounds; r++)); do
    for side in $( ((r % 2)) && echo "dt torch" || echo "torch dt"); do
      if [[ $side == dt ]]; then
        line=$("${tuned[@]}" mpirun "${root[@]}" --oversubscribe --bind-to core --map-by core -np 2 \
               "$bin" --model "$m" --batch "$b" --steps "$n" --warmup 1 --alternate 1 2>&1 |
               tee -a "$log" | grep -E '^dtrain DDP')
      else
        port=$((port + 1))
        line=$("${tuned[@]}" "$py" "$here/peers/bench_ddp.py" --world 2 --port $port --ar_reps 0 \
               --model "$m" --batch "$b" --steps "$n" --warmup 1 --alternate 2>&1 |
               tee -a "$log" | grep -E '^DDP gloo')
      fi
      pairs=$(field eff_pairs <<<"$line")
      printf '%-9s round %d %-5s solo %6s s  DDP %6s s  pairs %s\n' "$m" "$r" "$side" \
        "$(field solo_step_s <<<"$line")" "$(field median_step_s <<<"$line")" "${pairs:-FAILED}"
      echo "$m $side $pairs" >>"$out"
    done
  done
done

python3 - "$out" <<'PY'
import random, statistics, sys
data = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 3 and f[2]:
        data.setdefault(f[0], {}).setdefault(f[1], []).extend(float(v) for v in f[2].split(','))
random.seed(1)
def boot(xs, k=2000):
    return sorted(statistics.median(random.choices(xs, k=len(xs))) for _ in range(k))
print('\npaired weak-scaling efficiency, 2 ranks (median over all pairs, 90% bootstrap interval)')
print('| model | dtrain | torch DDP | dtrain - torch |\n|---|---|---|---|')
for m, d in data.items():
    if 'dt' not in d or 'torch' not in d:
        print(f'| {m} | missing runs (see /tmp/bench_paired.log) | | |'); continue
    bd, bt = boot(d['dt']), boot(d['torch'])
    diff = sorted(x - y for x, y in zip(bd, random.sample(bt, len(bt))))
    ci = lambda v: f'[{100 * v[len(v) // 20]:.1f}, {100 * v[-len(v) // 20 - 1]:.1f}]'
    print(f"| {m} ({len(d['dt'])}/{len(d['torch'])} pairs) | {100 * statistics.median(d['dt']):.1f}% {ci(bd)} "
          f"| {100 * statistics.median(d['torch']):.1f}% {ci(bt)} "
          f"| {100 * (statistics.median(d['dt']) - statistics.median(d['torch'])):+.1f} {ci(diff)} |")
PY
rm -f "$out"
echo "(raw lines: $log)"
