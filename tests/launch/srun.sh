#!/usr/bin/env bash
# `dtrain train` under Slurm's srun (issue 6): a one-node Slurm cluster on this machine (munged,
# slurmctld and slurmd from Debian, private socket, ports and state in a temporary folder), then
# the same 2-worker training started by `srun -n 2 --mpi=pmix` and by `mpirun -np 2`: both must
# report 2 MPI workers and export bit-identical weights (the ranks find each other through
# Slurm's PMIx, not mpirun's).
#   srun.sh DTRAIN REPO TRAIN_DATA
# Exit 77 (skip) without root or without the Slurm/munge binaries (scripts/install-deps.sh).
set -uo pipefail
dtrain=$1 repo=$2 data=$3
[[ $(id -u) -eq 0 ]] || { echo "srun.sh: needs root to run slurmd; skipped"; exit 77; }
for b in munged slurmctld slurmd srun sinfo; do
  command -v "$b" >/dev/null || [[ -x /usr/sbin/$b ]] || { echo "srun.sh: no $b; skipped"; exit 77; }
done
export PATH=$PATH:/usr/sbin
tmp=$(mktemp -d /tmp/dt-slurm.XXXXXX)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  [[ -f $tmp/slurmd.pid ]] && kill "$(cat "$tmp/slurmd.pid")" 2>/dev/null
  [[ -f $tmp/slurmctld.pid ]] && kill "$(cat "$tmp/slurmctld.pid")" 2>/dev/null
  [[ -f $tmp/munged.pid ]] && kill "$(cat "$tmp/munged.pid")" 2>/dev/null
  sleep 0.5
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/log/*; do echo "== $f"; tail -20 "$f"; done; exit 1; }

# munge: its own key, socket and state (it refuses a key others can read)
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool" "$tmp/log"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 700 "$tmp/munge"; chmod 400 "$tmp/munge/munge.key"
munged --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/sock" \
  --pid-file="$tmp/munged.pid" --log-file="$tmp/log/munged.log" --seed-file="$tmp/munge/seed" ||
  fail "munged did not start"

# free ports for slurmctld and slurmd
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
host=$(hostname -s) cpus=$(nproc) mem=$(awk '/MemTotal/ { print int($2 / 1024 / 2) }' /proc/meminfo)
cat >"$tmp/slurm.conf" <<CONF
ClusterName=dtrain-test
SlurmctldHost=$host
AuthType=auth/munge
AuthInfo=socket=$tmp/munge/sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(port)
SlurmdPort=$(port)
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -c || fail "slurmctld did not start"
slurmd -c || fail "slurmd did not start"
for _ in $(seq 1 50); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T | grep -q idle || fail "the node did not come up: $(sinfo 2>&1)"

args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      train.steps=6 schedule.warmup_steps=1 train.threads=1 ckpt.resume=never
      output.dir="$tmp/runs")
timeout 300 srun -n 2 --mpi=pmix env OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000 "$dtrain" train \
  "${args[@]}" output.run_name=srun >"$tmp/srun.log" 2>&1 || { cat "$tmp/srun.log"; fail "srun run failed"; }
timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  env OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000 "$dtrain" train "${args[@]}" output.run_name=mpirun \
  >"$tmp/mpirun.log" 2>&1 || { cat "$tmp/mpirun.log"; fail "mpirun run failed"; }
grep -q "2 workers (mpi)" "$tmp/srun.log" || { cat "$tmp/srun.log"; fail "srun: not 2 MPI workers"; }
grep -q "2 workers (mpi)" "$tmp/mpirun.log" || fail "mpirun: not 2 MPI workers"
a=$(sha256sum <"$tmp/runs/llama-tiny-fortunes/srun/model/model.safetensors" | cut -c1-64)
b=$(sha256sum <"$tmp/runs/llama-tiny-fortunes/mpirun/model/model.safetensors" | cut -c1-64)
[[ -n $a && $a == "$b" ]] || fail "srun and mpirun weights differ: $a vs $b"
echo "ok: srun -n 2 --mpi=pmix and mpirun -np 2 trained 2 MPI workers to the same weights ($a)"
