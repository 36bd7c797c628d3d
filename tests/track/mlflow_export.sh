#!/usr/bin/env bash
# `dtrain runs export --format mlflow` end to end: real `dtrain train` runs of the tiny Llama
# write a store; the export is read back with MLflow's own client (the venv's mlflow,
# tests/track/mlflow_check.py) and compared with `runs export --format json/csv`:
#   - run m has 3 attempts: 10 steps with checkpoints, a restart of the same run from step 0
#     (ckpt.resume=never: steps 5 and 10 again), a resume to step 15; its metric histories
#     must keep all 5 loss values, repeated steps included
#   - keys MLflow rejects (a param "weird key[0]", "../up", a tag "bad:tag", a metric "loss/x"
#     that would need metrics/loss to be a folder too, with a NaN) arrive renamed, as listed
#   - run o of the same experiment (marked preempted in the store): KILLED, same experiment id
#   - exporting m again replaces it (same run id, still 2 runs, no leftovers)
#   - errors: an unknown run, -o naming a file, a path under a file, an unwritable place: exit 1,
#     one line naming it, nothing written
# Exit 77 (skipped) when the venv has no mlflow (scripts/setup-venv.sh installs it).
#   mlflow_export.sh DTRAIN REPO DATA_DIR
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3
py=${DT_VENV_PYTHON:-${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python}
if ! "$py" -c "import mlflow.tracking" 2> /dev/null; then
    echo "skipped: no mlflow for $py (scripts/setup-venv.sh installs it)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
db="$tmp/runs/dtrain.db" out="$tmp/mlruns" exp=llama-tiny-fortunes
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=32 data.batch=4 train.threads=1 schedule.warmup_steps=2 train.log_every=5
      ckpt.every_steps=5 output.dir="$tmp/runs")
train() { # LOG ARGS...
    local log="$tmp/$1.log"
    shift
    "$dtrain" train "${args[@]}" "$@" > "$log" 2>&1 || { cat "$log"; fail "training $log failed"; }
}
sql() { python3 -c 'import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); r = c.execute(sys.argv[2]).fetchone(); c.commit(); r and print(r[0])' "$db" "$1"; }

train m1 train.steps=10 output.run_name=m
train m2 train.steps=10 output.run_name=m ckpt.resume=never
train m3 train.steps=15 output.run_name=m
grep -q "^resumed from .*step 10" "$tmp/m3.log" || fail "attempt 3 did not resume from step 10"
train o train.steps=5 output.run_name=o
m=$(sql "SELECT id FROM runs WHERE name = 'm'") now=$(date +%s)
sql "INSERT INTO params VALUES ($m, 'weird key[0]', 'v1'), ($m, '../up', 'v2')"
sql "INSERT INTO tags VALUES ($m, 'bad:tag', 'v3')"
sql "INSERT INTO metrics VALUES ($m, 'loss/x', 1, $now.25, 0.5, 1), ($m, 'loss/x', 2, $now.5, NULL, 3)"
sql "UPDATE runs SET status = 'preempted' WHERE name = 'o'"

for r in m o; do
    "$dtrain" runs export $r --db "$db" --format json -o "$tmp/$r.json"
    "$dtrain" runs export $r --db "$db" --format csv -o "$tmp/$r.csv"
done
# the scenario itself: loss of 3 attempts, steps 5 and 10 twice
[ "$(grep -c '^loss,' "$tmp/m.csv")" = 5 ] && [ "$(grep '^loss,' "$tmp/m.csv" | cut -d, -f5 |
    sort -u | tr '\n' ' ')" = "1 2 3 " ] && [ "$(grep -c '^loss,10,' "$tmp/m.csv")" = 2 ] ||
    { cat "$tmp/m.csv"; fail "run m: expected loss at steps 5 10 5 10 15 over 3 attempts"; }

