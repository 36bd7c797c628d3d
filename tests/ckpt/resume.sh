#!/usr/bin/env bash
# Exact resume after preemption: a 2-rank run stopped by SIGTERM (finish the step, save, exit 75)
# and resumed with ckpt.resume=auto ends with the same bits as an uninterrupted run: the exported
# model and every optimizer shard of the final checkpoint are compared byte for byte.
#   resume.sh DTRAIN REPO DATA_DIR MODEL(llama|resnet) ZERO_STAGE MPIRUN...
set -euo pipefail
dtrain=$1 repo=$2 data=$3 model=$4 zero=$5
shift 5
tmp=$(mktemp -d)
trap 'pkill -KILL -f "output.dir=$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
if [ "$model" = llama ]; then
  args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.seq_len=64
        data.batch=4 train.steps=40 optim.clip_norm=1 dist.bucket_mb=0.25)
  export_file=model/model.safetensors
else
  args=("$repo/examples/resnet18-fmnist.yaml" data.train="$data/fmnist/train" model.width=8
        data.batch=16 train.steps=40 data.augment=true data.workers=1)
  export_file=model.safetensors
fi
args+=(data.val= train.threads=1 schedule.warmup_steps=5 train.log_every=1 ckpt.every_steps=6
       ckpt.keep_last=2 dist.zero_stage="$zero" output.dir="$tmp")
run() { "$@" -np 2 "$dtrain" train "${args[@]}" "${extra[@]}"; }

extra=(output.run_name=full)
"$@" -np 2 "$dtrain" train "${args[@]}" "${extra[@]}" > "$tmp/full.log" 2>&1 || { cat "$tmp/full.log"; exit 1; }

# The interrupted run: SIGTERM to every rank once a checkpoint has been committed.
extra=(output.run_name=cut)
"$@" -np 2 "$dtrain" train "${args[@]}" "${extra[@]}" > "$tmp/cut.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  grep -q "^checkpoint step 6 committed" "$tmp/cut.log" 2>/dev/null && break
  sleep 0.05
done
# to the ranks (children of mpirun), not mpirun: as a cluster scheduler signals every worker
pkill -TERM -P "$pid" -f "dtrain train" || true
rc=0
wait $pid || rc=$?
grep -E "^checkpoint|stopped at" "$tmp/cut.log" || true
stopped=$(sed -nE 's/^stopped at step ([0-9]+).*/\1/p' "$tmp/cut.log")
if [ -z "$stopped" ]; then echo "FAIL: the run did not stop on SIGTERM (rc $rc)"; grep -v "^step" "$tmp/cut.log" | tail -30; exit 1; fi
grep -v "^step" "$tmp/cut.log" | tail -20; [ "$rc" = 75 ] || { echo "FAIL: exit status $rc after preemption, expected 75"; exit 1; }
[ -f "$tmp/"*/cut/checkpoints/step-$(printf %09d "$stopped")/trainer_state.json ] ||
  { echo "FAIL: no committed checkpoint at the preemption step $stopped"; exit 1; }
echo "preempted at step $stopped with exit status 75"

"$@" -np 2 "$dtrain" train "${args[@]}" "${extra[@]}" > "$tmp/resume.log" 2>&1 || { cat "$tmp/resume.log"; exit 1; }
grep "^resumed from" "$tmp/resume.log" || { echo "FAIL: did not resume"; cat "$tmp/resume.log"; exit 1; }

exp=$(ls -d "$tmp"/*/ | head -1)
fail=0
for f in "$export_file" checkpoints/step-000000040/model.safetensors \
         $(cd "$exp/full" && ls checkpoints/step-000000040/ | grep optim | sed 's|^|checkpoints/step-000000040/|'); do
  if cmp -s "$exp/full/$f" "$exp/cut/$f"; then echo "identical: $f"; else echo "FAIL: differs: $f"; fail=1; fi
done
exit $fail
