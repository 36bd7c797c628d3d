#!/usr/bin/env bash
# ZeRO memory: resident memory per rank after the last step, measured for stages 0-3 on 2 ranks
# (a 27.5M-parameter Llama, AdamW), against `dtrain plan`'s per-worker figures. What stage s saves
# over stage 0 -- optimizer state (1), + gradients (2), + parameters (3), each divided by N -- must
# be what the plan predicts within 15%. Savings, not totals: the totals also hold what the plan
# does not model (the binary, MPI, oneDNN/OpenBLAS, the dataset mapping: ~45 MiB here).
#   zero_memory.sh DTRAIN REPO DATA_DIR MPIRUN...
set -euo pipefail
dtrain=$1 repo=$2 data=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The tiny Llama's tokenizer and config, made wider and deeper (hidden 512, 8 layers).
sed -e 's/"hidden_size": *[0-9]*/"hidden_size": 512/' \
    -e 's/"intermediate_size": *[0-9]*/"intermediate_size": 1536/' \
    -e 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 8/' \
    -e 's/"num_attention_heads": *[0-9]*/"num_attention_heads": 8/' \
    -e 's/"num_key_value_heads": *[0-9]*/"num_key_value_heads": 8/' \
    -e 's/"head_dim": *[0-9]*/"head_dim": 64/' \
    "$repo/examples/llama-tiny/config.json" > "$tmp/config.json"
declare -a rss plan
for z in 0 1 2 3; do
  # Small buckets: Open MPI's reduce-scatter keeps a temporary of about a bucket (see README).
  "$@" -np 2 "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp" \
    data.train="$data/fortunes/train" data.val= data.seq_len=64 data.batch=2 train.steps=3 \
    schedule.warmup_steps=1 train.threads=1 dist.bucket_mb=4 dist.zero_stage=$z \
    output.dir="$tmp/runs" output.export=false > "$tmp/log$z" 2>&1 || { cat "$tmp/log$z"; exit 1; }
  line=$(grep '^memory per worker' "$tmp/log$z") || { cat "$tmp/log$z"; exit 1; }
  echo "stage $z: $line"
  rss[$z]=$(sed -E 's/.*: ([0-9]+) MiB resident.*/\1/' <<< "$line")
  plan[$z]=$(sed -E 's/.*; plan ([0-9]+) MiB.*/\1/' <<< "$line")
done
fail=0
for z in 1 2 3; do
  saved=$(( rss[0] - rss[z] )) predicted=$(( plan[0] - plan[z] ))
  ok=$(awk -v s=$saved -v p=$predicted 'BEGIN { d = s - p; if (d < 0) d = -d; print (p > 0 && d <= 0.15 * p) ? 1 : 0 }')
  echo "stage $z saves $saved MiB per rank; plan predicts $predicted MiB: $([ "$ok" = 1 ] && echo ok || echo FAIL)"
  [ "$ok" = 1 ] || fail=1
done
exit $fail
