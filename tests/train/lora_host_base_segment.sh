#!/usr/bin/env bash
# The converted base's shared segment (lora.share_base, src/train/hostbase.c) and its fallback:
# 2 MPI ranks on one host LoRA-finetune a 22M-parameter Llama whose safetensors are f32 under a
# bf16 base, so each frozen weight needs a conversion. Checked:
#   - with a segment directory (DT_SHM_DIR) local rank 0 converts into it and the other maps it:
#     the start line says so, and the directory is empty after the job;
#   - with a directory that cannot take the file, the start line says why (cannot create ...)
#     and that each worker copied its own conversion;
#   - with a base whose matrices are mapped and only the embedding needs a conversion, the
#     segment holds the converted bytes only (the start line's figure, from the file's blocks),
#     not the whole frozen buffer (the mapped tensors' places are a hole in the file);
#   - all give the adapters of every worker copying the base (lora.share_base=false) bit for bit;
#   - a job SIGKILLed after its first step leaves nothing in the segment directory (the segment
#     is unlinked as soon as every worker has mapped it).
#   lora_host_base_segment.sh DTRAIN REPO DATA_DIR PYTHON MPIEXEC [MPI ARGS...]
set -euo pipefail
dtrain=$1 repo=$2 data=$3 py=$4 mpiexec=$5
shift 5
mpi=("$mpiexec" "$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bf16" "$tmp/f32" "$tmp/shm" "$tmp/shm-kill"
"$py" "$repo/tests/train/make_llama_base.py" 16000 3 ones-f32 "$tmp/bf16" "$tmp/f32"
mkdir -p "$tmp/mixed"
cp "$tmp/bf16/config.json" "$tmp/mixed/"
"$py" - "$tmp/bf16/model.safetensors" "$tmp/mixed/model.safetensors" <<'PY'
import sys
from safetensors.torch import load_file, save_file
sd = load_file(sys.argv[1])
sd["model.embed_tokens.weight"] = sd["model.embed_tokens.weight"].float()
save_file(sd, sys.argv[2], metadata={"format": "pt"})
PY

args=("$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp/f32" model.init=pretrained
      lora.enabled=true lora.rank=4 lora.targets=q_proj,v_proj,down_proj
      data.train="$data/fortunes/train" data.val= data.seq_len=32 data.batch=2 train.steps=2
      schedule.warmup_steps=0 train.threads=1 train.log_every=1 output.experiment=seg
      ckpt.resume=never optim.name=sgd optim.lr=0.5 optim.clip_norm=0)
# run NAME SHM_DIR [overrides...]: 2 ranks; the log in $tmp/NAME.log
run() {
  local name=$1 dir=$2
  shift 2
  DT_SHM_DIR=$dir "${mpi[@]}" -np 2 -x DT_SHM_DIR "$dtrain" train "${args[@]}" \
    output.dir="$tmp/runs" output.run_name="$name" "$@" > "$tmp/$name.log" 2>&1 ||
    { cat "$tmp/$name.log"; exit 1; }
  grep '^frozen base' "$tmp/$name.log" | sed "s/^/$name: /" || true
}
adapter() { find "$tmp/runs" -path "*/$1/adapter/adapter_model.safetensors"; }

run copy "$tmp/shm" lora.share_base=false
run shared "$tmp/shm"
run fallback "$tmp/no-such-dir"
run mixed "$tmp/shm" model.hf_path="$tmp/mixed"
fail=0
grep -q "^frozen base: .* converted once per host into shared memory .* shared by the 2 workers" \
  "$tmp/shared.log" || { echo "FAIL: 'shared' does not say the base was converted once per host"; fail=1; }
grep -q "^frozen base: .* copied into each worker .*: no shared segment (cannot create $tmp/no-such-dir/dtrain-base-" \
  "$tmp/fallback.log" || { echo "FAIL: 'fallback' does not say why there is no segment"; fail=1; }
# "..., 1 (15.6 MiB) converted once per host into shared memory (...; the segment holds 15.6 MiB)"
conv=$(sed -n 's/^frozen base: .*, 1 (\([0-9.]*\) MiB) converted once per host.*/\1/p' "$tmp/mixed.log")
held=$(sed -n 's/^frozen base: .*the segment holds \([0-9.]*\) MiB.*/\1/p' "$tmp/mixed.log")
if [ -n "$conv" ] && [ -n "$held" ] && awk -v c="$conv" -v h="$held" 'BEGIN { exit !(c > 1 && h <= c + 0.1) }'; then
  echo "mixed base: the segment holds $held MiB for $conv MiB converted"
else
  echo "FAIL: mixed base: converted '$conv' MiB, the segment holds '$held' MiB"; fail=1
fi
for a in shared fallback mixed; do
  if cmp -s "$(adapter copy)" "$(adapter $a)"; then echo "identical adapters: copied base, $a"
  else echo "FAIL: the adapters of '$a' differ from the copied base's"; fail=1; fi
done
left=$(ls -A "$tmp/shm")
[ -z "$left" ] || { echo "FAIL: left in the segment directory after the job: $left"; fail=1; }

# SIGKILL: every rank of a long run, once it has logged a step
DT_SHM_DIR=$tmp/shm-kill "${mpi[@]}" -np 2 -x DT_SHM_DIR "$dtrain" train "${args[@]}" \
  output.dir="$tmp/runs" output.run_name=killed train.steps=100000 > "$tmp/killed.log" 2>&1 &
job=$!
for _ in $(seq 600); do
  grep -q "^step" "$tmp/killed.log" && break
  kill -0 "$job" 2> /dev/null || break
  sleep 0.1
done
grep -q "^step" "$tmp/killed.log" || { echo "FAIL: the run to kill logged no step"; cat "$tmp/killed.log"; fail=1; }
ranks=$(pgrep -P "$job" -x dtrain || true)
echo "killing ranks" $ranks "(SIGKILL)"
for p in $ranks; do kill -KILL "$p" 2> /dev/null || true; done
wait "$job" 2> /dev/null || true
left=$(ls -A "$tmp/shm-kill")
[ -z "$left" ] || { echo "FAIL: left in the segment directory after SIGKILL: $left"; fail=1; }
[ -n "$ranks" ] || { echo "FAIL: no rank found to kill"; fail=1; }
[ $fail = 0 ] && echo "segment directory empty after the job and after SIGKILL"
exit $fail
