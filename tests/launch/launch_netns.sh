#!/bin/sh
# Heterogeneous hosts: `dtrain launch -n 3 --hosts h1:2,h2:1` across two network-namespace
# "hosts" (tests/dist/netns/netns_lib.sh: veth link, mpirun's rsh agent = ip netns exec) runs two
# workers on h1 and one on h2, and ends with the same exported model, bit for bit, as the same
# 3-worker job on one host. Exit 77 (skip) without permission to create namespaces.
#   launch_netns.sh MPIRUN DTRAIN DATA_DIR REPO_DIR
MPIRUN=$1 DTRAIN=$2 DATA=$3 REPO=$4
NETNS_TAG=launch_netns
. "$REPO/tests/dist/netns/netns_lib.sh"
DTRAIN=$(cd "$(dirname "$DTRAIN")" && pwd)/$(basename "$DTRAIN")
WORK=$(mktemp -d)
trap 'netns_cleanup; rm -rf "$WORK"' EXIT
set -- "$REPO/examples/llama-tiny-fortunes.yaml" data.train="$DATA/fortunes/train" data.val= \
    data.seq_len=32 data.batch=2 train.steps=12 train.log_every=4 ckpt.every_steps=6 \
    schedule.warmup_steps=2 output.dir="$WORK"
"$DTRAIN" launch -n 3 --oversubscribe --mpirun "$MPIRUN" "$@" output.run_name=one \
    > "$WORK/one.log" 2>&1 || { cat "$WORK/one.log"; fail "the one-host job failed"; }
netns_up 2
export DT_NETNS_PREFIX="$P"
run_child timeout -k 10 120 ip netns exec "$(ns_of 1)" "$DTRAIN" launch -n 3 --hosts h1:2,h2:1 \
    --mpirun "$MPIRUN" --max-failures 0 --mpirun-args "--mca btl tcp,self --mca btl_tcp_if_include $SUBNET --mca oob_tcp_if_include $SUBNET --mca plm_rsh_agent $REPO/tests/dist/netns/agent.sh -x DT_NETNS_PREFIX --display-map" \
    "$@" output.run_name=two > "$WORK/two.log" 2>&1 || { cat "$WORK/two.log"; fail "the two-host job failed"; }
grep "dtrain train:" "$WORK/two.log"
# mpirun's map: 2 processes on h1, 1 on h2
grep -q "Data for node: h1.*Num procs: 2" "$WORK/two.log" && grep -q "Data for node: h2.*Num procs: 1" "$WORK/two.log" ||
    { grep -i "node" "$WORK/two.log"; fail "workers not placed 2 on h1 and 1 on h2"; }
a="$WORK/llama-tiny-fortunes/one/model/model.safetensors"
b="$WORK/llama-tiny-fortunes/two/model/model.safetensors"
cmp "$a" "$b" || fail "2 hosts (2 + 1 slots) and 1 host give different models"
say "PASS: 3 workers on h1:2,h2:1 match the one-host job bit for bit"
