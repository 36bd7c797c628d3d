#!/usr/bin/env bash
# dtrain launch: supervision and recovery, end to end with real mpirun workers.
#   launch.sh DTRAIN REPO DATA_DIR CASE
# CASE:
#   recover      a worker SIGKILLed mid-run: the launcher restarts from the newest checkpoint and
#                the run ends bit-identical (exported model, final optimizer state) to an
#                uninterrupted one; launch.json records both attempts and the cause
#   no-retry     the same kill with --max-failures 0: exit 1, the message names worker and signal
#   bad-data     a missing data file fails the first attempt with a config/data error: not retried
#   preempt      SIGTERM to the launcher: a final committed checkpoint, exit 75; launching again
#                continues to a result bit-identical to an uninterrupted run
#   bad-input    unknown config key, impossible resources, unresolvable host, missing mpirun:
#                one line each, exit 2, no worker started (no run directory created)
#   hang         a worker stopped (SIGSTOP) mid-run with dist.timeout_s=5: the other's watchdog
#                ends the attempt (exit 76, cause "hang: rank 0 (host ...): ... (dist.timeout_s):
#                rank 1 (host ..., pid P) has not reached it" or "... is stopped inside it",
#                reason "hang" in launch.json), the launcher restarts from the newest checkpoint
#                and the run ends bit-identical to an uninterrupted one
#   long         >= 5 injected failures over >= 2000 steps: completes, every attempt recorded,
#                each restart resumes from at least the last checkpoint committed before the
#                kill (so at most two intervals back: one save in flight, by back-pressure)
set -uo pipefail
dtrain=$1 repo=$2 data=$3 case=$4
tmp=$(mktemp -d)
trap 'pkill -KILL -f "output.dir=$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
steps=120
[ "$case" = long ] && steps=2000
common=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
        data.seq_len=32 data.batch=2 train.steps=$steps train.log_every=1 ckpt.every_steps=10
        ckpt.keep_last=2 schedule.warmup_steps=5 output.dir="$tmp")
launch() { "$dtrain" launch -n 2 --backoff 0.2 "$@"; }
# waits for a line in a log (pattern), at most 60 s
wait_for() { for _ in $(seq 1200); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
run_dir() { echo "$tmp/llama-tiny-fortunes/$1"; }
same() { # run_a run_b: exported model and final optimizer state
  local a b f ok=0
  a=$(run_dir "$1") b=$(run_dir "$2")
  for f in model/model.safetensors checkpoints/step-$(printf %09d $steps)/optim-00000-of-00001.safetensors; do
    cmp -s "$a/$f" "$b/$f" && echo "identical: $f" || { echo "differs: $f"; ok=1; }
  done
  return $ok
}
kill_worker_after() { # log pattern: SIGKILL one worker of run NAME (of this test: its output.dir) once the pattern is in the log
  wait_for "$1" "$2" || fail "never saw '$2'"
  pkill -KILL -n -f "dtrain train .*output.dir=$tmp .*output.run_name=$3" || fail "no worker to kill"
}

rank_pid() { # rank run: the pid of that worker of run NAME (its environment names its rank)
  local p
  for p in $(pgrep -f "dtrain train .*output.dir=$tmp .*output.run_name=$2"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$p"; return 0; }
  done
  return 1
}

case $case in
hang)
  launch "${common[@]}" output.run_name=full > "$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "uninterrupted run"; }
  launch "${common[@]}" dist.timeout_s=5 output.run_name=hung > "$tmp/hung.log" 2>&1 &
  pid=$!
  wait_for "$tmp/hung.log" "checkpoint step 30 committed" || fail "never saw checkpoint 30"
  r1=$(rank_pid 1 hung) || fail "no worker of rank 1"
  kill -STOP "$r1" || fail "cannot stop worker $r1"
  wait $pid || { grep -v "\] step" "$tmp/hung.log"; fail "the launcher did not recover (exit $?)"; }
  grep -v "\] step" "$tmp/hung.log" | grep -E "launch|resumed|no progress" | cut -c1-220
  grep -Eq "^dtrain launch: attempt 0 failed: hang: rank 0 \(host [^)]+\): .* made no progress for [0-9]+ s \(dist.timeout_s\): rank 1 \(host [^,]+, pid $r1\) (has not reached it|is stopped inside it)$" "$tmp/hung.log" || fail "no line naming the hang, the rank, dist.timeout_s and the stopped rank 1 (pid $r1)"
  python3 - "$(run_dir hung)/launch.json" <<'PY' || fail "launch.json check"
import json, sys
r = json.load(open(sys.argv[1]))
a = r["attempts"]
print(r["status"], [(x["exit_status"], x["reason"], x["resumed_from_step"], x["cause"][:90]) for x in a])
assert r["status"] == "done" and len(a) == 2, "expected 2 attempts, done"
assert a[0]["exit_status"] == 76 and a[0]["reason"] == "hang", "attempt 0: exit 76, reason hang"
assert a[0]["cause"].startswith("hang: rank 0 (host ") and "(dist.timeout_s)" in a[0]["cause"]
assert a[1]["reason"] == "finished" and a[1]["resumed_from_step"] >= 30, "resumed from >= step 30"
PY
  same full hung || fail "the run recovered from a hang differs from the uninterrupted one"
  ;;
recover)
  launch "${common[@]}" output.run_name=full > "$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; fail "uninterrupted run"; }
  launch "${common[@]}" output.run_name=hit > "$tmp/hit.log" 2>&1 &
  pid=$!
  kill_worker_after "$tmp/hit.log" "checkpoint step 30 committed" hit
  wait $pid || { grep -v "\] step" "$tmp/hit.log"; fail "the launcher did not recover (exit $?)"; }
  grep -v "\] step" "$tmp/hit.log" | grep -E "launch|resumed|killed" | cut -c1-160
  n=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(len(r['attempts']), r['status'], r['attempts'][0]['cause'])" "$(run_dir hit)/launch.json")
  echo "launch.json: $n"
  case $n in "2 done worker "*" killed by signal 9"*) ;; *) fail "launch.json: expected 2 attempts, done, a killed worker: $n" ;; esac
  same full hit || fail "the recovered run differs from the uninterrupted one"
  ;;
