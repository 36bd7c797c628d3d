#!/usr/bin/env bash
# `make lora-demo`: pretraining and LoRA finetuning end to end, on Debian's fortunes.
#   1. pretrains a 6.6M-parameter Llama (examples/llama-small) from scratch, on 2 MPI workers,
#      on the fortunes corpus without its `definitions` file, tokenized with OpenAI's cl100k_base
#      (data/tokenizers/cl100k_base.tiktoken), and exports it as a Hugging Face folder whose
#      tokenizer.json is cl100k + Llama 3's chat tokens (examples/llama-small/make_tokenizer.py);
#   2. makes instruction pairs "Define: TERM" -> definition from `definitions` (a corpus the base
#      never saw; Llama 3 chat template, loss on the answers) and evaluates the base on their
#      validation split;
#   3. LoRA-finetunes the base on them with 2 MPI workers, checkpointing every 50 steps, and
#      exports the PEFT adapter;
#   4. merges the adapter into the base (`dtrain lora merge`), and prints the validation loss and
#      perplexity of base and adapted model and a few samples (`dtrain generate --adapter`).
#   scripts/lora_demo.sh [BUILD_DIR]
# Environment: LORA_DEMO_DIR (output, default demo-out/lora), LORA_DEMO_PRETRAIN_STEPS (300),
# LORA_DEMO_STEPS (150), LORA_DEMO_NP (2 workers). Writes $LORA_DEMO_DIR/summary.txt (key=value).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
dtrain="$build/dtrain"
out=${LORA_DEMO_DIR:-$repo/demo-out/lora}
pre_steps=${LORA_DEMO_PRETRAIN_STEPS:-300}
ft_steps=${LORA_DEMO_STEPS:-150}
np=${LORA_DEMO_NP:-2}
fortunes=/usr/share/games/fortunes
small="$repo/examples/llama-small"
tok="$repo/data/tokenizers/cl100k_base.tiktoken" # + cl100k_base.json: pattern, special tokens
lora_cfg="$repo/examples/llama-small-lora-definitions.yaml"
mkdir -p "$out/data"
out=$(cd "$out" && pwd)
rm -rf "$out/runs" "$out/merged"
start=$SECONDS

launch=(mpirun --oversubscribe --bind-to none -np "$np")
[ "$(id -u)" = 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np")
command -v mpirun >/dev/null || { echo "lora-demo: mpirun not found; one process"; launch=(); }

echo "== data: fortunes without 'definitions' (pretraining); 'definitions' as instruction pairs"
# an import is reused only if it was made with this tokenizer
imported() { grep -qs '"tokenizer_file":.*"cl100k_base.tiktoken"' "$1/train/manifest.json"; }
if ! imported "$out/data/fortunes-nodefs"; then
  rm -rf "$out/data/fortunes-nodefs"
  files=()
  for f in "$fortunes"/*; do
    case $f in *.dat | *.u8 | */definitions) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
  done
  "$dtrain" data import text "${files[@]}" -o "$out/data/fortunes-nodefs" --doc-sep % --val 0.02 \
    --tokenizer "$tok" -q
fi
if ! imported "$out/data/definitions"; then
  rm -rf "$out/data/definitions"
  python3 "$small/definitions_jsonl.py" "$fortunes/definitions" >"$out/data/definitions.jsonl"
  "$dtrain" data import jsonl "$out/data/definitions.jsonl" -o "$out/data/definitions" --val 0.1 \
    --tokenizer "$tok" -q
fi
head -n 2 "$out/data/definitions.jsonl"
# the exported model's tokenizer.json/tokenizer_config.json: cl100k_base in Hugging Face's form
# with the chat tokens at the ids the jsonl import gave them (100277-100281)
python3 "$small/make_tokenizer.py" "$out/tokenizer" "$tok"

