#!/usr/bin/env bash
# The hang watchdog in a real training job: `dtrain train` on 2 ranks under mpirun with
# dist.timeout_s=5; once rank 0 has logged step 5, rank 1 is stopped (SIGSTOP: alive, holding
# its sockets and shared memory, making no progress). The job must end by itself within the
# timeout plus a margin, with exit status 76, one line from rank 0 naming its host, the
# collective, the step, the wait, dist.timeout_s and the stopped rank 1 by its pid (not yet in
# that collective, or stopped inside it), and no process left (the stopped rank included).
#   train_hang.sh DTRAIN REPO DATA_DIR MPIEXEC
set -uo pipefail
dtrain=$1 repo=$2 data=$3 mpiexec=$4
tmp=$(mktemp -d)
trap 'pkill -KILL -f "output.dir=$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; grep -v "^step" "$tmp/log" | tail -20; exit 1; }
timeout_s=5 margin=20
wait_for() { # log pattern: at most 60 s, and not past the job's end
  for _ in $(seq 1200); do
    grep -Eq "$2" "$1" 2>/dev/null && return 0
    kill -0 "$job" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
# the ranks of this job (not mpirun): their environment names their rank
rank_pid() {
  for p in $(pgrep -f "dtrain train .*output.dir=$tmp"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
  done
  return 1
}

# the job must end by itself; without the watchdog it would wait forever (timeout: 124)
timeout -k 5 150 "$mpiexec" --allow-run-as-root --oversubscribe --bind-to none -np 2 \
  "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" \
  data.val= data.seq_len=32 data.batch=2 train.steps=100000 train.log_every=1 train.threads=1 \
  ckpt.every_steps=10 dist.timeout_s=$timeout_s output.dir="$tmp" > "$tmp/log" 2>&1 &
job=$!
wait_for "$tmp/log" "^step +5/" || fail "never saw step 5"
r1=$(rank_pid 1) || fail "no rank 1 process"
kill -STOP "$r1" || fail "cannot stop rank 1 ($r1)"
t0=$(date +%s.%N)
echo "stopped rank 1 (pid $r1)"
wait "$job"
rc=$?
took=$(echo "$(date +%s.%N) - $t0" | bc)
echo "job ended: exit status $rc, $took s after the stop"
grep "made no progress" "$tmp/log"
[ "$rc" = 76 ] || fail "exit status $rc, expected 76 (DT_COMM_EXIT_HANG)"
[ "$(echo "$took <= $timeout_s + $margin" | bc)" = 1 ] || fail "took $took s (timeout $timeout_s s + $margin s margin)"
[ "$(echo "$took >= $timeout_s - 1" | bc)" = 1 ] || fail "fired after $took s, before the $timeout_s s timeout"
grep -Eq "^dtrain: rank 0 \(host [^)]+\): [a-zA-Z0-9(). -]+( of (gradient|parameter) bucket [0-9]+)? at step [0-9]+ made no progress for [0-9]+ s \(dist.timeout_s\): rank 1 \(host [^,]+, pid $r1\) (has not reached it|is stopped inside it); aborting the job \(exit status 76\)$" "$tmp/log" ||
  fail "no watchdog line naming rank 0, its host, the collective, the step, dist.timeout_s and the stopped rank 1 (pid $r1)"
# the stopped rank, continued by mpirun only to be ended, does not blame its peer
grep -q "^dtrain: rank 1 .*made no progress" "$tmp/log" && fail "the stopped rank 1 reported a hang too"
sleep 1
left=""
for p in $(pgrep -f "output.dir=$tmp"); do
  st=$(sed -n 's/^[0-9]* (.*) \([A-Z]\).*/\1/p' "/proc/$p/stat" 2>/dev/null)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ] && left="$left $p($st)"
done
[ -z "$left" ] || fail "processes left behind:$left"
echo "PASS: hang detected in $took s, exit 76, no process left"
