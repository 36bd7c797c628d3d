#!/usr/bin/env bash
# S3 credentials from the shared credentials file, and no secret in anything dtrain writes or
# prints (docs/security.md, "Secrets and files"). Real `dtrain train` runs with ckpt.dir=s3://...
# against a real SeaweedFS (run through tests/storage/seaweed.sh, which sets AWS_* and
# DT_S3_BUCKET); the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY variables are removed for dtrain
# except where the environment's precedence is tested:
#   1. ~/.aws/credentials (HOME), profile [default], mode 600: trains, checkpoints committed;
#   2. AWS_SHARED_CREDENTIALS_FILE whose [default] has a wrong secret and [good] the right one:
#      with AWS_PROFILE=good it trains; without, "access denied" at start (the wrong-secret
#      failure, from the file);
#   3. the environment wins over the file (right keys in the environment, the file's wrong);
#   4. the file readable by group or others (644, 640, 604): refused before any step, one line
#      naming the file, its mode and `chmod 600`; a missing profile, a file without the secret
#      key: one line each;
# and in every case neither secret (nor the file's session token) appears in stdout, stderr,
# the run directories (config.yaml, run.json, ...), the experiment store (`strings` of the
# SQLite file and its -wal), `dtrain runs show` or `dtrain runs export --format json`.
#   secrets_s3.sh DTRAIN REPO S3_GET
set -uo pipefail
dtrain=$1 repo=$2 s3get=$3
: "${DT_S3_BUCKET:?run through tests/storage/seaweed.sh}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$s3get" mkbucket "$DT_S3_BUCKET" || exit 1
key=$AWS_ACCESS_KEY_ID good=$AWS_SECRET_ACCESS_KEY
wrong=wrongsecret$(od -An -N8 -tx4 /dev/urandom | tr -d ' ')
stoken=sesstoken$(od -An -N8 -tx4 /dev/urandom | tr -d ' ')
fail=0
ok() { echo "ok:   $*"; }
bad() { echo "FAIL: $*"; fail=1; }
export OMP_NUM_THREADS=1

mkdir "$tmp/src" "$tmp/home"
head -c 20000 /usr/share/games/fortunes/fortunes >"$tmp/src/a.txt"
"$dtrain" data import text "$tmp/src" -o "$tmp/data" --doc-sep % --val 0.1 \
    --tokenizer "$repo/examples/llama-tiny/tokenizer.json" -q >/dev/null || exit 1
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$tmp/data/train" data.val=
      data.seq_len=32 data.batch=2 train.steps=4 train.threads=1 train.log_every=1
      ckpt.every_steps=2 schedule.warmup_steps=1 output.dir="$tmp/out")

# train NAME [VAR=VALUE...]: dtrain train with ckpt.dir=s3://BUCKET/NAME, without the AWS key
# variables unless given; HOME=$tmp/home. Sets $rc; output in $tmp/NAME.out, .err
train() {
    local name=$1
    shift
    rc=0
    env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_SESSION_TOKEN -u AWS_PROFILE \
        -u AWS_SHARED_CREDENTIALS_FILE HOME="$tmp/home" "$@" \
        "$dtrain" train "${args[@]}" ckpt.dir="s3://$DT_S3_BUCKET/$name" output.run_name="$name" \
        >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}
