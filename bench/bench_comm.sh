#!/bin/sh
# All-reduce bus bandwidth of our communicator (native MPI_Allreduce path and our ring) against a
# raw MPI_Allreduce on the same buffers, 1 MiB .. 256 MiB, 2 ranks with 1 thread each.
# Then one DDP training step (MLP, 25 MiB of gradients) with overlap on and off.
# Usage: bench/bench_comm.sh [BUILD_DIR=build] [MAX_MIB=256] [ROUNDS=5] [RANKS=2] [DDP_STEPS=20]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
BIN="$BUILD/bench/bench_comm"
[ -x "$BIN" ] || { echo "bench_comm.sh: $BIN not found (needs MPI: libopenmpi-dev); build first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench_comm.sh: mpirun not found (openmpi-bin)" >&2; exit 2; }
ROOT=""
[ "$(id -u)" -eq 0 ] && ROOT="--allow-run-as-root"
OMP_NUM_THREADS=1 mpirun $ROOT --oversubscribe --bind-to none -np "${4:-2}" "$BIN" "${2:-256}" "${3:-5}" "${5:-20}"
