#!/usr/bin/env bash
# Data-parallel weak scaling, dtrain (dt_ddp over MPI) beside PyTorch DDP (gloo), in one run; then
# the all-reduce bus bandwidth of our communicator against raw MPI_Allreduce (bench_comm).
#
# For each model the per-rank batch is fixed and 1 and 2 ranks (1 thread each) are measured the
# same way on both sides: a barrier before and after every step, median step time (bench/bench_ddp.c,
# bench/peers/bench_ddp.py). Weak-scaling efficiency = step_time(1 worker) / step_time(2 ranks),
# against two 1-worker baselines measured the same way on both sides: the plain model without any
# data-parallel wrapper (`--plain`: what one worker runs when it does not go distributed, and
# dtrain's trainer on one worker), and the data-parallel wrapper at world size 1 (torch DDP over
# gloo still copies every gradient into its buckets and all-reduces them; dt_ddp at 1 rank does
# little). throughput = ranks * per-rank batch / step time. Both sides run in the "tuned" environment of
# bench/bench_models.sh (both OPENBLAS variables unset, glibc malloc kept from returning memory).
# A fourth configuration per side, lockstep plain at 2 ranks (two independent plain trainings held
# in step by the same barriers, exchanging nothing), splits the efficiency into what two workers
# cost each other on this machine (sharing) and what the data-parallel engine costs (exchange).
# Targets: efficiency >= 90% and above PyTorch DDP's; dt_comm within 10% of raw MPI.
#
#   bash bench/bench_scaling.sh [BUILD_DIR=build] [quick]
# Environment: RESNET_BATCH (64), LLAMA_BATCH (8), ROUNDS (5), PIN (0; 1 pins rank r to core r on
# both sides), DT_VENV (~/.cache/dtrain/venv; falls back to /usr/bin/python3 when it has no
# torch). Raw lines: /tmp/bench_scaling.log. About 5.5 minutes a round on a quiet 2-core machine;
# "quick": one round, half the steps.
set -uo pipefail
build=${1:-build}
quick=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
log=/tmp/bench_scaling.log
. "$here/ddp_common.bash"
ddp_common bench_scaling.sh "$build"
((py_ok)) || py=/usr/bin/python3
rb=${RESNET_BATCH:-64} lb=${LLAMA_BATCH:-8}
# PIN=1: rank r runs on core r on both sides (mpirun --bind-to core; the peer's workers set their
# affinity), so a lone 1-rank process cannot wander between cores; default: the scheduler places
bind=(--bind-to none)
if [[ ${PIN:-0} == 1 ]]; then bind=(--bind-to core --map-by core); export DT_BENCH_PIN=1; fi
# warm-up 2: torch DDP rebuilds its buckets after the first iteration
r_steps=6 l_steps=4 warm=2 rounds=${ROUNDS:-5}
[[ -n "$quick" ]] && r_steps=3 l_steps=2 warm=1 rounds=1
port=29533

field() { grep -oE "(^| )$1=[^ ]+" | head -1 | cut -d= -f2; }

ours() { # ranks, bench_ddp args...
  local np=$1; shift
  "${tuned[@]}" mpirun "${root[@]}" --oversubscribe "${bind[@]}" -np "$np" "$bin" "$@" 2>&1 | tee -a "$log" | grep -E '^dtrain (DDP|plain)'
}

peer() { # world, bench_ddp.py args...
  local w=$1; shift
  port=$((port + 1))
  "${tuned[@]}" "$py" "$here/peers/bench_ddp.py" --world "$w" --port $port --ar_reps 0 "$@" 2>&1 | tee -a "$log" | grep -E '^(DDP gloo|plain)'
}

ratio() { awk -v a="$1" -v b="$2" -v s="${3:-1}" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "n/a"; else printf (s == 100 ? "%.1f" : "%.2f"), s * a / b }'; }

