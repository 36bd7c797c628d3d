#!/usr/bin/env bash
# Exact resume with checkpoints on S3 (a real SeaweedFS; run through tests/storage/seaweed.sh,
# which sets AWS_* and DT_S3_BUCKET): a 2-rank tiny Llama with ZeRO stage 2 (each rank uploads
# its own optimizer shard) and ckpt.dir=s3://BUCKET/PREFIX, stopped by SIGTERM (save, commit,
# exit 75) and resumed with ckpt.resume=auto, ends with the same bits as an uninterrupted run:
# every file of the final checkpoint (downloaded with s3_get) and the exported model (in
# output.dir, a local path) are compared byte for byte.
#   s3_resume.sh DTRAIN REPO DATA_DIR S3_GET MPIRUN...
set -euo pipefail
dtrain=$1 repo=$2 data=$3 s3get=$4
shift 4
: "${DT_S3_BUCKET:?run through tests/storage/seaweed.sh}"
tmp=$(mktemp -d)
trap 'pkill -KILL -f "output.dir=$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$s3get" mkbucket "$DT_S3_BUCKET"
url=s3://$DT_S3_BUCKET/resume
steps=24
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.seq_len=64
      data.batch=4 train.steps="$steps" optim.clip_norm=1 dist.bucket_mb=0.25 data.val=
      train.threads=1 schedule.warmup_steps=5 train.log_every=1 ckpt.every_steps=6
      ckpt.keep_last=2 dist.zero_stage=2 output.dir="$tmp" ckpt.dir="$url")
exp=llama-tiny-fortunes
final=step-$(printf %09d $steps)

"$@" -np 2 "$dtrain" train "${args[@]}" output.run_name=full > "$tmp/full.log" 2>&1 ||
  { cat "$tmp/full.log"; echo "FAIL: the uninterrupted run failed"; exit 1; }
grep "^checkpoint step $steps committed" "$tmp/full.log" ||
  { cat "$tmp/full.log"; echo "FAIL: no final checkpoint committed"; exit 1; }

# The interrupted run: SIGTERM to every rank once a checkpoint has been committed.
"$@" -np 2 "$dtrain" train "${args[@]}" output.run_name=cut > "$tmp/cut.log" 2>&1 &
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
[ -n "$stopped" ] ||
  { grep -v "^step" "$tmp/cut.log" | tail -30; echo "FAIL: the run did not stop on SIGTERM (rc $rc)"; exit 1; }
[ "$rc" = 75 ] || { echo "FAIL: exit status $rc after preemption, expected 75"; exit 1; }
[ "$stopped" -lt "$steps" ] || { echo "FAIL: SIGTERM came too late (stopped at the last step)"; exit 1; }
cut_dir=$exp/cut/checkpoints/step-$(printf %09d "$stopped")
"$s3get" verify "$url" "$cut_dir" ||
  { echo "FAIL: the preemption checkpoint at step $stopped is not committed and verified on S3"; exit 1; }
echo "preempted at step $stopped with exit status 75"
# checkpoints went to S3 only: nothing under the local run directories
if find "$tmp/$exp" -path '*checkpoints*' | grep -q .; then
  echo "FAIL: checkpoint files written locally:"; find "$tmp/$exp" -path '*checkpoints*'; exit 1
fi

"$@" -np 2 "$dtrain" train "${args[@]}" output.run_name=cut > "$tmp/resume.log" 2>&1 ||
  { cat "$tmp/resume.log"; echo "FAIL: the resumed run failed"; exit 1; }
grep "^resumed from $url/$cut_dir: step $stopped\$" "$tmp/resume.log" ||
  { grep -v "^step" "$tmp/resume.log"; echo "FAIL: did not resume from $url/$cut_dir"; exit 1; }

fail=0
for run in full cut; do
  "$s3get" verify "$url" "$exp/$run/checkpoints/$final" || fail=1
done
# every file of the final checkpoint but trainer_state.json (it records the run's own name and
# timing), downloaded from S3
files=$("$s3get" list "$url" "$exp/full/checkpoints/$final/" | sed 's|.*/||' | grep -v trainer_state.json)
if ! echo "$files" | grep -qx model.safetensors ||
   [ "$(echo "$files" | grep -c '^optim-0000[01]-of-00002')" != 2 ]; then
  echo "FAIL: expected model.safetensors and 2 optimizer shards, got:"; echo "$files"; exit 1
fi
for f in $files; do
  for run in full cut; do
    "$s3get" get "$url" "$exp/$run/checkpoints/$final/$f" "$tmp/$run-$f"
  done
  if cmp -s "$tmp/full-$f" "$tmp/cut-$f"; then echo "identical: $final/$f ($(stat -c %s "$tmp/full-$f") bytes)"
  else echo "FAIL: differs: $final/$f"; fail=1; fi
done
f=model/model.safetensors
if cmp -s "$tmp/$exp/full/$f" "$tmp/$exp/cut/$f"; then echo "identical: exported $f"
else echo "FAIL: differs: exported $f"; fail=1; fi
exit $fail
