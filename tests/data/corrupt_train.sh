#!/usr/bin/env bash
# One flipped byte in a shard's token payload: `dtrain train` stops within the first epoch with
# one line naming the shard and the corrupt block's byte range (data.on_corrupt=stop, the
# default); with data.on_corrupt=skip it trains the epoch and reports one skipped block;
# `dtrain data verify` names the same range.
#   corrupt_train.sh DTRAIN REPO DATA_DIR   (DATA_DIR holds fortunes/ from the import fixture)
set -u
dtrain=$1 repo=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cp -r "$data/fortunes/train" "$tmp/train"
shard=$tmp/train/shard-00000.dts
# a byte of the token section in block 0 (of 1 MiB blocks), which the first steps read (the
# checks are the same for any block; this keeps the runs short)
off=$((256 + 12345))
size=$(stat -c %s "$shard")
[[ $size -gt $((off + 4096)) ]] || fail "fortunes shard too small ($size bytes)"
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(int(sys.argv[2])); b=f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0]^0x10]))" "$shard" "$off"
lo=256 hi=$((256 + 1048576 - 1))
want="shard-00000.dts: corrupt data in bytes $lo-$hi"

out=$("$dtrain" data verify "$tmp/train" 2>&1) && fail "data verify passed a corrupt shard: $out"
[[ "$out" == *"$want"* ]] || fail "data verify: want '$want' in: $out"

# 20 steps: 320 windows drawn from the 10064 of the epoch read block 0 (a fifth of the tokens)
common=("$repo/examples/llama-tiny-fortunes.yaml" "model.hf_path=$repo/examples/llama-tiny"
        data.train="$tmp/train" data.val= train.steps=20 train.eval_every=0
        train.log_every=1
        schedule.warmup_steps=0 output.dir="$tmp/runs" train.progress=off)
out=$("$dtrain" train "${common[@]}" output.run_name=stop 2>&1); rc=$?
[[ $rc -ne 0 ]] || fail "train on corrupt data exited 0"
err=$(printf '%s\n' "$out" | grep -c "corrupt data")
[[ $err -eq 1 && "$out" == *"$want"* ]] || fail "train stop: want one line with '$want' in: $out"
steps=$(printf '%s\n' "$out" | grep -c '^step ' || true)
[[ $steps -lt 20 ]] || fail "train stop: ran all $steps steps"
echo "stop: rc=$rc after $steps logged steps: $(printf '%s\n' "$out" | grep "corrupt data")"

out=$("$dtrain" train "${common[@]}" data.on_corrupt=skip output.run_name=skip 2>&1); rc=$?
[[ $rc -eq 0 ]] || fail "train with data.on_corrupt=skip: rc=$rc: $out"
[[ "$out" == *"skipped the records of 1 corrupt payload block of data.train"* ]] ||
    fail "train skip: no skipped-block count in: $out"
[[ $(printf '%s\n' "$out" | grep -c "warning: .*$want") -eq 1 ]] ||
    fail "train skip: want one warning naming '$want' in: $out"
echo "skip: $(printf '%s\n' "$out" | grep skipped | head -2 | tr '\n' ' ')"
echo "corrupt_train: ok"
