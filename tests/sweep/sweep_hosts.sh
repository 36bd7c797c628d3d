#!/bin/sh
# Trials across hosts: `dtrain sweep --hosts h1:1,h2:1` on two network-namespace "hosts"
# (tests/dist/netns/netns_lib.sh: veth link, mpirun's rsh agent = ip netns exec) runs each trial as
# a `dtrain launch` job on one host, both hosts at once, and every trial reports the same losses,
# bit for bit, as the same sweep run on this machine's slots. First (no namespaces needed): the
# options that cannot be met are refused in one line, nothing started. Exit 77 (skip) without
# permission to create namespaces.
#   sweep_hosts.sh MPIRUN DTRAIN DATA_DIR REPO_DIR
MPIRUN=$1 DTRAIN=$2 DATA=$3 REPO=$4
NETNS_TAG=sweep_hosts
. "$REPO/tests/dist/netns/netns_lib.sh"
DTRAIN=$(cd "$(dirname "$DTRAIN")" && pwd)/$(basename "$DTRAIN")
WORK=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
cat > "$WORK/sweep.yaml" <<EOS
base: $REPO/examples/llama-tiny-fortunes.yaml
overrides:
  data.train: $DATA/fortunes/train
  data.val: ""
  data.seq_len: 32
  data.batch: 4
  train.log_every: 1
  output.dir: $WORK/runs
  output.export: false
  schedule.warmup_steps: 0
parameters:
  optim.lr: [1.0e-3, 1.0e-2]
  optim.weight_decay: [0.0, 0.1]
sampler: grid
max_steps: 6
metric: train_loss
EOS

# 1. refusals: one line, exit 2, no sweep folder
for bad in "--hosts h1:1 --slots 2|--slots with --hosts" \
           "--hosts h1:1,h2:1 --workers-per-trial 2|no host has 2 slots" \
           "--hosts h1:x|--hosts h1:x"; do
    args=${bad%%|*} want=${bad#*|}
    rc=0
    "$DTRAIN" sweep "$WORK/sweep.yaml" --name bad $args > "$WORK/bad.out" 2> "$WORK/bad.err" || rc=$?
    [ "$rc" = 2 ] && [ "$(wc -l < "$WORK/bad.err")" = 1 ] && grep -q -- "$want" "$WORK/bad.err" ||
        { cat "$WORK/bad.err"; fail "'$args': exit $rc, want one line with '$want'"; }
    [ ! -e "$WORK/runs/llama-tiny-fortunes/bad" ] || fail "'$args': the sweep was started"
    say "ok: refused: $(cat "$WORK/bad.err")"
done

# 2. the sweep on this machine's 2 slots
"$DTRAIN" sweep "$WORK/sweep.yaml" --name local --slots 2 --threads-per-slot 1 \
    > "$WORK/local.log" 2>&1 || { cat "$WORK/local.log"; fail "the one-host sweep failed"; }

# 3. the same sweep across h1 and h2, one trial at a time on each
netns_up 2
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
run_child timeout -k 10 240 ip netns exec "$(ns_of 1)" "$DTRAIN" sweep "$WORK/sweep.yaml" \
    --name hosts --hosts h1:1,h2:1 --mpirun "$MPIRUN" \
    --mpirun-args "$root --bind-to none --mca btl tcp,self --mca btl_tcp_if_include $SUBNET --mca oob_tcp_if_include $SUBNET --mca plm_rsh_agent $REPO/tests/dist/netns/agent.sh -x DT_NETNS_PREFIX --display-map" \
    > "$WORK/hosts.log" 2>&1 || { cat "$WORK/hosts.log"; tail -n 20 "$WORK"/runs/llama-tiny-fortunes/hosts/*.log; fail "the two-host sweep failed"; }
cat "$WORK/hosts.log"
sw=$WORK/runs/llama-tiny-fortunes
python3 - "$sw/local/sweep.json" "$sw/hosts/sweep.json" "$WORK/hosts.log" "$sw/hosts" <<'PY' ||
import json, re, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
log = open(sys.argv[3]).read()
assert b["hosts"] == "h1:1,h2:1" and b["workers"] == 1, (b["hosts"], b["workers"])
ta, tb = a["trials"], b["trials"]
assert len(ta) == len(tb) == 4, (len(ta), len(tb))
used = set()
for i, (x, y) in enumerate(zip(ta, tb)):
    assert x["status"] == y["status"] == "done", (i, x["status"], y["status"])
    assert x["params"] == y["params"], (i, x["params"], y["params"])
    # the losses the trials recorded, compared exactly (JSON keeps every digit of a double)
    assert x["reports"] == y["reports"], (i, x["reports"], y["reports"])
    m = re.search(r"trial %d \([^)]*\)[^\n]*started to step 6 on (h[12])" % i, log)
    assert m, "trial %d: no 'started ... on hN' line" % i
    host = m.group(1)
    used.add(host)
    # mpirun's map in the trial's log: its one worker ran on that host
    tlog = open("%s/%s.log" % (sys.argv[4], y["run"])).read()
    assert re.search(r"Data for node: %s\s.*Num procs: 1" % host, tlog), (i, host)
assert used == {"h1", "h2"}, used
print("sweep_hosts: 4 trials on h1 and h2 == on this machine, losses bit for bit")
PY
    fail "the two-host sweep differs (above)"
say "PASS"
