#!/usr/bin/env bash
# The experiment store end to end: real `dtrain train` runs of the tiny Llama write
# <output.dir>/dtrain.db; `dtrain runs` reads it; python3's sqlite3/csv/json check the files.
#   CASE compare   two runs at once on one store (optim.lr 0.003 and 0.001): both complete with
#                  every metric row (concurrent writers); `runs ls` and its filters; `runs
#                  compare` shows exactly one differing param, optim.lr, and final/best metrics
#                  equal to the stored values; `runs export` csv and json parse and hold every
#                  row; `runs show`; `runs rm`; usage errors (exit 2) and a missing store (1)
#   CASE attempts  a run SIGKILLed after its first committed checkpoint shows as 'lost' with one
#                  attempt; resumed, it is the same run with 2 attempts, done, metrics and
#                  checkpoints of both attempts, tagged with the step it resumed from
#   CASE degraded  tracking.uri in /proc (read-only), under a regular file (unreachable), and a
#                  store whose metric writes fail mid-run: training completes (exit 0, model
#                  written) with exactly one tracking warning; tracking.uri=off writes no store
#   runs_cli.sh DTRAIN REPO DATA_DIR CASE
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3 case=$4
tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ]; then kill -KILL "$pid" 2> /dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL ($case): $*"
    exit 1
}
db="$tmp/runs/dtrain.db"
exp=llama-tiny-fortunes
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=32 data.batch=4 train.threads=1 schedule.warmup_steps=2 train.log_every=5
      output.dir="$tmp/runs")
