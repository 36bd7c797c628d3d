#!/usr/bin/env bash
# Multipart checkpoint uploads during training, with the S3 gateway killed in the middle of one
# (a real SeaweedFS; run through tests/storage/seaweed.sh, which sets AWS_* and DT_S3_BUCKET and
# gives DT_SEAWEED_CTL to stop and start its servers).
#
# The model is a generated 22M-parameter Llama (89 MB model.safetensors, 178 MB of AdamW state):
# both files exceed the S3 multipart threshold, which the trainer cannot lower
# (dt_store_opts.multipart_threshold, 64 MiB; it opens the store with the defaults and no
# environment variable overrides them). While the checkpoint of step $fault_step is being
# uploaded the gateway is killed (SIGKILL) and started again DOWN_S seconds later (default 1.5).
# The run must either commit that checkpoint after retries or log that it was not committed and
# go on; either way it finishes (exit 0), every directory that has a trainer_state.json verifies
# (sizes and xxh3 of every file), a directory without one is not taken for a checkpoint, and a
# later run with ckpt.resume=auto resumes from the newest checkpoint, which verifies.
# DOWN_S of 8 outlasts every retry (5 retries, backoff 0.2 s doubled, at most 6.2 s in all), so
# that checkpoint must fail: the failure path is taken for sure.
#   s3_multipart.sh DTRAIN REPO DATA_DIR S3_GET [DOWN_S]
set -euo pipefail
dtrain=$1 repo=$2 data=$3 s3get=$4 down=${5:-1.5}
: "${DT_S3_BUCKET:?run through tests/storage/seaweed.sh}" "${DT_SEAWEED_CTL:?}"
tmp=$(mktemp -d)
trap 'pkill -KILL -f "output.dir=$tmp" 2>/dev/null || true; rm -rf "$tmp"' EXIT
"$s3get" mkbucket "$DT_S3_BUCKET"
url=s3://$DT_S3_BUCKET/multipart
now() { date +%s.%N; }

# 7 layers of width 512 (MLP 1536, 8 heads, 4 KV heads), the tiny Llama's 512-token vocabulary:
# 22,289,920 parameters
mkdir -p "$tmp/model"
cat > "$tmp/model/config.json" <<'EOF'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 512,
 "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 7,
 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 256,
 "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": true, "hidden_act": "silu",
 "bos_token_id": 0, "eos_token_id": 0, "torch_dtype": "float32"}
EOF
every=10 fault_step=20 steps=40
args=("$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp/model"
      data.train="$data/fortunes/train" data.val= data.seq_len=32 data.batch=2 train.threads=1
      train.log_every=1 schedule.warmup_steps=2 ckpt.every_steps="$every" ckpt.keep_last=0
      output.dir="$tmp" ckpt.dir="$url" output.run_name=mp)
root=llama-tiny-fortunes/mp/checkpoints
dir_of() { echo "$root/step-$(printf %09d "$1")"; }

"$dtrain" train "${args[@]}" train.steps=$steps > "$tmp/run.log" 2>&1 &
pid=$!
t_seen='' t_start=$SECONDS
while ((SECONDS - t_start < 90)); do
  if grep -q "^checkpoint step $fault_step (every_steps): snapshot" "$tmp/run.log"; then
    t_seen=$(now); break
  fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.02
done
[ -n "$t_seen" ] || { cat "$tmp/run.log"; echo "FAIL: no checkpoint at step $fault_step"; exit 1; }
$DT_SEAWEED_CTL stop s3
t_kill=$(now)
sleep "$down"
$DT_SEAWEED_CTL start s3
t_up=$(now)
rc=0
wait $pid || rc=$?
grep -E "^checkpoint|FAILED|^dtrain" "$tmp/run.log" || true
[ "$rc" = 0 ] || { tail -30 "$tmp/run.log"; echo "FAIL: the run exited with status $rc"; exit 1; }
awk -v a="$t_seen" -v b="$t_kill" -v c="$t_up" \
  'BEGIN { printf "gateway killed %.2f s after the snapshot was logged, back %.2f s later\n", b - a, c - b }'

fail=0
fdir=$(dir_of $fault_step)
must_fail=$(awk -v d="$down" 'BEGIN { print (d > 7) }')
if grep -q "^checkpoint step $fault_step committed" "$tmp/run.log"; then
  [ "$must_fail" = 0 ] ||
    { echo "FAIL: step $fault_step committed although the gateway was down longer than every retry"; exit 1; }
  # committed after retries: the write must have been in flight when the gateway died. It
  # started at most one step (+ polling) before its snapshot line was seen (the log is flushed
  # after each step's line): 0.5 s covers that, so a write that lasted longer than
  # t_kill - t_seen + 0.5 s was still going when the gateway was killed.
  ws=$(sed -nE "s/^checkpoint step $fault_step committed: .* in ([0-9.]+) s .*/\1/p" "$tmp/run.log")
  awk -v w="$ws" -v a="$t_seen" -v b="$t_kill" 'BEGIN { exit !(w > b - a + 0.5) }' ||
    { echo "FAIL: the upload of step $fault_step took $ws s: it ended before the gateway was killed"; exit 1; }
  echo "outcome: step $fault_step committed after retries (upload took $ws s)"
  "$s3get" verify "$url" "$fdir" || fail=1
elif grep -q "^checkpoint step $fault_step not committed" "$tmp/run.log"; then
  echo "outcome: step $fault_step failed and was not committed; training went on"
  if "$s3get" stat "$url" "$fdir/trainer_state.json"; then
    echo "FAIL: the failed checkpoint $fdir has a trainer_state.json"; fail=1
  fi
  later=$(sed -nE 's/^checkpoint step ([0-9]+) committed.*/\1/p' "$tmp/run.log" | awk -v f=$fault_step '$1 > f' | head -1)
  [ -n "$later" ] || { echo "FAIL: no later checkpoint was committed"; fail=1; }
else
  echo "FAIL: step $fault_step neither committed nor reported as failed"; exit 1
fi

# every committed checkpoint verifies; both files went multipart (>= 64 MiB)
"$s3get" check "$url" "$root" || { echo "FAIL: a committed checkpoint does not verify"; fail=1; }
last=$(dir_of $steps)
for f in model.safetensors optim-00000-of-00001.safetensors; do
  n=$("$s3get" stat "$url" "$last/$f") || { echo "FAIL: $last/$f missing"; fail=1; continue; }
  [ "$n" -ge 67108864 ] || { echo "FAIL: $f has $n bytes, under the 64 MiB multipart threshold"; fail=1; }
done

# a later run resumes from the newest good checkpoint
want=$("$s3get" latest "$url" "$root")
[ "$want" = "$last" ] || { echo "FAIL: the newest good checkpoint is $want, expected $last"; fail=1; }
"$dtrain" train "${args[@]}" train.steps=$((steps + 2)) ckpt.every_steps=0 > "$tmp/resume.log" 2>&1 ||
  { tail -30 "$tmp/resume.log"; echo "FAIL: the resumed run failed"; exit 1; }
grep "^resumed from $url/$want: step $steps\$" "$tmp/resume.log" ||
  { grep -v "^step" "$tmp/resume.log"; echo "FAIL: did not resume from $url/$want"; exit 1; }
grep -q "^step *$((steps + 2))/" "$tmp/resume.log" || { echo "FAIL: the resumed run did not train on"; fail=1; }
exit $fail
