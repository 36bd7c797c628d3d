#!/bin/sh
# Many hosts on one machine: HOSTS network namespaces ("hosts" h1..hN) joined by veth links on a
# private test subnet (netns_lib.sh), one MPI job across them, and the same job on one host; the
# two must end with bit-identical parameters.
#
#   run_netns.sh MPIRUN PROGRAM DATA_DIR REPO_DIR WORK_DIR [HOSTS=2] [STEPS=6]
#
# PROGRAM is netns_train: the tiny Llama trained by dtrain's trainer; each rank prints its host
# name, network namespace and a hash of its final parameters. Checks: (a) one rank per host, in
# distinct network namespaces other than this one; (b) every rank's hash equals the one-host
# run's; (c) at least a gradient's worth of bytes per step crossed h1's eth0.
#
# Exit status: 0 pass, 1 fail, 77 skip (no permission to create namespaces or veth links;
# CTest's SKIP_RETURN_CODE). Namespaces, links and any process left in them are removed on
# every exit path.
if [ $# -lt 5 ]; then
    echo "usage: run_netns.sh MPIRUN PROGRAM DATA_DIR REPO_DIR WORK_DIR [HOSTS=2] [STEPS=6]" >&2
    exit 2
fi
MPIRUN=$1 PROG=$2 DATA=$3 REPO=$4 WORK=$5 HOSTS=${6:-2} STEPS=${7:-6}
TIMEOUT=${DT_NETNS_TIMEOUT:-120} # seconds per mpirun (two of them fit CTest's 300)
NETNS_TAG=run_netns
. "$(dirname "$0")/netns_lib.sh"

netns_up "$HOSTS" # or SKIP
[ -x "$PROG" ] || fail "program $PROG not found"
[ -x "$MPIRUN" ] || command -v "$MPIRUN" >/dev/null || fail "mpirun $MPIRUN not found"
# The launch options (--mca plm_rsh_agent, btl/oob_tcp_if_include) are Open MPI's.
"$MPIRUN" --version 2>&1 | grep -qE 'Open MPI|OpenRTE' ||
    skip "$MPIRUN is not Open MPI's (the namespace launch uses Open MPI's rsh agent options)"
[ -d "$DATA/fortunes/train" ] || fail "no data in $DATA/fortunes/train (fixture fortunes_data)"

now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs_since() { awk -v a="$1" -v b="$(now_ms)" 'BEGIN { printf "%.1f", (b - a) / 1000 }'; }

ROOT=""
[ "$(id -u)" -eq 0 ] && ROOT="--allow-run-as-root"
export OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000
rm -rf "$WORK/one" "$WORK/many"
mkdir -p "$WORK/one" "$WORK/many" || fail "cannot create $WORK"

# ---- The job on one host (this namespace, shared memory) --------------------------------------
# With 2 ranks the shared-memory all-reduce (the default) gives MPI_Allreduce's bits (a + b); with
# more its fixed summation order differs from MPI's, so that run uses MPI's all-reduce too.
[ "$HOSTS" -gt 2 ] && export NETNS_OVERRIDE=dist.shared_memory=false
t0=$(now_ms)
run_child timeout -k 10 "$TIMEOUT" "$MPIRUN" $ROOT --oversubscribe --bind-to none -np "$HOSTS" \
    "$PROG" "$DATA" "$REPO" "$WORK/one" "$STEPS" >"$WORK/one.log" 2>&1
rc=$?
cat "$WORK/one.log"
[ $rc -eq 0 ] || fail "the one-host run failed (exit $rc; 124: timed out after $TIMEOUT s)"
say "one host: $(secs_since "$t0") s"

# ---- The job across the namespaces ------------------------------------------------------------
unset NETNS_OVERRIDE
tx0=$(netns_tx_bytes)
t0=$(now_ms)
netns_mpirun "$TIMEOUT" "$PROG" "$DATA" "$REPO" "$WORK/many" "$STEPS" >"$WORK/many.log" 2>&1
rc=$?
cat "$WORK/many.log"
[ $rc -eq 0 ] || fail "the $HOSTS-host run failed (exit $rc; 124: timed out after $TIMEOUT s)"
tx=$(($(netns_tx_bytes) - tx0))
say "$HOSTS hosts: $(secs_since "$t0") s, $tx bytes sent by h1's eth0"

# ---- Checks -----------------------------------------------------------------------------------
field() { # LOG NAME -> the word after NAME on every rank line, in rank order
    grep '^netns_train: rank ' "$1" | sort -n -k3 |
        awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}'
}
n_one=$(field "$WORK/one.log" hash | wc -l)
n_many=$(field "$WORK/many.log" hash | wc -l)
[ "$n_one" -eq "$HOSTS" ] || fail "one-host run: $n_one rank lines, expected $HOSTS"
[ "$n_many" -eq "$HOSTS" ] || fail "$HOSTS-host run: $n_many rank lines, expected $HOSTS"

# (a) one rank per host name, each in its own network namespace, none in this one.
got_hosts=$(field "$WORK/many.log" host | sort | paste -sd' ')
want_hosts=$(seq -f 'h%g' 1 "$HOSTS" | sort | paste -sd' ')
[ "$got_hosts" = "$want_hosts" ] || fail "(a) ranks ran on hosts '$got_hosts', expected '$want_hosts'"
here_ns=$(readlink /proc/self/ns/net)
n_ns=$(field "$WORK/many.log" netns | sort -u | grep -cvxF "$here_ns")
[ "$n_ns" -eq "$HOSTS" ] ||
    fail "(a) ranks ran in $n_ns distinct network namespaces other than this one, expected $HOSTS"
say "(a) ok: ranks on hosts $got_hosts in $n_ns distinct network namespaces"

# (b) bit-identical parameters: every rank of both runs prints the same hash.
hashes=$( (field "$WORK/one.log" hash; field "$WORK/many.log" hash) | sort -u)
[ "$(echo "$hashes" | wc -l)" -eq 1 ] ||
    fail "(b) parameter hashes differ: one host [$(field "$WORK/one.log" hash | paste -sd' ')] vs $HOSTS hosts [$(field "$WORK/many.log" hash | paste -sd' ')]"
say "(b) ok: every rank of both runs ends with parameter hash $hashes"

# (c) the gradients went over the link: at least one gradient's worth per step.
params=$(field "$WORK/many.log" params | head -1)
[ "$tx" -ge $((params * 4 * STEPS)) ] ||
    fail "(c) only $tx bytes crossed h1's eth0 for $STEPS steps of $params parameters"
say "(c) ok: $tx bytes over the veth link (>= $STEPS steps x $((params * 4)) gradient bytes)"
say "PASS"