sql() { python3 -c 'import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$db" "$1"; }
# a value as the CLI prints it (C's %.6g)
sqlg() { python3 -c 'import sqlite3, sys; print("%.6g" % sqlite3.connect(sys.argv[1]).execute(sys.argv[2]).fetchone()[0])' "$db" "$1"; }
# LM log keys (1 process): loss lr grad_norm samples_per_s tokens_per_s data_wait data_wait_s
# device.0; eval: 3 keys
LOG_KEYS=8 EVAL_KEYS=3

case $case in
compare)
    for r in 1 2; do
        lr=$([ $r = 1 ] && echo 0.003 || echo 0.001)
        "$dtrain" train "${args[@]}" data.val="$data/fortunes/val" train.steps=20 \
            optim.lr=$lr output.run_name=r$r > "$tmp/r$r.log" 2>&1 &
        eval "pid$r=\$!"
    done
    wait "$pid1" || { cat "$tmp/r1.log"; fail "run r1 failed"; }
    wait "$pid2" || { cat "$tmp/r2.log"; fail "run r2 failed"; }
    grep -i "warning\|locked" "$tmp/r1.log" "$tmp/r2.log" && fail "a run warned"
    want=$((20 / 5 * LOG_KEYS + EVAL_KEYS))
    for r in r1 r2; do
        n=$(sql "SELECT COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = '$r'")
        [ "$n" = "$want" ] || fail "$r: $n metric rows, expected $want"
    done
    "$dtrain" runs ls --output-dir "$tmp/runs" | tee "$tmp/ls"
    [ "$(grep -c " done " "$tmp/ls")" = 2 ] || fail "ls: two done runs expected"
    "$dtrain" runs ls --db "$db" --experiment $exp --status done | grep -c " done " | grep -qx 2 ||
        fail "ls --experiment --status done"
    "$dtrain" runs ls --db "$db" --status failed | grep -q "(no runs" || fail "ls --status failed"
    "$dtrain" runs ls --db "$db" --experiment nope | grep -q "(no runs" || fail "ls --experiment"

    "$dtrain" runs compare r1 r2 --db "$db" | tee "$tmp/cmp"
    sed -n '/^params that differ:/,/^metrics/p' "$tmp/cmp" | sed '1d;$d' > "$tmp/diff"
    [ "$(wc -l < "$tmp/diff")" = 1 ] || fail "compare: expected exactly one differing param"
    read -r key v1 v2 < "$tmp/diff"
    [ "$key $v1 $v2" = "optim.lr 0.003 0.001" ] || fail "compare: '$key $v1 $v2'"
    for r in r1 r2; do
        for k in loss eval_loss; do
            v=$(sqlg "SELECT value FROM metrics m JOIN runs r ON r.id = m.run_id
                     WHERE r.name = '$r' AND key = '$k' ORDER BY attempt DESC, step DESC LIMIT 1")
            grep -E "^  $k final " "$tmp/cmp" | grep -qF "$v @ 20" || fail "compare: $r $k final $v"
        done
        v=$(sqlg "SELECT MAX(value) FROM metrics m JOIN runs r ON r.id = m.run_id
                 WHERE r.name = '$r' AND key = 'eval_accuracy'")
        grep -E "^  eval_accuracy best \(max\) " "$tmp/cmp" | grep -qF "$v @" ||
            fail "compare: $r eval_accuracy best $v"
    done

    "$dtrain" runs export r1 --format csv --db "$db" -o "$tmp/r1.csv"
    "$dtrain" runs export $exp/r1 --format json --db "$db" > "$tmp/r1.json"
    python3 - "$tmp/r1.csv" "$tmp/r1.json" "$want" << 'EOF' || fail "export csv/json"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
d = json.load(open(sys.argv[2]))
want = int(sys.argv[3])
assert len(rows) == want == len(d["metrics"]), (len(rows), len(d["metrics"]), want)
for r, m in zip(rows, d["metrics"]):
    assert r["key"] == m["key"] and int(r["step"]) == m["step"] and int(r["attempt"]) == m["attempt"]
    assert float(r["value"]) == m["value"], (r, m)
assert d["run"]["name"] == "r1" and d["run"]["status"] == "done" and d["run"]["attempts"] == 1
assert d["params"]["optim.lr"] == "0.003" and d["params"]["data.seq_len"] == "32"
assert len(d["lineage"]["config_hash"]) == 16 and len(d["lineage"]["dataset.train"]) == 16
kinds = [a["kind"] for a in d["artifacts"]]
assert kinds == ["model"] and d["artifacts"][0]["uri"].endswith("/r1/model"), d["artifacts"]
assert abs(d["artifacts"][0]["metrics"]["loss"] - [m for m in d["metrics"] if m["key"] == "loss"][-1]["value"]) < 1e-9
print("export ok:", len(rows), "rows")
EOF
    "$dtrain" runs show r2 --db "$db" > "$tmp/show"
    grep -q "^  status      done" "$tmp/show" && grep -q "^  attempts    1" "$tmp/show" &&
        grep -qE "^  optim.lr +0.001$" "$tmp/show" && grep -qE "^  code_version " "$tmp/show" ||
        { cat "$tmp/show"; fail "show r2"; }

    id1=$(sql "SELECT id FROM runs WHERE name = 'r1'")
    "$dtrain" runs rm r1 --db "$db" | grep -q "removed run $id1" || fail "rm r1"
    [ "$(sql "SELECT COUNT(*) FROM metrics WHERE run_id = $id1")" = 0 ] || fail "rm left metrics"
    [ "$("$dtrain" runs ls --db "$db" | grep -c " done ")" = 1 ] || fail "ls after rm"
    rc=0; "$dtrain" runs show r1 --db "$db" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] || fail "show of a removed run: rc $rc"
    rc=0; "$dtrain" runs export r2 --db "$db" 2> "$tmp/err" || rc=$?
    [ $rc = 2 ] || fail "export without --format: rc $rc"
    rc=0; "$dtrain" runs compare r2 --db "$db" 2> "$tmp/err" || rc=$?
    [ $rc = 2 ] || fail "compare of one run: rc $rc"
    rc=0; "$dtrain" runs ls --db "$tmp/none.db" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && grep -q "$tmp/none.db" "$tmp/err" && [ ! -e "$tmp/none.db" ] ||
        fail "missing store: rc $rc: $(cat "$tmp/err")"
    ;;
attempts)
    # attempt 1 would run 5000 steps: it is killed after its first committed checkpoint
    stdbuf -oL "$dtrain" train "${args[@]}" train.steps=5000 ckpt.every_steps=10 \
        output.run_name=k > "$tmp/a1.log" 2>&1 &
    pid=$!
    for _ in $(seq 1500); do # 30 s at most
        grep -q "^checkpoint step [0-9]* committed" "$tmp/a1.log" && break
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.02
    done
    grep -q "^checkpoint step [0-9]* committed" "$tmp/a1.log" || { cat "$tmp/a1.log"; fail "no commit"; }
    # the commit's line is printed before the store records the checkpoint, and metrics reach
    # the file at each checkpoint's snapshot or every 2 s (a SIGKILL loses what is still
    # buffered): wait for both in the store
    for _ in $(seq 500); do
        [ -f "$db" ] && [ "$(sql "SELECT COUNT(*) FROM metrics")" -gt 0 ] &&
            [ "$(sql "SELECT COUNT(*) FROM artifacts WHERE kind = 'checkpoint'")" -gt 0 ] && break
        sleep 0.02
    done
    kill -0 "$pid" 2> /dev/null || { cat "$tmp/a1.log"; fail "attempt 1 ended before it was killed"; }
    kill -KILL "$pid"
    wait "$pid" 2> /dev/null || true
    pid=
    "$dtrain" runs ls --db "$db" | tee "$tmp/ls"
    grep -qE "^[0-9]+ +$exp +k +lost +1 " "$tmp/ls" || fail "killed run not shown as lost, 1 attempt"
    n1=$(sql "SELECT COUNT(*) FROM metrics")
    # attempt 2: resumes from the newest checkpoint (K or, if the kill hit just after a commit
    # was written, K + 10) and trains 30 more steps
    K=$(sed -nE 's/^checkpoint step ([0-9]+) committed.*/\1/p' "$tmp/a1.log" | tail -1)
    end=$((K + 30))
    "$dtrain" train "${args[@]}" train.steps=$end ckpt.every_steps=10 output.run_name=k \
        > "$tmp/a2.log" 2>&1 || { cat "$tmp/a2.log"; fail "resumed run failed"; }
    grep -q "^resumed from" "$tmp/a2.log" || fail "attempt 2 did not resume"
    from=$(sed -nE 's/^resumed from .*: step ([0-9]+).*/\1/p' "$tmp/a2.log")
    "$dtrain" runs show k --db "$db" > "$tmp/show"
    sed '/^artifacts:/,$d' "$tmp/show"
    grep -q "^  status      done" "$tmp/show" && grep -q "^  attempts    2" "$tmp/show" &&
        grep -qE "^  resumed_from_step +$from$" "$tmp/show" || fail "show after the resume"
    [ "$(sql "SELECT COUNT(*) FROM runs")" = 1 ] || fail "the resume made a second run"
    [ "$(sql "SELECT group_concat(a) FROM (SELECT DISTINCT attempt a FROM metrics ORDER BY a)")" = 1,2 ] ||
        fail "metrics of both attempts expected"
    [ "$(sql "SELECT COUNT(DISTINCT attempt) FROM artifacts WHERE kind = 'checkpoint'")" = 2 ] ||
        fail "checkpoints of both attempts expected"
    want=$(((end - from) / 5 * LOG_KEYS))
    [ "$(sql "SELECT COUNT(*) FROM metrics WHERE attempt = 2")" = "$want" ] ||
        fail "attempt 2: expected $want metric rows"
    echo "attempt 1 left $n1 metric rows; attempt 2 resumed at step $from"
    ;;
