#!/usr/bin/env bash
# A wrong AWS_SECRET_ACCESS_KEY with ckpt.dir=s3://... (a real SeaweedFS; run through
# tests/storage/seaweed.sh, which sets AWS_* and DT_S3_BUCKET):
#   1. ckpt.resume=auto (the default) lists the store at start: the run fails before its first
#      step with one line that says "access denied" and names the store;
#   2. ckpt.resume=never: the first checkpoint is where the store is first used; it must not be
#      committed (nothing lands in the bucket), and the run fails (the final checkpoint cannot
#      be saved) with a line that says "access denied".
# In both, neither the wrong nor the right secret appears in any output: stdout, stderr, or a
# file of the run directory.
#   s3_auth.sh DTRAIN REPO DATA_DIR S3_GET
set -euo pipefail
dtrain=$1 repo=$2 data=$3 s3get=$4
: "${DT_S3_BUCKET:?run through tests/storage/seaweed.sh}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$s3get" mkbucket "$DT_S3_BUCKET"
url=s3://$DT_S3_BUCKET/auth
good=$AWS_SECRET_ACCESS_KEY
wrong=wrong$(od -An -N8 -tx4 /dev/urandom | tr -d ' ')
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.seq_len=32
      data.batch=2 train.steps=6 data.val= train.threads=1 train.log_every=1 ckpt.every_steps=3
      schedule.warmup_steps=1 output.dir="$tmp/out" ckpt.dir="$url")
fail=0
no_secret() { # FILE...: neither secret in any of them
  if grep -l -e "$wrong" -e "$good" "$@" 2>/dev/null; then
    echo "FAIL: a secret key appears in the files above"; fail=1
  fi
}

# 1. resume=auto: refused at start
rc=0
AWS_SECRET_ACCESS_KEY=$wrong "$dtrain" train "${args[@]}" output.run_name=auto \
  > "$tmp/auto.out" 2> "$tmp/auto.err" || rc=$?
echo "--- resume=auto: exit status $rc, stderr:"; cat "$tmp/auto.err"
[ "$rc" != 0 ] || { echo "FAIL: the run succeeded with a wrong secret"; fail=1; }
if grep -q "^step" "$tmp/auto.out"; then echo "FAIL: training steps ran before the store was checked"; fail=1; fi
n=$(grep -c . "$tmp/auto.err" || true)
[ "$n" = 1 ] || { echo "FAIL: expected a one-line error on stderr, got $n lines"; fail=1; }
grep -i "access denied" "$tmp/auto.err" | grep -q "$url" ||
  { echo "FAIL: the error does not say 'access denied' and name $url"; fail=1; }
no_secret "$tmp/auto.out" "$tmp/auto.err"

# 2. resume=never: refused at the first checkpoint
rc=0
AWS_SECRET_ACCESS_KEY=$wrong "$dtrain" train "${args[@]}" output.run_name=never ckpt.resume=never \
  > "$tmp/never.out" 2> "$tmp/never.err" || rc=$?
echo "--- resume=never: exit status $rc, checkpoint lines and stderr:"
grep "checkpoint" "$tmp/never.out" || true
cat "$tmp/never.err"
[ "$rc" != 0 ] || { echo "FAIL: the run succeeded although no checkpoint could be saved"; fail=1; }
if grep -q "checkpoint step [0-9]* committed" "$tmp/never.out"; then
  echo "FAIL: a checkpoint was reported committed with a wrong secret"; fail=1
fi
grep -i "access denied" "$tmp/never.err" | grep -q "$url" ||
  { echo "FAIL: no 'access denied' error naming $url"; fail=1; }
no_secret "$tmp/never.out" "$tmp/never.err"
keys=$("$s3get" list "$url" "")
[ -z "$keys" ] || { echo "FAIL: objects were written with a wrong secret:"; echo "$keys"; fail=1; }

# the run directories (config.yaml, run.json, ...) hold no secret either
[ -d "$tmp/out" ] && no_secret -r "$tmp/out"
[ $fail = 0 ] && echo "access denied, one line, at start (resume=auto) and at the first checkpoint (resume=never); no secret in any output"
exit $fail
