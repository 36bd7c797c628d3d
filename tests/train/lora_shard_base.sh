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
#   - rank 0's peak since the first step (the kernel's VmHWM, reset before it) is lower by the
#     plans' difference within 6 MiB, and rises above the resident set after the steps by the
#     weights gathered whole at once (between the embedding's other slices and the plan's
#     gathered figure, within 4 MiB; printed only under AddressSanitizer, whose quarantine
#     keeps freed blocks resident);
#   - the untied embedding is gathered by the rows the ranks look up, not whole: the start line
#     says so, and the frozen bytes gathered per step are at most twice the rest of the base
#     (forward and backward) plus the NP x batch x seq_len rows, where a whole embedding would
#     add its 15.6 MiB;
#   - a run stopped after a checkpoint and resumed ends with the same bits as the straight run;
#   - on 2 ranks, sharding from the mapped model file (lora.share_base=true) gives the same bits
#     and keeps no more resident (each worker copies its shard out, the mapping is closed).
# Under ZeRO-3 the sharded runs leave lora.shard_base at its default (auto, which shards there)
# and the reference sets lora.shard_base=false; without ZeRO the reference is the default (auto:
# whole) and the sharded runs set it true. The start lines and the plans say which.
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
# the peak since the first step (VmHWM reset before it): the weights gathered whole at once
speak() { sed -nE 's/^memory per worker: .*; since the first step peak ([0-9]+) MiB.*/\1/p' "$tmp/$1.log"; }

if [ "$zero" = 3 ]; then wh=(lora.shard_base=false) sb=(); else wh=() sb=(lora.shard_base=true); fi
run whole ckpt.resume=never "${wh[@]}"
run sharded ckpt.resume=never "${sb[@]}"
# from the mapped model file (lora.share_base=true): each worker copies its shard out of it
if [ "$np" = 2 ]; then run mapped ckpt.resume=never "${sb[@]}" lora.share_base=true; fi
run cut ckpt.resume=never "${sb[@]}" train.steps=2 ckpt.every_steps=2
run cut ckpt.resume=auto "${sb[@]}"
grep -q "^resumed from" "$tmp/cut.log" || { echo "FAIL: the second 'cut' run did not resume"; cat "$tmp/cut.log"; exit 1; }

fail=0
grep -q "^frozen base: sharded across the $np workers" "$tmp/sharded.log" ||
  { echo "FAIL: the start line does not say the base is sharded"; fail=1; }
! grep -q "sharded across" "$tmp/whole.log" ||
  { echo "FAIL: the reference run (${wh[*]:-lora.shard_base=auto, ZeRO $zero}) sharded the base"; fail=1; }
grep -q "^frozen base: sharded across .*(the embedding: only the rows the workers look up)" \
  "$tmp/sharded.log" || { echo "FAIL: the start line does not say the embedding is row-gathered"; fail=1; }
gathered=$(sed -nE 's/^frozen base: ([0-9.]+) MiB gathered per step.*/\1/p' "$tmp/sharded.log")
[ -n "$gathered" ] || { echo "FAIL: no 'gathered per step' line"; fail=1; gathered=0; }
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
"$dtrain" plan "${args[@]}" "${wh[@]}" -n "$np" --json > "$tmp/plan-whole.json"
"$dtrain" plan "${args[@]}" "${sb[@]}" -n "$np" --json > "$tmp/plan-sharded.json"
"$py" - "$tmp" "$np" "$w" "$s" "$(speak whole)" "$(speak sharded)" "${ASAN_OPTIONS:+sanitized}" "$gathered" <<'PY' || fail=1
import json, sys
d, n, w, s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
hw, hs = float(sys.argv[5]), float(sys.argv[6])
# under AddressSanitizer freed blocks wait in its quarantine: the peaks are its allocator's
# (printed, not checked)
peaks_checked = sys.argv[7] != "sanitized"
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
# during the steps (the peak since the first step): the sharded run's peak is the plan's, base/N
# plus the weights gathered whole at once, so the two runs' peaks differ by the plans' totals;
# its rise above the resident set after the last step is those gathered weights (at least the
# embedding's other slices, at most the plan's gathered figure), the whole base's is not
pdrop = (pw["total_bytes"] - ps["total_bytes"]) / mib
rise = (hs - s) - (hw - w)
gmax = ps["frozen_gather_bytes"] * (n - 1) / n / mib
gmin = largest * (n - 1) / n / mib
print(f"rank 0 peak since the first step: {hw:.0f} MiB whole base, {hs:.0f} sharded: "
      f"-{hw - hs:.0f} MiB, plan -{pdrop:.1f} +- 6; the sharded peak's rise above the resident "
      f"after the steps beyond the whole base's: {rise:.0f} MiB, expected {gmin:.1f}-{gmax:.1f} +- 4")
if peaks_checked and abs((hw - hs) - pdrop) > 6:
    print("FAIL: the sharded run's peak during the steps is not the plan's"); bad = 1
if peaks_checked and not gmin - 4 <= rise <= gmax + 4:
    print("FAIL: the weights gathered during a step are not what the plan says"); bad = 1
if not peaks_checked:
    print("(sanitized build: the peaks are not checked)")
# the frozen bytes gathered per step: the rest of the base in forward and again (at most) in
# backward, and the embedding's union rows (at most NP x batch 2 x seq_len 32 rows of 512 bf16)
# -- never its whole 16000 rows
emb, g = largest / mib, float(sys.argv[8])
rows = min(16000, n * 2 * 32) * 512 * 2 / mib
rest = base / mib - emb
print(f"frozen gathered per step: {g:.2f} MiB (expected {rest:.2f}-{2 * rest + rows:.2f}: the "
      f"base less the {emb:.2f} MiB embedding, once or twice, plus at most {rows:.2f} of its rows)")
if not rest - 0.05 <= g <= 2 * rest + rows + 0.05:
    print("FAIL: the gathers moved more (or less) than the row-gathered embedding allows"); bad = 1
sys.exit(bad)
PY
exit $fail
