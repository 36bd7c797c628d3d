#!/bin/sh
# bench/bench_comm across network-namespace "hosts" (netns_lib.sh): the all-reduce bus bandwidth
# of raw MPI_Allreduce and of our communicator when every byte crosses a veth link over TCP, and
# the DDP step with overlap on and off -- the "network" figures of docs/scaling.md. Not a test.
#
#   bench_netns.sh MPIRUN BENCH_COMM [HOSTS=2] [MAX_MIB=64] [ROUNDS=3] [DDP_STEPS=10]
#   e.g. sh tests/dist/netns/bench_netns.sh mpirun build/bench/bench_comm
#
# Needs root (or CAP_SYS_ADMIN); exits 77 without it.
if [ $# -lt 2 ]; then
    echo "usage: bench_netns.sh MPIRUN BENCH_COMM [HOSTS=2] [MAX_MIB=64] [ROUNDS=3] [DDP_STEPS=10]" >&2
    exit 2
fi
MPIRUN=$1 BENCH=$2
NETNS_TAG=bench_netns
. "$(dirname "$0")/netns_lib.sh"
[ -x "$BENCH" ] || fail "$BENCH not found (build the bench_comm target; needs MPI)"
BENCH=$(cd "$(dirname "$BENCH")" && pwd)/$(basename "$BENCH")
netns_up "${3:-2}"
export OMP_NUM_THREADS=1
tx0=$(netns_tx_bytes)
netns_mpirun 1800 "$BENCH" "${4:-64}" "${5:-3}" "${6:-10}"
rc=$?
say "exit $rc; $(($(netns_tx_bytes) - tx0)) bytes sent by h1's eth0"
exit $rc
