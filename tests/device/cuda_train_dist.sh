#!/bin/sh
# cuda_train_dist_MODE: BIN MODE REPO MPIRUN... -- the probe first (exit 77: skipped, without
# starting mpirun, whose exit status would not carry the 77), then BIN under mpirun -np 2.
bin=$1 mode=$2 repo=$3
shift 3
"$bin" "$mode" "$repo" probe
rc=$?
[ "$rc" -eq 0 ] || exit "$rc"
exec "$@" -np 2 "$bin" "$mode" "$repo"
