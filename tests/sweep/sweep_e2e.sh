#!/usr/bin/env bash
# An end-to-end sweep on the tiny Llama (src/sweep/, dtrain sweep): 6 Sobol trials over the
# learning rate and weight decay, 9 steps, ASHA (grace 1, rf 3: rungs 1, 3, 9), 2 slots.
#   1. the sweep is SIGKILLed, with its trials (their whole process group: a lost machine),
#      once two trials have finished and others are running;
#   2. `dtrain sweep --resume` finishes it: the trials finished before the kill are not run
#      again (same segments in sweep.json, same attempts in the store), every trial ends done
#      or stopped, ASHA stopped some, and each promoted trial was resumed from its checkpoint
#      (its log says so, and its run has one attempt per segment);
#   3. every trial is a run of the store tagged with the sweep's id and its parent (the sweep's
#      own run); `dtrain runs ls` lists the sweep; `sweep show --json` names the best, which
#      is the trial with the lowest loss among those that reached step 9.
#   sweep_e2e.sh DTRAIN REPO DATA_DIR [sigterm]
# sigterm: a sweep without early stopping gets SIGTERM while its trials train: they checkpoint,
# the sweep exits 75 with them `promoted` in sweep.json, and --resume finishes them from their
# checkpoints (exit 0, two attempts each). Bad sweep files are refused first (exit 2, one line,
# nothing created).
set -euo pipefail
dtrain=$1 repo=$2 data=$3 case=${4:-kill}
tmp=$(mktemp -d)
pg=
trap '[ -n "$pg" ] && kill -9 -- -"$pg" 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
cat > "$tmp/sweep.yaml" <<EOF
base: $repo/examples/llama-tiny-fortunes.yaml
overrides:
  data.train: $data/fortunes/train
  data.val: ""
  data.seq_len: 32
  data.batch: 4
  train.log_every: 1
  output.dir: $tmp/runs
  output.export: false
  schedule.warmup_steps: 0
parameters:
  optim.lr: {min: 1.0e-4, max: 3.0e-2, distribution: log_uniform}
  optim.weight_decay: [0.0, 0.1]
sampler: sobol
trials: 6
max_concurrent: 2
max_steps: 9
metric: train_loss
early_stopping: {rule: asha, grace_period: 1, reduction_factor: 3}
EOF
js=$tmp/runs/llama-tiny-fortunes/sw/sweep.json
export OMP_NUM_THREADS=1

if [ "$case" = sigterm ]; then
    for bad in "optim.lrr: [1, 2]" "optim.lr: [0.1, fast]" "output.dir: [a, b]"; do
        sed "/^parameters:/,/^sampler/{/^  /d}; s|^parameters:|parameters:\n  $bad|" \
            "$tmp/sweep.yaml" > "$tmp/bad.yaml"
        rc=0
        "$dtrain" sweep "$tmp/bad.yaml" --name bad > "$tmp/bad.out" 2> "$tmp/bad.err" || rc=$?
        [ "$rc" = 2 ] && [ "$(wc -l < "$tmp/bad.err")" = 1 ] && grep -q "bad.yaml:" "$tmp/bad.err" ||
            { cat "$tmp/bad.err"; fail "'$bad': exit $rc, not one line naming the file"; }
        [ ! -e "$tmp/runs" ] || fail "'$bad': something was created"
        echo "ok: refused: $(cat "$tmp/bad.err")"
    done
    # --json: a refusal is an object too (status refused, exit_code 2), the error one line
    rc=0
    "$dtrain" sweep "$tmp/bad.yaml" --name bad --json > "$tmp/bad.json" 2> "$tmp/bad.err" || rc=$?
    python3 - "$tmp/bad.json" <<'EOF' || fail "--json refusal: $(cat "$tmp/bad.json")"
import json, sys
o = json.load(open(sys.argv[1]))
assert o["status"] == "refused" and o["exit_code"] == 2 and "bad.yaml" in o["error"], o
EOF
    [ "$rc" = 2 ] && [ "$(wc -l < "$tmp/bad.err")" = 1 ] || fail "--json refusal: exit $rc"
    echo "ok: --json refusal: $(cat "$tmp/bad.json")"
    # --dry-run --json is JSON whatever the values hold (a quote, a backslash)
    cat > "$tmp/quote.yaml" <<EOF
base: $repo/examples/llama-tiny-fortunes.yaml
parameters:
  data.train: ['a"b', 'c\d']
sampler: grid
EOF
    "$dtrain" sweep "$tmp/quote.yaml" --dry-run --json > "$tmp/quote.json" ||
        fail "--dry-run --json of values with a quote and a backslash"
    python3 - "$tmp/quote.json" <<'EOF' || { cat "$tmp/quote.json"; fail "--dry-run --json"; }
