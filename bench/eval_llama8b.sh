#!/usr/bin/env bash
# The seed's second experiment at its size (docs/lora.md, "The 8B run"): LoRA finetuning of a
# Llama-3.1-8B-Instruct-shaped model (bench/make_llama8b.py: the model's config.json, random bf16
# weights in its four files, a tokenizer with Llama 3's chat tokens) on NP workers of this host,
# r=16 on all seven projections, recompute on, the frozen base shared by the host's workers
# (lora.share_base, the bf16 files mapped read-only). Data: the `definitions` instruction pairs
# of Debian's fortunes (Llama 3 chat template, loss on the answers).
#   1. `dtrain plan` for the run (the memory per worker it plans);
#   2. the run uninterrupted, STEPS optimizer steps, a checkpoint every CKPT_EVERY;
#   3. the same run SIGTERMed once its first checkpoint is committed (it saves and exits 75), then
#      resumed (ckpt.resume=auto) to STEPS; its adapter and last checkpoint must equal the
#      uninterrupted run's bit for bit (the script fails otherwise);
#   4. the peer: the same step (NP x SEQ tokens, the same folder, adapters and recompute) with
#      transformers + PEFT on PyTorch, 1 process x NP threads, bf16 base;
#   5. the seed's table (bench/eval_llama8b_table.py): tok/s, seconds per step, peak memory per
#      worker against the plan, checkpoint size and save time, resume time.
#   bash bench/eval_llama8b.sh [BUILD_DIR=build]
# Environment: WORK (eval-8b-out: the model folder, 15 GiB, is kept there and reused), SEQ
# (1024), STEPS (10), CKPT_EVERY (5), NP (2), LAYERS (32; fewer for a quick check of the script:
# the widths stay the 8B's), PEER_STEPS (2 measured steps of the PEFT peer after 1 warm-up; 0:
# no peer). Needs ~17 GiB of disk and, at SEQ 1024, the memory `dtrain plan`
# prints for NP workers on one host.
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/header.inc"
bench_header
work=${WORK:-eval-8b-out} seq=${SEQ:-1024} steps=${STEPS:-10} every=${CKPT_EVERY:-5}
np=${NP:-2} layers=${LAYERS:-32} peer_steps=${PEER_STEPS:-2}
py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
dtrain=$build/dtrain
[ -x "$dtrain" ] || { echo "eval_llama8b.sh: no $dtrain (build first)" >&2; exit 2; }
[ "$every" -lt "$steps" ] || { echo "eval_llama8b.sh: CKPT_EVERY ($every) must be below STEPS ($steps)" >&2; exit 2; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
model=$work/model-L$layers
launch=(mpirun --oversubscribe --bind-to none -np "$np")
[ "$(id -u)" = 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$np")
t_start=$SECONDS

if [ ! -f "$model/done" ]; then
  echo "== the model folder ($layers layers): $model"
  rm -rf "$model"
  "$py" "$here/make_llama8b.py" "$model" --layers "$layers"
  touch "$model/done"
fi
data=$work/definitions
if [ ! -f "$data/train/manifest.json" ]; then
  "$py" "$repo/examples/llama-small/definitions_jsonl.py" /usr/share/games/fortunes/definitions \
    > "$work/definitions.jsonl"
  "$dtrain" data import jsonl "$work/definitions.jsonl" -o "$data" --val 0.1 \
    --tokenizer "$repo/data/tokenizers/cl100k_base.tiktoken" -q
fi

args=("$repo/examples/llama3.1-8b-lora.yaml" model.hf_path="$model" data.train="$data/train"
      data.val= data.seq_len="$seq" data.batch=1 data.pack=docs train.grad_accum=1
      train.steps="$steps" train.eval_every=0 train.log_every=1 train.threads=1
      'lora.targets=[q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj]' lora.rank=16
      lora.alpha=32 lora.dropout=0 lora.share_base=true schedule.warmup_steps=2
      ckpt.every_steps="$every" ckpt.keep_last=2 output.dir="$work/runs")
echo "== dtrain plan, $np workers"
"$dtrain" plan "${args[@]}" -n "$np" | tee "$work/plan.txt"
"$dtrain" plan "${args[@]}" -n "$np" --json > "$work/plan.json"
rm -rf "$work/runs"
export OMP_NUM_THREADS=1
# each line with the time it arrived (the table's step times and resume time come from these)
stamp() { while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done; }

echo "== 1. uninterrupted: $steps steps on $np workers (seq $seq)"
date +%s.%N > "$work/full.start"
"${launch[@]}" "$dtrain" train "${args[@]}" output.run_name=full ckpt.resume=never 2>&1 |
  stamp > "$work/full.log" || { tail -30 "$work/full.log"; exit 1; }
grep -v '^[0-9.]* step' "$work/full.log" | cut -d' ' -f2- | tail -8

echo "== 2. SIGTERM after the checkpoint of step $every, then resumed"
"${launch[@]}" "$dtrain" train "${args[@]}" output.run_name=cut ckpt.resume=never \
  > "$work/cut.log" 2>&1 &
pid=$!
until grep -q "^checkpoint step $every committed" "$work/cut.log" 2> /dev/null; do
  kill -0 "$pid" 2> /dev/null || { tail -30 "$work/cut.log"; echo "FAIL: the run to stop ended"; exit 1; }
  sleep 1
done
pkill -TERM -P "$pid" -f "dtrain train" || true # to the ranks, as a scheduler signals them
rc=0
wait "$pid" || rc=$?
[ "$rc" = 75 ] || { tail -20 "$work/cut.log"; echo "FAIL: exit status $rc after SIGTERM, expected 75"; exit 1; }
grep '^stopped at' "$work/cut.log"
stopped=$(sed -nE 's/^stopped at step ([0-9]+).*/\1/p' "$work/cut.log")
[ "${stopped:-$steps}" -lt "$steps" ] ||
  echo "note: stopped at the last step ($steps): the resumed run trains nothing (raise STEPS)"
date +%s.%N > "$work/resume.start"
"${launch[@]}" "$dtrain" train "${args[@]}" output.run_name=cut ckpt.resume=auto 2>&1 |
  stamp > "$work/resume.log" || { tail -30 "$work/resume.log"; exit 1; }
grep '^[0-9.]* resumed from' "$work/resume.log" | cut -d' ' -f2-

exp=$(ls -d "$work/runs"/*/ | head -1)
last=checkpoints/step-$(printf %09d "$steps")
fail=0
for f in adapter/adapter_model.safetensors $(cd "$exp/full" && ls "$last" | grep -v -e '\.json$' | sed "s|^|$last/|"); do
  if cmp -s "$exp/full/$f" "$exp/cut/$f"; then echo "identical: $f"
  else echo "FAIL: $f differs between the uninterrupted and the resumed run"; fail=1; fi
done
[ $fail = 0 ] || exit 1
peer=()
if [ "$peer_steps" -gt 0 ]; then
  echo "== 3. the peer: transformers + PEFT, the same step ($np x $seq tokens) in 1 process x $np threads"
  # the same global batch, model folder, adapters and recompute; AdamW on f32 adapters over
  # the bf16 base; random token ids (its speed does not depend on them)
  "$py" "$here/peers/bench_lora_peft.py" --model "$model" --threads "$np" --batch "$np" \
    --seq "$seq" --rank 16 --alpha 32 --grad_ckpt 1 --steps "$peer_steps" --warmup 1 \
    --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj 2>&1 |
    grep -v -i warn | tee "$work/peer.log" | tail -1
  tok=$(grep -oE 'tok_per_s=[0-9.]+' "$work/peer.log" | cut -d= -f2)
  [ -n "$tok" ] || { tail -20 "$work/peer.log"; echo "FAIL: the PEFT peer gave no tok/s"; exit 1; }
  peer=(--peer-tok "$tok")
fi
echo "== the table"
"$py" "$here/eval_llama8b_table.py" --work "$work" --np "$np" --seq "$seq" --steps "$steps" \
  --layers "$layers" --total-min "$(( (SECONDS - t_start + 30) / 60 ))" "${peer[@]}" | tee "$work/table.md"