# Rounds: every round runs all sixteen configurations (2 models x 2 sides x plain at 1 and 2 (lockstep),
# DDP at 1 and 2 ranks) one after the
# other, so slow phases of this shared VM (another tenant, the host) fall on both sides and both
# rank counts alike; the table takes each configuration's best round (lowest median step: noise
# only ever slows a step), and the per-round efficiencies are printed below it.
declare -A med wait comm ccpu mib sent ph phases
run_ours() { # model round args...
  local m=$1 r=$2 o; shift 2
  for np in 1 2; do
    o=$(ours $np "$@")
    med[$m,dt,$np,$r]=$(field median_step_s <<<"$o"); wait[$m,$np,$r]=$(field ddp_wait_ms <<<"$o")
    comm[$m,$np,$r]=$(field ddp_comm_ms <<<"$o"); ccpu[$m,$np,$r]=$(field comm_cpu_ms <<<"$o"); mib[$m]=$(field grad_MiB <<<"$o")
    [[ $np == 2 ]] && sent[$m]=$(field sent_MiB <<<"$o")
    ph[$m,$np,$r]="fwd $(field fwd_ms <<<"$o") bwd $(field bwd_ms <<<"$o") wait $(field wait_ms <<<"$o") opt $(field opt_ms <<<"$o") barrier $(field barrier_ms <<<"$o") fwd_cpu $(field fwd_cpu_ms <<<"$o") bwd_cpu $(field bwd_cpu_ms <<<"$o")"
  done
  o=$(ours 1 "$@" --plain 1); med[$m,dt,p,$r]=$(field median_step_s <<<"$o")
  o=$(ours 2 "$@" --plain 1); med[$m,dt,l,$r]=$(field median_step_s <<<"$o")
}
run_peer() { # model round args...
  local m=$1 r=$2 o; shift 2
  for np in 1 2; do
    o=$(peer $np "$@")
    med[$m,pt,$np,$r]=$(field median_step_s <<<"$o")
  done
  o=$(peer 1 "$@" --plain); med[$m,pt,p,$r]=$(field median_step_s <<<"$o")
  o=$(peer 2 "$@" --plain); med[$m,pt,l,$r]=$(field median_step_s <<<"$o")
}
# Which side goes first swaps every round, so that each side's jobs follow the other side's as
# often as their own: a job that starts right after a large one (PyTorch's Llama) can run slower
# for a while (measured on an AMD Zen 4 VM, bench/RESULTS.md), and with a fixed order only
# dtrain's ResNet runs followed a Llama job of the other side.
run_round() { # round
  local r=$1
  for m in resnet18 llama56m; do
    local a=(--model "$m")
    if [[ $m == resnet18 ]]; then a+=(--batch "$rb" --steps $r_steps); else a+=(--batch "$lb" --steps $l_steps); fi
    a+=(--warmup $warm)
    if ((r % 2)); then run_ours "$m" "$r" "${a[@]}"; run_peer "$m" "$r" "${a[@]}"
    else run_peer "$m" "$r" "${a[@]}"; run_ours "$m" "$r" "${a[@]}"; fi
  done
}

med_of() { # "93.5%" ... -> their median
  printf '%s\n' "$@" | tr -d % | grep -E '^[0-9.]+$' | sort -n | awk '{v[NR] = $1} END { if (NR) printf "%.1f%%", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print "n/a" }'
}

best() { # model side np -> "step round" of the round with the lowest median step
  local b="" br=0
  for ((r = 1; r <= rounds; r++)); do
    local v=${med[$1,$2,$3,$r]:-}
    [[ -z $v ]] && continue
    if [[ -z $b ]] || awk -v a="$v" -v b="$b" 'BEGIN { exit !(a < b) }'; then b=$v br=$r; fi
  done
  echo "$b $br"
}

row() { # model, label, items per rank, unit
  local m=$1 name=$2 items=$3 unit=$4
  local o0 o1 o2 t0 t1 t2 r1 r2
  read -r o0 _ <<<"$(best "$m" dt p)"; read -r o1 r1 <<<"$(best "$m" dt 1)"; read -r o2 r2 <<<"$(best "$m" dt 2)"
  phases[$m,1]=${ph[$m,1,$r1]:-}; phases[$m,2]=${ph[$m,2,$r2]:-}
  read -r t0 _ <<<"$(best "$m" pt p)"; read -r t1 _ <<<"$(best "$m" pt 1)"; read -r t2 _ <<<"$(best "$m" pt 2)"
  thr() { [[ -z $1 ]] && { echo fail; return; }; awk -v n="$2" -v i="$items" -v t="$1" 'BEGIN { printf "%.1f", n * i / t }'; }
  local per_op="" per_o="" per_tp="" per_t=""
  for ((r = 1; r <= rounds; r++)); do
    per_op+=" $(ratio "${med[$m,dt,p,$r]:-}" "${med[$m,dt,2,$r]:-}" 100)%"
    per_o+=" $(ratio "${med[$m,dt,1,$r]:-}" "${med[$m,dt,2,$r]:-}" 100)%"
    per_tp+=" $(ratio "${med[$m,pt,p,$r]:-}" "${med[$m,pt,2,$r]:-}" 100)%"
    per_t+=" $(ratio "${med[$m,pt,1,$r]:-}" "${med[$m,pt,2,$r]:-}" 100)%"
  done
  printf "| %-30s | %7s | %7s | %7s | %5s%% (%s) | %5s%% (%s) | %7s | %7s | %7s | %5s%% (%s) | %5s%% (%s) | %5s |\n" \
    "$name ($unit/s)" "$(thr "$o0" 1)" "$(thr "$o1" 1)" "$(thr "$o2" 2)" \
    "$(ratio "$o0" "$o2" 100)" "$(med_of $per_op)" "$(ratio "$o1" "$o2" 100)" "$(med_of $per_o)" \
    "$(thr "$t0" 1)" "$(thr "$t1" 1)" "$(thr "$t2" 2)" \
    "$(ratio "$t0" "$t2" 100)" "$(med_of $per_tp)" "$(ratio "$t1" "$t2" 100)" "$(med_of $per_t)" "$(ratio "$t2" "$o2")"
  summary+=("$name: best-round median step dtrain plain ${o0:-?}, DDP ${o1:-?} -> ${o2:-?} s; torch plain ${t0:-?}, DDP ${t1:-?} -> ${t2:-?} s; per-round efficiency vs plain: dtrain$per_op, torch$per_tp; vs DDP at 1 rank: dtrain$per_o, torch$per_t; dtrain at 2 ranks (round $r2) waits ${wait[$m,2,$r2]:-?} ms for the all-reduce after backward, comm thread in all-reduce ${comm[$m,2,$r2]:-?} ms (${ccpu[$m,2,$r2]:-?} ms of it on the CPU), sent ${sent[$m]:-?} of ${mib[$m]:-?} MiB; phases (ms, 1 -> 2 ranks, best rounds) ${phases[$m,1]:-?} -> ${phases[$m,2]:-?}")
}