import json, sys
t = json.load(open(sys.argv[1]))["trials"]
assert t == [{"data.train": 'a"b'}, {"data.train": "c\\d"}], t
o = json.load(open(sys.argv[1]))
assert o["status"] == "done" and o["exit_code"] == 0, o
EOF
    echo "ok: --dry-run --json escapes a quote and a backslash"
    sed -i 's/^early_stopping:.*//; s/^max_steps: 9/max_steps: 40/; s/^trials: 6/trials: 2/' \
        "$tmp/sweep.yaml"
    sed -i 's/^overrides:/overrides:\n  ckpt.every_steps: 2/' "$tmp/sweep.yaml"
    "$dtrain" sweep "$tmp/sweep.yaml" --name sw --slots 2 --threads-per-slot 1 \
        > "$tmp/first.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do # both trials have a checkpoint
        n=$(ls -d "$tmp"/runs/llama-tiny-fortunes/sw-t00*/checkpoints/step-* 2>/dev/null |
            sed 's|/checkpoints/.*||' | sort -u | wc -l || true)
        [ "$n" -ge 2 ] && break
        sleep 0.1
    done
    kill -TERM "$pid"
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" = 75 ] || { cat "$tmp/first.log"; fail "SIGTERM: exit $rc, want 75"; }
    python3 -c "import json,sys; t=json.load(open(sys.argv[1]))
assert t['status'] == 'stopped' and all(x['status'] == 'promoted' for x in t['trials']), t" \
        "$js" || fail "sweep.json after SIGTERM"
    echo "ok: SIGTERM: exit 75, both trials promoted"
    "$dtrain" sweep --resume sw --output-dir "$tmp/runs" > "$tmp/resume.log" 2>&1 ||
        { cat "$tmp/resume.log"; fail "--resume after SIGTERM failed"; }
    for i in 0 1; do
        log=$tmp/runs/llama-tiny-fortunes/sw/sw-t00$i.log
        grep -q "resumed from .*/step-0000000[0-9][0-9]: step" "$log" ||
            fail "trial $i was not resumed from a checkpoint"
        "$dtrain" runs show "sw-t00$i" --output-dir "$tmp/runs" > "$tmp/show.txt"
        grep -Eq "^ *attempts +2$" "$tmp/show.txt" || fail "trial $i: not two attempts"
    done
    python3 -c "import json,sys; t=json.load(open(sys.argv[1]))
assert t['status'] == 'done' and all(x['status'] == 'done' and x['step'] == 40
    for x in t['trials']), t" "$js" || fail "sweep.json after --resume"
    echo "ok: --resume after SIGTERM: both trials done at step 40, resumed from checkpoints"
    exit 0
fi

# 1. start it in a process group of its own, kill the group mid-sweep
setsid "$dtrain" sweep "$tmp/sweep.yaml" --name sw --slots 2 --threads-per-slot 1 \
    > "$tmp/first.log" 2>&1 &