committed() { # NAME: trained to the end with its last checkpoint in the bucket
    [ "$rc" = 0 ] && grep -q "checkpoint step 4 committed" "$tmp/$1.out" &&
        "$s3get" stat "s3://$DT_S3_BUCKET/$1" \
            "llama-tiny-fortunes/$1/checkpoints/step-000000004/trainer_state.json" >/dev/null
}
one_line() { [ "$(grep -c . "$tmp/$1.err")" = 1 ]; }
creds() { # FILE MODE [PROFILE KEY SECRET [TOKEN]]...: writes a credentials file
    local f=$1 mode=$2
    shift 2
    : >"$f"
    while [ $# -ge 3 ]; do
        printf '[%s]\naws_access_key_id = %s\naws_secret_access_key=%s\n' "$1" "$2" "$3" >>"$f"
        shift 3
    done
    chmod "$mode" "$f"
}

# 1. ~/.aws/credentials, [default]
mkdir -m 700 "$tmp/home/.aws"
creds "$tmp/home/.aws/credentials" 600 default "$key" "$good"
train home
committed home && ok "~/.aws/credentials (600), [default]: trained, checkpoint committed" ||
    bad "~/.aws/credentials: exit $rc: $(cat "$tmp/home.err")"

# 2. a named file and profile; the wrong [default]
f=$tmp/creds
creds "$f" 600 default "$key" "$wrong" good "$key" "$good"
printf '# a comment\n; another\n[tok]\n  aws_access_key_id=%s\n aws_secret_access_key = %s \naws_session_token = %s\n' \
    "$key" "$wrong" "$stoken" >>"$f"
train profile AWS_SHARED_CREDENTIALS_FILE="$f" AWS_PROFILE=good
committed profile && ok "AWS_SHARED_CREDENTIALS_FILE, AWS_PROFILE=good: trained" ||
    bad "AWS_PROFILE=good: exit $rc: $(cat "$tmp/profile.err")"
train wrongdef AWS_SHARED_CREDENTIALS_FILE="$f"
if [ $rc != 0 ] && one_line wrongdef && grep -qi "access denied" "$tmp/wrongdef.err" &&
    ! grep -q "^step" "$tmp/wrongdef.out"; then
    ok "[default] with a wrong secret: refused at start: $(cat "$tmp/wrongdef.err")"
else
    bad "[default] with a wrong secret: exit $rc: $(cat "$tmp/wrongdef.err")"
fi
train wrongtok AWS_SHARED_CREDENTIALS_FILE="$f" AWS_PROFILE=tok
[ $rc != 0 ] && grep -qi "access denied" "$tmp/wrongtok.err" &&
    ok "a profile with a session token and a wrong secret: access denied" ||
    bad "profile tok: exit $rc: $(cat "$tmp/wrongtok.err")"

# 3. the environment first
creds "$tmp/home/.aws/credentials" 600 default "$key" "$wrong"
train envfirst AWS_ACCESS_KEY_ID="$key" AWS_SECRET_ACCESS_KEY="$good"
committed envfirst && ok "the environment's keys win over the file's" ||
    bad "environment first: exit $rc: $(cat "$tmp/envfirst.err")"

# 4. refused files
for mode in 644 640 604; do
    creds "$f" "$mode" default "$key" "$good"
    train "mode$mode" AWS_SHARED_CREDENTIALS_FILE="$f"
    if [ $rc != 0 ] && one_line "mode$mode" && grep -q "$f has mode 0$mode" "$tmp/mode$mode.err" &&
        grep -q "chmod 600 $f" "$tmp/mode$mode.err" && ! grep -q "^step" "$tmp/mode$mode.out"; then
        ok "credentials file $mode: refused before training: $(cat "$tmp/mode$mode.err")"
    else
        bad "credentials file $mode: exit $rc: $(cat "$tmp/mode$mode.err")"
    fi
done
creds "$f" 600 other "$key" "$good"
train noprofile AWS_SHARED_CREDENTIALS_FILE="$f"
[ $rc != 0 ] && one_line noprofile && grep -q "has no profile \[default\]" "$tmp/noprofile.err" &&
    ok "no [default] profile: $(cat "$tmp/noprofile.err")" ||
    bad "no profile: exit $rc: $(cat "$tmp/noprofile.err")"
printf '[default]\naws_access_key_id = %s\n' "$key" >"$f"
train nosecret AWS_SHARED_CREDENTIALS_FILE="$f"
[ $rc != 0 ] && one_line nosecret && grep -q "no aws_secret_access_key" "$tmp/nosecret.err" &&
    ok "no secret key in the profile: $(cat "$tmp/nosecret.err")" ||
    bad "no secret key: exit $rc: $(cat "$tmp/nosecret.err")"
train nofile AWS_SHARED_CREDENTIALS_FILE="$tmp/none"
[ $rc != 0 ] && one_line nofile && grep -q "AWS_ACCESS_KEY_ID is not set and $tmp/none does not exist" \
    "$tmp/nofile.err" && ok "no credentials at all: $(cat "$tmp/nofile.err")" ||
    bad "no credentials: exit $rc: $(cat "$tmp/nofile.err")"

# 5. no secret anywhere
db=$tmp/out/dtrain.db
[ -f "$db" ] || bad "no experiment store at $db"
for r in home profile envfirst; do # (the refused runs never reached the store)
    "$dtrain" runs show "$r" --db "$db" >"$tmp/show-$r.txt" 2>&1 || bad "runs show $r"
    "$dtrain" runs export "$r" --db "$db" --format json -o "$tmp/export-$r.json" 2>&1 ||
        bad "runs export $r"
done
grep -q "s3://$DT_S3_BUCKET/home" "$tmp/show-home.txt" "$tmp/export-home.json" ||
    bad "runs show/export do not name the checkpoint store (is the check looking at the run?)"
strings -a "$db" "$db"-wal 2>/dev/null >"$tmp/store-strings.txt"
grep -q "s3://$DT_S3_BUCKET/profile" "$tmp/store-strings.txt" ||
    bad "strings of the store do not show the runs' ckpt.dir (is the check looking at the store?)"
leaks=$(grep -rl -e "$good" -e "$wrong" -e "$stoken" "$tmp"/*.out "$tmp"/*.err "$tmp/out" \
    "$tmp"/show-*.txt "$tmp"/export-*.json "$tmp/store-strings.txt" 2>/dev/null)
n_files=$(find "$tmp/out" -type f | wc -l)
if [ -n "$leaks" ]; then
    bad "a secret appears in: $leaks"
else
    ok "neither secret nor the session token in any output, the $n_files files of the run directories and the store, runs show or export"
fi
# the access key id is not a secret, but no run record has a reason to hold it either
leaks=$(grep -rl -e "$key" "$tmp/out" "$tmp"/show-*.txt "$tmp"/export-*.json "$tmp/store-strings.txt")
[ -z "$leaks" ] && ok "the access key id is in no run record" || bad "the access key id in: $leaks"

[ $fail = 0 ] && echo "secrets_s3: passed"
exit $fail