"$dtrain" runs export m --db "$db" --format mlflow -o "$out" | tee "$tmp/x1"
"$dtrain" runs export $exp/o --db "$db" --format mlflow -o "$out" | tee "$tmp/x2"
id_m=$("$py" "$repo/tests/track/mlflow_check.py" "$out" "$tmp/m.json" "$tmp/m.csv" 2 FINISHED |
    tee /dev/stderr | tail -1)
"$py" "$repo/tests/track/mlflow_check.py" "$out" "$tmp/o.json" "$tmp/o.csv" 2 KILLED > /dev/null
eid=$(sed -E 's/.* of experiment ([0-9]+) .*/\1/' "$tmp/x1")
[ "$eid" = "$(sed -E 's/.* of experiment ([0-9]+) .*/\1/' "$tmp/x2")" ] ||
    fail "runs of one experiment exported into two experiments"
grep -q "^mlflow run $id_m " "$tmp/x1" || fail "the printed run id is not the one MLflow reads"
ren="$out/$eid/$id_m/artifacts/dtrain_renamed_keys.tsv"
for want in $'params\tweird key[0]\tweird key_0_' $'params\t../up\t_./up' \
    $'tags\tbad:tag\tbad_tag' $'metrics\tloss/x\tloss_x'; do
    grep -qxF "$want" "$ren" || { cat "$ren"; fail "rename not listed: $want"; }
done
[ "$(wc -l < "$ren")" = 5 ] || { cat "$ren"; fail "renamed keys other than the four"; }
[ "$(cut -d' ' -f2 "$out/$eid/$id_m/metrics/loss_x" | tr '\n' ' ')" = "0.5 nan " ] ||
    fail "metric loss/x: $(cat "$out/$eid/$id_m/metrics/loss_x")"
# no Default experiment duplicated, nothing left of the writing
[ "$(LC_ALL=C ls -A "$out" | tr '\n' ' ')" = ".trash 0 $eid " ] || fail "DIR holds: $(ls -A "$out")"

# again, after the run changed: replaced in place
sql "UPDATE tags SET value = 'v4' WHERE run_id = $m AND key = 'bad:tag'"
"$dtrain" runs export $exp/m --db "$db" --format json -o "$tmp/m.json"
"$dtrain" runs export m --db "$db" --format mlflow -o "$out" > "$tmp/x3"
cmp -s <(cut -d: -f1 "$tmp/x1") <(cut -d: -f1 "$tmp/x3") || fail "re-export: $(cat "$tmp/x3")"
"$py" "$repo/tests/track/mlflow_check.py" "$out" "$tmp/m.json" "$tmp/m.csv" 2 FINISHED > /dev/null
[ "$(cat "$out/$eid/$id_m/tags/bad_tag")" = v4 ] || fail "re-export did not replace the run"
[ "$(ls -A "$out/$eid" | wc -l)" = 3 ] || fail "experiment folder holds: $(ls -A "$out/$eid")"

# errors: exit 1, one line naming the run or path, nothing created
err() { # WHAT NAME ARGS...: runs export ARGS, expects exit 1 and one stderr line with NAME
    local rc=0
    "$dtrain" runs export "${@:3}" --db "$db" --format mlflow > "$tmp/out" 2> "$tmp/err" || rc=$?
    [ $rc = 1 ] && [ "$(wc -l < "$tmp/err")" = 1 ] && grep -q "^dtrain runs export: .*$2" "$tmp/err" ||
        fail "$1: rc $rc: $(cat "$tmp/err")"
    [ ! -s "$tmp/out" ] || fail "$1: printed $(cat "$tmp/out")"
    cat "$tmp/err"
}
err "unknown run" nope nope -o "$tmp/new"
[ ! -e "$tmp/new" ] || fail "an unknown run created -o"
: > "$tmp/file"
err "-o a file" "$tmp/file" m -o "$tmp/file"
err "-o under a file" "$tmp/file" m -o "$tmp/file/sub"
[ ! -s "$tmp/file" ] || fail "the file was written"
err "-o unwritable" /proc/dtrain-mlflow-test m -o /proc/dtrain-mlflow-test
echo "ok"