: >"$log"
echo "Weak scaling 1 -> 2 ranks, 1 thread per rank, fixed per-rank batch, tuned env, pin=${PIN:-0}; throughput = all ranks"
echo "PyTorch: $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null) ($py), DDP gloo defaults"
echo "$rounds interleaved rounds; each configuration's best round (lowest median step) in the table"
for ((r = 1; r <= rounds; r++)); do
  echo "  round $r of $rounds ($(date +%T), load $(cut -d' ' -f1 /proc/loadavg))" >&2
  run_round $r
done
echo
echo "| model (per-rank batch) | dtrain plain | DDP 1 rank | 2 ranks | efficiency vs plain (median of rounds) | vs DDP at 1 (median) | torch plain | DDP 1 rank | 2 ranks | efficiency vs plain (median) | vs DDP at 1 (median) | dtrain / torch at 2 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
summary=()
row resnet18 "ResNet-18 b$rb SGD" "$rb" img
row llama56m "Llama 56M seq256 b$lb AdamW" "$((lb * 256))" tok
echo
for s in "${summary[@]}"; do echo "  $s"; done
echo "Targets: efficiency >= 90% and above PyTorch DDP's."
echo
echo "Where the 2-rank step's time goes (medians of the per-round ratios): sharing = plain at 1 /"
echo "two independent plain trainings in lockstep (barriers only, nothing exchanged): what two"
echo "workers cost each other on this machine; exchange = lockstep plain at 2 / DDP at 2: what the"
echo "data-parallel engine costs on top. Their product is the efficiency vs plain."
echo
echo "| model | dtrain sharing | dtrain exchange | torch sharing | torch exchange |"
echo "|---|---|---|---|---|"
split() { # model label
  local m=$1 per_ds="" per_dx="" per_ts="" per_tx=""
  for ((r = 1; r <= rounds; r++)); do
    per_ds+=" $(ratio "${med[$m,dt,p,$r]:-}" "${med[$m,dt,l,$r]:-}" 100)%"
    per_dx+=" $(ratio "${med[$m,dt,l,$r]:-}" "${med[$m,dt,2,$r]:-}" 100)%"
    per_ts+=" $(ratio "${med[$m,pt,p,$r]:-}" "${med[$m,pt,l,$r]:-}" 100)%"
    per_tx+=" $(ratio "${med[$m,pt,l,$r]:-}" "${med[$m,pt,2,$r]:-}" 100)%"
  done
  echo "| $2 | $(med_of $per_ds) | $(med_of $per_dx) | $(med_of $per_ts) | $(med_of $per_tx) |"
  rounds_txt+=("$2 per round: sharing dtrain$per_ds, torch$per_ts; exchange dtrain$per_dx, torch$per_tx")
}
rounds_txt=()
split resnet18 "ResNet-18 b$rb"
split llama56m "Llama 56M b$lb"
echo
for s in "${rounds_txt[@]}"; do echo "  $s"; done
echo
echo "== all-reduce bus bandwidth: dt_comm vs raw MPI_Allreduce (bench/bench_comm.sh, 1..64 MiB, 5 rounds) =="
"${tuned[@]}" sh "$here/bench_comm.sh" "$build" 64 5 2 5 2>&1 | tee -a "$log"
echo "Target: dt_comm within 10% of raw MPI. (raw lines: $log)"
