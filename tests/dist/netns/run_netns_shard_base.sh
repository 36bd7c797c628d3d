#!/bin/sh
# The frozen LoRA base sharded across 2 network-namespace "hosts" (netns_lib.sh), one worker
# each: a 22M-parameter Llama LoRA-finetuned from a bf16 safetensors base (43 MiB of frozen bf16
# weights, f32 norms) under dist.zero_stage=3, once with the base whole, copied into every
# worker (lora.shard_base=false lora.share_base=false: resident memory counts all of it), and
# once sharded (the default, auto, which shards under ZeRO-3) from each host's mapping of the
# file (the default lora.share_base). Both runs cross the same veth link. Checks: (a) one rank per host; (b) the start lines say the base
# is mapped by the one worker of each host (not shared across hosts) and sharded across the 2
# workers, and the reference's do not say sharded; (c) the adapters are the same bits; (d) rank
# 0's resident memory after the last step is lower by half the base (its 1/2 kept), within 6 MiB;
# (e) the base's gathers crossed the link: at least the base's half per step more bytes.
#
#   run_netns_shard_base.sh MPIRUN DTRAIN DATA_DIR REPO_DIR PYTHON WORK_DIR
#
# Exit status: 0 pass, 1 fail, 77 skip (no permission to create namespaces; CTest's
# SKIP_RETURN_CODE). Namespaces are removed on every exit path (netns_lib.sh).
if [ $# -lt 6 ]; then
    echo "usage: run_netns_shard_base.sh MPIRUN DTRAIN DATA_DIR REPO_DIR PYTHON WORK_DIR" >&2
    exit 2
fi
MPIRUN=$1 DTRAIN=$2 DATA=$3 REPO=$4 PY=$5 WORK=$6
STEPS=3
TIMEOUT=${DT_NETNS_TIMEOUT:-120}
NETNS_TAG=netns_shard_base
. "$(dirname "$0")/netns_lib.sh"

netns_up 2 # or SKIP
[ -x "$DTRAIN" ] || fail "dtrain $DTRAIN not found"
"$MPIRUN" --version 2>&1 | grep -qE 'Open MPI|OpenRTE' ||
    skip "$MPIRUN is not Open MPI's (the namespace launch uses Open MPI's rsh agent options)"
[ -d "$DATA/fortunes/train" ] || fail "no data in $DATA/fortunes/train (fixture fortunes_data)"
export OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000 HF_HUB_OFFLINE=1
rm -rf "$WORK"
mkdir -p "$WORK/base" || fail "cannot create $WORK"
"$PY" "$REPO/tests/train/make_llama_base.py" 16000 7 ones-f32 "$WORK/base" >/dev/null ||
    fail "make_llama_base.py failed"

# run NAME [overrides...]: the 2 ranks across the hosts; the log in $WORK/NAME.log
run() {
    name=$1
    shift
    tx0=$(netns_tx_bytes)
    netns_mpirun "$TIMEOUT" "$DTRAIN" train "$REPO/examples/llama-tiny-fortunes.yaml" \
        model.hf_path="$WORK/base" model.init=pretrained lora.enabled=true lora.rank=4 \
        lora.targets=q_proj,v_proj,down_proj data.train="$DATA/fortunes/train" data.val= \
        data.seq_len=32 data.batch=2 train.steps=$STEPS schedule.kind=constant \
        schedule.warmup_steps=0 train.threads=1 train.log_every=1 output.experiment=nsb \
        optim.lr=0.01 ckpt.resume=never dist.zero_stage=3 output.dir="$WORK/runs" \
        output.run_name="$name" "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    [ $rc -eq 0 ] || { cat "$WORK/$name.log"; fail "'$name' failed (exit $rc; 124: timed out)"; }
    echo $(($(netns_tx_bytes) - tx0)) >"$WORK/$name.tx"
    grep '^frozen base' "$WORK/$name.log" | sed "s/^/$name: /"
}
adapter() { find "$WORK/runs" -path "*/$1/adapter/adapter_model.safetensors"; }
rss() { sed -nE 's/^memory per worker: ([0-9]+) MiB resident after the last step.*/\1/p' "$WORK/$1.log"; }

run whole lora.shard_base=false lora.share_base=false
run sharded

# (a) one rank per host: the memory line sums the PSS over the workers of each host
grep -q "the host's 1 worker " "$WORK/sharded.log" ||
    fail "(a) the memory line does not count 1 worker per host: $(grep '^memory per worker' "$WORK/sharded.log")"
say "(a) ok: one worker per host"
# (b) the start lines
grep -q "^frozen base: .* mapped read-only from the model files, shared by the 1 worker of the host; each worker copied its shard out" \
    "$WORK/sharded.log" || fail "(b) the start line does not say each host maps the base for its one worker"
grep -q "^frozen base: sharded across the 2 workers" "$WORK/sharded.log" ||
    fail "(b) the start line does not say the base is sharded across the 2 workers"
! grep -q "sharded across" "$WORK/whole.log" || fail "(b) lora.shard_base=false sharded the base"
say "(b) ok: the base is mapped per host and sharded across the hosts"
# (c) the same adapters
a=$(adapter whole) b=$(adapter sharded)
[ -n "$a" ] && [ -n "$b" ] || fail "(c) an adapter is missing"
cmp -s "$a" "$b" || fail "(c) the sharded base's adapters differ from the whole base's"
say "(c) ok: identical adapters, whole and sharded base"
# (d) memory: half the base (as the graph holds it: the plan's frozen bytes) less per worker
"$DTRAIN" plan "$REPO/examples/llama-tiny-fortunes.yaml" model.hf_path="$WORK/base" \
    model.init=pretrained lora.enabled=true lora.rank=4 lora.targets=q_proj,v_proj,down_proj \
    data.seq_len=32 data.batch=2 dist.zero_stage=3 -n 2 --json >"$WORK/plan.json" ||
    fail "dtrain plan failed"
out=$("$PY" - "$WORK/plan.json" "$(rss whole)" "$(rss sharded)" <<'PY'
import json, sys
p, w, s = json.load(open(sys.argv[1])), float(sys.argv[2]), float(sys.argv[3])
base = p["unsharded"]["frozen_bytes"] / 1048576.0
want = base - base / 2
ok = p["base_sharded"] and abs((w - s) - want) <= 6
print(f"{'ok' if ok else 'FAIL'} plan base_sharded {p['base_sharded']}; rank 0 resident "
      f"{w:.0f} MiB whole, {s:.0f} sharded: -{w - s:.0f}, expected -{want:.1f} +- 6; "
      f"base {base:.1f} MiB")
PY
) || fail "(d) python failed"
case $out in ok*) say "(d) $out" ;; *) fail "(d) $out" ;; esac
# (e) the gathers crossed the link: forward and backward gather each weight (the other
# worker's half of it) in every step
tw=$(cat "$WORK/whole.tx") ts=$(cat "$WORK/sharded.tx")
half=$("$PY" -c "import json; print(json.load(open('$WORK/plan.json'))['unsharded']['frozen_bytes'] // 2)")
[ $((ts - tw)) -ge $((half * STEPS)) ] ||
    fail "(e) h1's eth0 sent $ts bytes sharded, $tw whole: less than $STEPS x $half more"
say "(e) ok: h1's eth0 sent $ts bytes sharded, $tw whole"
say "PASS"