pg=$!
for _ in $(seq 600); do
    n=$(python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['trials']
print(sum(x['status'] in ('done','stopped') for x in t), sum(x['status']=='running' for x in t))" \
        "$js" 2>/dev/null || echo "0 0")
    set -- $n
    [ "$1" -ge 2 ] && [ "$2" -ge 1 ] && break
    kill -0 "$pg" 2>/dev/null || { cat "$tmp/first.log"; fail "the sweep ended before the kill"; }
    sleep 0.1
done
kill -9 -- -"$pg"
wait "$pg" 2>/dev/null || true
pg=
cp "$js" "$tmp/killed.json"
left=$(python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['trials']
print(sum(x['status'] not in ('done','stopped') for x in t), sum(x['status']=='running' for x in t))" \
    "$tmp/killed.json")
set -- $left
[ "$1" -ge 1 ] || fail "the sweep had finished every trial before the kill"
echo "ok: killed with $1 trials unfinished, $2 of them running"
"$dtrain" runs ls --output-dir "$tmp/runs" > "$tmp/ls-killed.txt"

# 2. resume
"$dtrain" sweep --resume sw --output-dir "$tmp/runs" --json > "$tmp/resume.json" \
    2> "$tmp/resume.log" || { cat "$tmp/resume.log"; fail "--resume failed"; }
"$dtrain" runs ls --output-dir "$tmp/runs" > "$tmp/ls.txt"
"$dtrain" runs ls --output-dir "$tmp/runs" --sweep sw > "$tmp/ls-sweep.txt"
"$dtrain" runs ls --output-dir "$tmp/runs" --sweep other > "$tmp/ls-other.txt"
"$dtrain" runs ls --output-dir "$tmp/runs" --sweep sw --json > "$tmp/ls-sweep.json"
"$dtrain" sweep show sw --output-dir "$tmp/runs" --json > "$tmp/show.json"
"$dtrain" sweep show sw --output-dir "$tmp/runs"
# the best trial registered in one command (README): sweep:ID names its run
"$dtrain" models register sweep:sw --name best --output-dir "$tmp/runs" --json > "$tmp/reg.json" ||
    fail "models register sweep:sw failed"
if "$dtrain" models register sweep:nosuch --name best --output-dir "$tmp/runs" 2> "$tmp/reg.err"; then
    fail "models register sweep:nosuch succeeded"
fi
grep -q "sweep:nosuch" "$tmp/reg.err" || fail "sweep:nosuch: the error does not name it"
for i in 0 1 2 3 4 5; do
    "$dtrain" runs show "sw-t00$i" --output-dir "$tmp/runs" > "$tmp/show-$i.txt"
done
python3 - "$tmp" <<'EOF' || { cat "$tmp/resume.log"; exit 1; }
import json, re, sys
tmp = sys.argv[1]
before = {t["run"]: t for t in json.load(open(f"{tmp}/killed.json"))["trials"]}
after = json.load(open(f"{tmp}/show.json"))
res = json.load(open(f"{tmp}/resume.json"))
def attempts(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) > 4 and f[0].isdigit():
            out[f[2]] = int(f[4])
    return out
att_killed, att = attempts(f"{tmp}/ls-killed.txt"), attempts(f"{tmp}/ls.txt")
bad = []
trials = after["trials"]
if (after["status"] != "done" or after["exit_code"] != 0 or res["trials"] != 6
        or res["failed"] != 0 or res["status"] != "done" or res["exit_code"] != 0):
    bad.append(f"sweep status {after['status']}, result {res}")
for t in trials:
    b = before[t["run"]]
    if t["status"] not in ("done", "stopped"):
        bad.append(f"{t['run']} ended {t['status']}: {t['why']}")
    if b["status"] in ("done", "stopped"):  # finished before the kill: never run again
        if t["segments"] != b["segments"] or att[t["run"]] != att_killed[t["run"]]:
            bad.append(f"{t['run']} finished before the kill but ran again: segments "
                       f"{b['segments']} -> {t['segments']}, attempts {att_killed[t['run']]} "
                       f"-> {att[t['run']]}")
    want_step = {"done": 9}.get(t["status"], t["step"])
    if t["step"] != want_step or [r["step"] for r in t["reports"]] != [1, 3, 9][:len(t["reports"])]:
        bad.append(f"{t['run']}: step {t['step']}, reports {t['reports']}")
    log = open(f"{tmp}/runs/llama-tiny-fortunes/sw/{t['run']}.log").read()
    resumed = re.findall(r"resumed from \S+/step-0*(\d+): step", log)
    # one attempt per segment (fewer where the kill came before a process reached the
    # store); a trial trained past step 1 was resumed from a checkpoint at least once
    if not 1 <= att[t["run"]] <= t["segments"] or (t["step"] > 1 and not resumed):
        bad.append(f"{t['run']}: {t['segments']} segments, {att[t['run']]} attempts, "
                   f"resumed from {resumed}")
    show = open(f"{tmp}/show-{t['trial']}.txt").read()
    if not re.search(r"sweep_id\s+sw\b", show) or not re.search(r"sweep\.parent\s+\d", show):
        bad.append(f"{t['run']}: no sweep_id / sweep.parent tag in runs show")
stopped = [t for t in trials if t["status"] == "stopped"]
promoted = [t for t in trials if t["segments"] > 1]
if not stopped or not promoted:
    bad.append(f"ASHA stopped {len(stopped)} and promoted {len(promoted)} trials")
done = [t for t in trials if t["status"] == "done"]
best = min(done, key=lambda t: t["metric"]) if done else None
if not best or after["best"].get("run") != best["run"] or res["best"]["run"] != best["run"]:
    bad.append(f"best {after['best']} / {res['best']}, want {best and best['run']}")
reg = json.load(open(f"{tmp}/reg.json"))
if not best or reg["run"].split("/")[-1] != best["run"] or reg["step"] != best["step"]:
    bad.append(f"models register sweep:sw registered {reg['run']} step {reg['step']}, want "
               f"{best and best['run']} step {best and best['step']}")
if "sw " not in open(f"{tmp}/ls.txt").read():
    bad.append("runs ls does not list the sweep sw")
lsj = json.load(open(f"{tmp}/ls-sweep.json"))
att_sweep = attempts(f"{tmp}/ls-sweep.txt")
if (lsj["exit_code"] != 0 or {r["name"]: r["attempts"] for r in lsj["runs"]} != att_sweep
        or any(r["status"] != "done" for r in lsj["runs"])):
    bad.append(f"runs ls --sweep sw --json: {lsj}, the table's attempts {att_sweep}")
listed = sorted(attempts(f"{tmp}/ls-sweep.txt"))
if listed != ["sw"] + [f"sw-t00{i}" for i in range(6)] or attempts(f"{tmp}/ls-other.txt"):
    bad.append(f"runs ls --sweep sw lists {listed}")
for b in bad:
    print("FAIL:", b)
print(f"ok: {len(done)} done, {len(stopped)} stopped, {len(promoted)} promoted and resumed; "
      f"best {best and best['run']}")
sys.exit(1 if bad else 0)
EOF
