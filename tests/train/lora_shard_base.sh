#!/usr/bin/env bash
# The frozen LoRA base sharded across workers (lora.shard_base): NP real MPI ranks LoRA-finetune
# a 22M-parameter Llama from a bf16 safetensors base (43 MiB of frozen bf16 weights, mostly the
# untied 16000 x 512 embedding and LM head) with the base sharded and, as the reference, with
# every worker holding the whole base (both copied into each worker: lora.share_base=false).
# Checked:
#   - the adapters are the same bits (a gathered bf16 slice is the loaded bytes, so the forward
#     and backward see the same weights);
#   - rank 0's resident memory after the last step (the "memory per worker" line, /proc VmRSS)
#     is lower by the base less this rank's 1/NP of it, within 6 MiB;
#   - `dtrain plan` models it: base/NP + the weights whole at once (an embedding-sized one and
#     less than a layer more);
#   - a run stopped after a checkpoint and resumed ends with the same bits as the straight run;
#   - on 2 ranks, sharding from the mapped model file (lora.share_base=true) gives the same bits
#     and keeps no more resident (each worker copies its shard out, the mapping is closed).
# AdamW, so that a resume also restores the optimizer's moments.
#   lora_shard_base.sh DTRAIN REPO DATA_DIR PYTHON NP ZERO_STAGE RECOMPUTE MPIEXEC [MPI ARGS...]
# (RECOMPUTE true: backward's recomputed layers gather the weights again, a layer at a time)
set -euo pipefail
dtrain=$1 repo=$2 data=$3 py=$4 np=$5 zero=$6 recompute=$7 mpiexec=$8
shift 8
mpi=("$mpiexec" "$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base"
"$py" "$repo/tests/train/make_llama_base.py" 16000 7 random-bf16 "$tmp/base"

args=("$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp/base" model.init=pretrained
      lora.enabled=true lora.rank=4 lora.targets=q_proj,v_proj,down_proj lora.share_base=false
      data.train="$data/fortunes/train" data.val= data.seq_len=32 data.batch=2 train.steps=3
      schedule.kind=constant schedule.warmup_steps=0 train.threads=1 train.log_every=1
      output.experiment=sb optim.lr=0.01 dist.zero_stage="$zero" model.recompute="$recompute")
# run NAME [overrides...]: NP ranks; the log in $tmp/NAME.log, the adapter in $tmp/NAME.adapter
run() {
  local name=$1
  shift
  "${mpi[@]}" -np "$np" "$dtrain" train "${args[@]}" output.dir="$tmp/runs" output.run_name="$name" \
    "$@" > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
}
adapter() { find "$tmp/runs" -path "*/$1/adapter/adapter_model.safetensors"; }
rss() { sed -nE 's/^memory per worker: ([0-9]+) MiB resident after the last step.*/\1/p' "$tmp/$1.log"; }

run whole ckpt.resume=never
run sharded ckpt.resume=never lora.shard_base=true
# from the mapped model file (lora.share_base=true): each worker copies its shard out of it
if [ "$np" = 2 ]; then run mapped ckpt.resume=never lora.shard_base=true lora.share_base=true; fi
run cut ckpt.resume=never lora.shard_base=true train.steps=2 ckpt.every_steps=2
run cut ckpt.resume=auto lora.shard_base=true
grep -q "^resumed from" "$tmp/cut.log" || { echo "FAIL: the second 'cut' run did not resume"; cat "$tmp/cut.log"; exit 1; }

fail=0
grep -q "^frozen base: sharded across the $np workers" "$tmp/sharded.log" ||
  { echo "FAIL: the start line does not say the base is sharded"; fail=1; }
for a in sharded cut $([ "$np" = 2 ] && echo mapped); do
  if cmp -s "$(adapter whole)" "$(adapter $a)"; then echo "identical adapters: whole base, $a"
  else echo "FAIL: the adapters of '$a' differ from the whole base's"; fail=1; fi
done

# memory: the frozen base this rank no longer holds
w=$(rss whole) s=$(rss sharded)
if [ "$np" = 2 ]; then
  m=$(rss mapped)
  echo "rank 0 resident after the last step, sharded from the mapped file: $m MiB (copied: $s)"
  [ $((m - s)) -le 6 ] || { echo "FAIL: the mapped file's pages stay resident after sharding"; fail=1; }
fi
"$dtrain" plan "${args[@]}" -n "$np" --json > "$tmp/plan-whole.json"
"$dtrain" plan "${args[@]}" lora.shard_base=true -n "$np" --json > "$tmp/plan-sharded.json"
"$py" - "$tmp" "$np" "$w" "$s" <<'PY' || fail=1
import json, sys
d, n, w, s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
mib = 1048576.0
pw, ps = (json.load(open(f"{d}/plan-{k}.json")) for k in ("whole", "sharded"))
bad = 0
# the base as the graph holds it (bf16 matrices, f32 norms)
base = pw["frozen_bytes"]
if not ps["base_sharded"] or pw["base_sharded"] or ps["unsharded"]["frozen_bytes"] != base:
    print("FAIL: the plans do not say which one shards the base"); bad = 1
# the plan: 1/N of the base plus the weights whole at once, which include the 16000 x 512
# embedding or LM head (bf16) and are less than it and a whole layer's matrices
largest, layer = 16000 * 512 * 2, (2 * 512 * 512 + 2 * 256 * 512 + 3 * 1408 * 512) * 2
lo, hi = base / n + largest * (n - 1) / n, base / n + (largest + layer) * (n - 1) / n + 64 * 64
print(f"plan frozen per worker: {ps['frozen_bytes'] / mib:.2f} MiB sharded, {base / mib:.2f} whole "
      f"(expected base/N + the gathered weights: {lo / mib:.2f}-{hi / mib:.2f})")
if not lo <= ps["frozen_bytes"] <= hi:
    print("FAIL: the plan's sharded frozen figure is not base/N + the gathered weights"); bad = 1
# resident after the last step: the gathered weights are released then, so the drop is the
# base less this rank's 1/N of it; 6 MiB for the allocator's and the runtime's noise
drop, want = w - s, (base - base / n) / mib
print(f"rank 0 resident after the last step: {w:.0f} MiB whole base, {s:.0f} MiB sharded: "
      f"-{drop:.0f} MiB, expected -{want:.1f} +- 6")
if abs(drop - want) > 6:
    print("FAIL: the sharded base does not save what it should"); bad = 1
sys.exit(bad)
PY
exit $fail
