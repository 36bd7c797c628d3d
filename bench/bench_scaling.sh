#!/usr/bin/env bash
# Data-parallel weak scaling, dtrain (dt_ddp over MPI) beside PyTorch DDP (gloo), in one run; then
# the all-reduce bus bandwidth of our communicator against raw MPI_Allreduce (bench_comm).
#
# For each model the per-rank batch is fixed and 1 and 2 ranks (1 thread each) are measured the
# same way on both sides: a barrier before and after every step, median step time (bench/bench_ddp.c,
# bench/peers/bench_ddp.py). Weak-scaling efficiency = step_time(1 rank) / step_time(2 ranks);
# throughput = ranks * per-rank batch / step time. Both sides run in the "tuned" environment of
# bench/bench_models.sh (both OPENBLAS variables unset, glibc malloc kept from returning memory).
# Targets: efficiency >= 90% and above PyTorch DDP's; dt_comm within 10% of raw MPI.
#
#   bash bench/bench_scaling.sh [BUILD_DIR=build] [quick]
# Environment: RESNET_BATCH (64), LLAMA_BATCH (8), PIN (0; 1 pins rank r to core r on both sides), DT_VENV (~/.cache/dtrain/venv; falls back to
# /usr/bin/python3 when it has no torch). Raw lines: /tmp/bench_scaling.log. About 4-6 minutes
# on a quiet 2-core machine; "quick" halves the steps.
set -uo pipefail
build=${1:-build}
quick=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/bench/bench_ddp"
log=/tmp/bench_scaling.log
[[ -x "$bin" ]] || { echo "bench_scaling.sh: $bin not found (needs MPI: libopenmpi-dev); build first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_scaling.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
if ! "$py" -c 'import torch, torchvision' 2>/dev/null; then py=/usr/bin/python3; fi
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
tuned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0
       MALLOC_TRIM_THRESHOLD_=100000000000 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 OMP_NUM_THREADS=1)
rb=${RESNET_BATCH:-64} lb=${LLAMA_BATCH:-8}
# PIN=1: rank r runs on core r on both sides (mpirun --bind-to core; the peer's workers set their
# affinity), so a lone 1-rank process cannot wander between cores; default: the scheduler places
bind=(--bind-to none)
if [[ ${PIN:-0} == 1 ]]; then bind=(--bind-to core --map-by core); export DT_BENCH_PIN=1; fi
# warm-up 2: torch DDP rebuilds its buckets after the first iteration
r_steps=6 l_steps=3 warm=2
[[ -n "$quick" ]] && r_steps=3 l_steps=2 warm=1
port=29533

field() { grep -oE "(^| )$1=[^ ]+" | head -1 | cut -d= -f2; }

ours() { # ranks, bench_ddp args...
  local np=$1; shift
  "${tuned[@]}" mpirun "${root[@]}" --oversubscribe "${bind[@]}" -np "$np" "$bin" "$@" 2>&1 | tee -a "$log" | grep '^dtrain DDP'
}

peer() { # world, bench_ddp.py args...
  local w=$1; shift
  port=$((port + 1))
  "${tuned[@]}" "$py" "$here/peers/bench_ddp.py" --world "$w" --port $port --ar_reps 0 "$@" 2>&1 | tee -a "$log" | grep '^DDP gloo'
}

ratio() { awk -v a="$1" -v b="$2" -v s="${3:-1}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf (s == 100 ? "%.1f" : "%.2f"), s * a / b }'; }

summary=()
row() { # name, unit, bench_ddp args -- peer args
  local name=$1 unit=$2; shift 2
  local oa=() pa=()
  while [[ $1 != -- ]]; do oa+=("$1"); shift; done; shift
  pa=("$@")
  local o1 o2 t1 t2
  o1=$(ours 1 "${oa[@]}"); o2=$(ours 2 "${oa[@]}")
  t1=$(peer 1 "${pa[@]}"); t2=$(peer 2 "${pa[@]}")
  local os1 os2 ts1 ts2 k="total_${unit}_per_s"
  os1=$(field median_step_s <<<"$o1"); os2=$(field median_step_s <<<"$o2")
  ts1=$(field median_step_s <<<"$t1"); ts2=$(field median_step_s <<<"$t2")
  local or1 or2 tr1 tr2
  or1=$(field "$k" <<<"$o1"); or2=$(field "$k" <<<"$o2")
  tr1=$(field "$k" <<<"$t1"); tr2=$(field "$k" <<<"$t2")
  printf "| %-30s | %8s | %8s | %6s%% | %8s | %8s | %6s%% | %6s |\n" "$name" "${or1:-fail}" \
    "${or2:-fail}" "$(ratio "$os1" "$os2" 100)" "${tr1:-fail}" "${tr2:-fail}" \
    "$(ratio "$ts1" "$ts2" 100)" "$(ratio "$or2" "$tr2")"
  summary+=("$name, 2 ranks: dtrain step $(field median_step_s <<<"$o2") s (1 rank $os1 s), waiting for all-reduce after backward $(field ddp_wait_ms <<<"$o2") ms, comm thread in all-reduce $(field ddp_comm_ms <<<"$o2") ms of $(field grad_MiB <<<"$o2") MiB; torch step $ts2 s (1 rank $ts1 s)")
}

: >"$log"
echo "Weak scaling 1 -> 2 ranks, 1 thread per rank, fixed per-rank batch, tuned env; throughput = all ranks"
echo "PyTorch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py), DDP gloo defaults"
echo
echo "| model (per-rank batch) | dtrain 1 rank | 2 ranks | efficiency | torch 1 rank | 2 ranks | efficiency | dtrain / torch at 2 |"
echo "|---|---|---|---|---|---|---|---|"
row "ResNet-18 b$rb SGD (img/s)" img --model resnet18 --batch "$rb" --steps $r_steps --warmup $warm -- \
    --model resnet18 --batch "$rb" --steps $r_steps --warmup $warm
row "Llama 56M seq256 b$lb AdamW (tok/s)" tok --model llama56m --batch "$lb" --steps $l_steps --warmup $warm -- \
    --model llama56m --batch "$lb" --steps $l_steps --warmup $warm
echo
for s in "${summary[@]}"; do echo "  $s"; done
echo "Targets: efficiency >= 90% and above PyTorch DDP's."
echo
echo "== all-reduce bus bandwidth: dt_comm vs raw MPI_Allreduce (bench/bench_comm.sh, 1..64 MiB, 5 rounds) =="
"${tuned[@]}" sh "$here/bench_comm.sh" "$build" 64 5 2 5 2>&1 | tee -a "$log"
echo "Target: dt_comm within 10% of raw MPI. (raw lines: $log)"