echo
# on the workers too (a global batch of 16 split between them: the same steps as one process
# with batch 16, and faster than one process with 2 threads on the 64-wide GEMMs)
pre=("$dtrain" train "$small/pretrain.yaml")
[ ${#launch[@]} -gt 0 ] &&
  pre=(env OMP_NUM_THREADS=1 "${launch[@]}" "${pre[@]}" data.batch=$((16 / np)) train.threads=1)
echo "== 1. pretraining examples/llama-small from scratch: $pre_steps steps"
"${pre[@]}" data.train="$out/data/fortunes-nodefs/train" \
  data.val="$out/data/fortunes-nodefs/val" train.steps="$pre_steps" output.dir="$out/runs" \
  output.run_name=pretrain ckpt.resume=never | tee "$out/pretrain.log" | grep -v '^no checkpoint'
base="$out/runs/llama-small-fortunes/pretrain/model"
# generate, merge and AutoTokenizer find the tokenizer beside the weights
cp "$out/tokenizer/tokenizer.json" "$out/tokenizer/tokenizer_config.json" "$base/"

common=(data.train="$out/data/definitions/train" data.val="$out/data/definitions/val"
        model.hf_path="$base" output.dir="$out/runs" train.threads=1 ckpt.resume=never)
echo
echo "== 2. the base on the definitions' validation split (adapters start at B = 0, i.e. the"
echo "      base itself; one step at lr 1e-12 leaves them there, then the trainer evaluates)"
OMP_NUM_THREADS=1 "${launch[@]}" "$dtrain" train "$lora_cfg" "${common[@]}" train.steps=1 \
  optim.lr=1e-12 schedule.kind=constant schedule.warmup_steps=0 schedule.min_lr=0 \
  ckpt.every_steps=0 output.export=false output.run_name=base-eval >"$out/base-eval.log"
grep '^eval' "$out/base-eval.log"

echo
echo "== 3. LoRA finetuning on $np workers: $ft_steps steps, checkpoints every 50"
OMP_NUM_THREADS=1 "${launch[@]}" "$dtrain" train "$lora_cfg" "${common[@]}" \
  train.steps="$ft_steps" output.run_name=finetune | tee "$out/finetune.log" |
  grep -v -e '^no checkpoint' -e 'snapshot in'
run="$out/runs/llama-small-lora-definitions/finetune"
adapter="$run/adapter"
echo "checkpoints:"
"$dtrain" ckpt ls "$run/checkpoints"
ls -l "$adapter"

echo
echo "== 4. merging the adapter into the base"
"$dtrain" lora merge --base "$base" --adapter "$adapter" -o "$out/merged"

# "eval  step N  loss X  perplexity Y ..." -> the last one's loss / perplexity
last_eval() { grep '^eval' "$1" | tail -n 1 | awk '{print $'"$2"'}'; }
b_loss=$(last_eval "$out/base-eval.log" 5) b_ppl=$(last_eval "$out/base-eval.log" 7)
a_loss=$(last_eval "$out/finetune.log" 5) a_ppl=$(last_eval "$out/finetune.log" 7)
p_loss=$(last_eval "$out/pretrain.log" 5)

echo
echo "== samples (temperature 0.7, top-p 0.9): base / base + adapter"
chat() { printf '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nDefine: %s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n' "$1"; }
gen() { # PROMPT ARGS... -> the generated text only
  local p=$1 o
  shift
  o=$("$dtrain" generate --prompt "$p" --max-new 60 --temperature 0.7 --top-p 0.9 "$@")
  o=${o#"$p"}
  o=${o%<|eot_id|>}
  o=${o%<|endoftext|>} # the end of a fortune, which the base learned
  printf '%s\n' "${o%<|end_of_text|>}"
}
for term in Committee Monday Programmer; do
  p=$(chat "$term")$'\n\n' # $(...) drops the trailing newlines
  echo "-- Define: $term"
  echo "   base:    $(gen "$p" --model "$base" --seed 7)"
  echo "   adapted: $(gen "$p" --model "$base" --adapter "$adapter" --seed 7)"
done
p=$(chat Monday)$'\n\n'
same=0
[ "$(gen "$p" --model "$base" --adapter "$adapter" --seed 7)" = \
  "$(gen "$p" --model "$out/merged" --seed 7)" ] && same=1

cat >"$out/summary.txt" <<EOF
pretrain_steps=$pre_steps
pretrain_val_loss=$p_loss
finetune_steps=$ft_steps
workers=$np
base_val_loss=$b_loss
base_val_ppl=$b_ppl
adapted_val_loss=$a_loss
adapted_val_ppl=$a_ppl
merged_matches_adapter=$same
seconds=$((SECONDS - start))
EOF
echo
echo "== results on the definitions' validation split (answer tokens; unseen by the base)"
echo "   base:            loss $b_loss  perplexity $b_ppl"
echo "   LoRA-finetuned:  loss $a_loss  perplexity $a_ppl  ($ft_steps steps, $np workers)"
echo "   (the base's loss on its own fortunes validation split: $p_loss)"
echo "   generate from the merged folder = generate --adapter: $([ $same = 1 ] && echo yes || echo NO)"
echo "lora-demo done in $((SECONDS - start)) s: $out (runs/, merged/, summary.txt)"