degraded)
    : > "$tmp/file"
    run() { # NAME URI: trains 10 steps; sets $log
        log="$tmp/$1.log"
        "$dtrain" train "${args[@]}" train.steps=10 output.run_name="$1" tracking.uri="$2" \
            > "$log" 2> "$log.err" || { cat "$log" "$log.err"; fail "$1: training failed"; }
        [ -f "$tmp/runs/$exp/$1/model/model.safetensors" ] || fail "$1: no model written"
    }
    one_warning() { # NAME WORD
        cat "$log.err"
        [ "$(grep -c "tracking" "$log.err")" = 1 ] && [ "$(wc -l < "$log.err")" = 1 ] &&
            grep -q "^warning: tracking: .*$2" "$log.err" || fail "$1: expected one tracking warning"
    }
    run ro /proc/dtrain-track-test.db
    one_warning ro /proc/dtrain-track-test.db
    run unreachable "$tmp/file/dtrain.db"
    one_warning unreachable "$tmp/file/dtrain.db"
    run off off
    [ ! -s "$log.err" ] && [ ! -e "$db" ] || fail "tracking.uri=off wrote a store or warned"
    # a store whose metric inserts fail: the run begins, then its metric writes fail
    python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute("CREATE TABLE metrics(run_id, key, step, wall, value, attempt, CHECK(0))")' "$tmp/bad.db"
    run broken "$tmp/bad.db"
    one_warning broken "$tmp/bad.db"
    run fine ""
    [ ! -s "$log.err" ] && [ -f "$db" ] || fail "default store: warning or no $db"
    [ "$(sql "SELECT status FROM runs WHERE name = 'fine'")" = done ] || fail "default store"
    ;;
*) fail "unknown case" ;;
esac
echo "ok ($case)"