no-retry)
  launch --max-failures 0 "${common[@]}" output.run_name=once > "$tmp/once.log" 2>&1 &
  pid=$!
  kill_worker_after "$tmp/once.log" "checkpoint step 10 committed" once
  wait $pid; rc=$?
  [ $rc = 1 ] || fail "exit status $rc, expected 1"
  grep -E "^dtrain launch: attempt 0 failed: worker [01] killed by signal 9" "$tmp/once.log" || { cat "$tmp/once.log" | grep -v "\] step"; fail "no line naming the worker and the signal"; }
  grep -q "giving up after 1 failure" "$tmp/once.log" || fail "no 'giving up' line"
  ;;
bad-data)
  timeout 120 "$dtrain" launch -n 2 --max-failures -1 "${common[@]}" data.train="$tmp/nope" output.run_name=bad > "$tmp/bad.log" 2>&1; rc=$?
  grep -v "^\[w" "$tmp/bad.log"
  [ $rc = 1 ] || fail "exit status $rc, expected 1 (and not a timeout: 124)"
  grep -q "not retrying a config or data error" "$tmp/bad.log" || fail "retried a data error"
  [ "$(grep -c "^dtrain launch: attempt" "$tmp/bad.log")" = 1 ] || fail "more than one attempt"
  grep -q "$tmp/nope" "$tmp/bad.log" || fail "the error does not name the missing path"
  ;;
preempt)
  launch "${common[@]}" output.run_name=full > "$tmp/full.log" 2>&1 || fail "uninterrupted run"
  "$dtrain" launch -n 2 "${common[@]}" output.run_name=pre > "$tmp/pre.log" 2>&1 &
  pid=$! # the launcher itself (not a subshell): SIGTERM goes to it
  wait_for "$tmp/pre.log" "checkpoint step 20 committed" || fail "no checkpoint"
  kill -TERM $pid
  wait $pid; rc=$?
  grep -v "\] step" "$tmp/pre.log" | tail -5 | cut -c1-160
  [ $rc = 75 ] || fail "exit status $rc after SIGTERM, expected 75"
  grep -q "preemption): snapshot" "$tmp/pre.log" || fail "no preemption checkpoint"
  stopped=$(sed -nE 's/^\[w0\] stopped at step ([0-9]+).*/\1/p' "$tmp/pre.log")
  [ -f "$(run_dir pre)/checkpoints/step-$(printf %09d "$stopped")/trainer_state.json" ] || fail "preemption checkpoint not committed"
  launch "${common[@]}" output.run_name=pre > "$tmp/pre2.log" 2>&1 || fail "relaunch"
  grep "resumed from" "$tmp/pre2.log" || fail "relaunch did not resume"
  same full pre || fail "the preempted + relaunched run differs from the uninterrupted one"
  ;;
