#!/usr/bin/env bash
# LoRA memory: peak resident memory per worker of LoRA finetuning (r=8 on q_proj, v_proj) of the
# 56M-parameter Llama against full finetuning of the same model, each beside `dtrain plan`'s
# figure: the peak minus what the process held before the model was built (binary, libraries,
# data mappings: not modelled by the plan) must be within 15% of the plan for both, and LoRA
# must need less than full finetuning. seq 256, batch 4, AdamW, 1 process.
#   lora_memory.sh DTRAIN REPO DATA_DIR
set -euo pipefail
dtrain=$1 repo=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
 "hidden_size": 512, "intermediate_size": 1408, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"}
JSON
fail=0
declare -A peak plan
for mode in full lora; do
  extra=()
  [ $mode = lora ] && extra=(lora.enabled=true lora.rank=8 lora.targets=q_proj,v_proj)
  "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp" model.init=random \
    data.train="$data/fortunes/train" data.val= data.seq_len=256 data.batch=4 train.steps=2 \
    schedule.warmup_steps=0 train.threads=2 output.dir="$tmp/runs" output.export=false \
    ckpt.resume=never "${extra[@]}" > "$tmp/$mode.log" 2>&1 || { cat "$tmp/$mode.log"; exit 1; }
  line=$(grep '^memory per worker' "$tmp/$mode.log")
  echo "$mode: $(grep '^dtrain train' "$tmp/$mode.log" | cut -d';' -f1)"
  echo "$mode: $line"
  base=$(sed -E 's/.*MiB \(([0-9]+) before the model.*/\1/' <<< "$line")
  peak[$mode]=$(( $(sed -E 's/.*, peak ([0-9]+) MiB.*/\1/' <<< "$line") - base ))
  plan[$mode]=$(sed -E 's/.*; plan ([0-9]+) MiB.*/\1/' <<< "$line")
  ok=$(awk -v m=${peak[$mode]} -v p=${plan[$mode]} 'BEGIN { d = m - p; if (d < 0) d = -d; print (d <= 0.15 * p) ? 1 : 0 }')
  echo "$mode: measured peak above the start ${peak[$mode]} MiB vs plan ${plan[$mode]} MiB: $([ "$ok" = 1 ] && echo ok || echo FAIL)"
  [ "$ok" = 1 ] || fail=1
done
if [ "${peak[lora]}" -ge "${peak[full]}" ]; then echo "FAIL: LoRA peak ${peak[lora]} MiB is not below full finetuning's ${peak[full]}"; fail=1; fi
exit $fail