bad-input)
  check() { # expected-substring, launch args...
    local want=$1; shift
    out=$("$dtrain" launch "$@" 2>&1); rc=$?
    echo "exit $rc: $out"
    [ $rc = 2 ] || fail "exit $rc, expected 2"
    [ "$(echo "$out" | wc -l)" = 1 ] || fail "expected one line"
    echo "$out" | grep -q -- "$want" || fail "the line does not mention '$want'"
  }
  check "optim.lrr" -n 2 "${common[@]}" optim.lrr=1 output.run_name=x
  check "64 workers x 1 threads need 64 cores" -n 64 "${common[@]}" output.run_name=x
  check "hosts offer 3 slots" -n 4 --hosts localhost:2,localhost:1 "${common[@]}" output.run_name=x
  check "nosuchhost.invalid" -n 2 --hosts nosuchhost.invalid:2 "${common[@]}" output.run_name=x
  check "not found" -n 2 --mpirun /nonexistent/mpirun "${common[@]}" output.run_name=x
  [ ! -e "$tmp/llama-tiny-fortunes/x" ] || fail "a run directory was created"
  ;;
long)
  launch --max-failures -1 "${common[@]}" ckpt.every_steps=100 output.run_name=long > "$tmp/long.log" 2>&1 &
  pid=$!
  for k in 1 2 3 4 5; do
    # a kill every ~350 steps, each after the next checkpoint commit
    wait_for "$tmp/long.log" "checkpoint step $((k * 300 + 100)) committed" || fail "no checkpoint $((k * 300 + 100))"
    sleep 0.$((RANDOM % 5))
    pkill -KILL -n -f "dtrain train .*output.dir=$tmp .*output.run_name=long" || fail "no worker to kill"
    wait_for "$tmp/long.log" "resumed from .*step-0*$((k * 300 + 100))\|resumed from .*step-0*$((k * 300 + 200))" || fail "restart $k did not resume"
  done
  wait $pid || fail "the long run failed"
  python3 - "$(run_dir long)/launch.json" "$tmp/long.log" <<'PY' || fail "launch.json check"
import json, re, sys
r = json.load(open(sys.argv[1]))
a = r["attempts"]
print(r["status"], len(a), "attempts:", [(x["resumed_from_step"], x["last_step"], x["cause"]) for x in a])
assert r["status"] == "done" and len(a) >= 6, "expected done after >= 6 attempts"
assert a[-1]["last_step"] == 2000
# No committed checkpoint is ever lost: each restart resumes from at least the last commit the
# log showed before it (a commit whose line the kill swallowed may make it later, never earlier).
committed, restarts = 0, 0
for line in open(sys.argv[2], errors="replace"):
    m = re.search(r"checkpoint step (\d+) committed", line)
    if m: committed = max(committed, int(m.group(1)))
    m = re.search(r"resumed from .*step-0*(\d+)", line)
    if m:
        restarts += 1
        assert int(m.group(1)) >= committed, f"resumed from step {m.group(1)}, but step {committed} had been committed"
assert restarts == len(a) - 1, f"{restarts} resumes in the log for {len(a)} attempts"
for prev, cur in zip(a, a[1:]):
    # Saves are asynchronous with back-pressure (a save waits for the previous one to commit),
    # so at most one snapshot is uncommitted at a kill: at most two intervals are lost. How
    # much of the second one depends on how many steps run while the writer fsyncs.
    lost = prev["last_step"] - cur["resumed_from_step"]
    assert 0 <= lost <= 2 * 100, f"attempt {cur['attempt']} lost {lost} steps (> two checkpoint intervals)"
PY
  ;;
*) fail "unknown case $case" ;;
esac
echo "PASS: $case"
