#!/usr/bin/env bash
# `dtrain ckpt ls|verify|show` on checkpoints of a tiny Llama run (1 rank, steps 2, 4, 6).
#   CASE local  checkpoints on local disk, addressed as a path, a relative path and file://;
#               usage errors (exit 2, one line on stderr, nothing on stdout), missing paths
#               (exit 1), `show` against trainer_state.json and the files on disk, and a copied
#               checkpoint whose trainer_state.json is of another step (verify fails)
#   CASE s3     checkpoints on a real SeaweedFS S3 (run through tests/storage/seaweed.sh, which
#               sets AWS_* and DT_S3_BUCKET; S3_GET creates the bucket and fetches objects):
#               ls of the checkpoints and of the run "directory", verify, show --json against
#               the stored object, a missing checkpoint (exit 1)
#   cli.sh DTRAIN REPO DATA_DIR CASE [S3_GET]
set -euo pipefail
dtrain=$(readlink -f "$1") repo=$2 data=$3 case=$4 s3get=${5:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL ($case): $*"
    exit 1
}
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=64 data.batch=4 train.threads=1 schedule.warmup_steps=2 train.steps=6
      train.log_every=1 ckpt.every_steps=2 ckpt.keep_last=0 ckpt.resume=never
      output.dir="$tmp/runs" output.export=false output.run_name=cli)
# expect RC [N_STDOUT_LINES|-] CMD...: runs CMD; checks the exit status, that stderr is one line
# when it fails, and the number of stdout lines; leaves stdout in $tmp/out, stderr in $tmp/err.
expect() {
    local want=$1 lines=$2 rc=0
    shift 2
    "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
    echo "\$ dtrain ${*:2} -> $rc: $(head -c 300 "$tmp/err")"
    [ "$rc" = "$want" ] || { cat "$tmp/out" "$tmp/err"; fail "exit status $rc, expected $want: $*"; }
    if [ "$rc" != 0 ]; then
        [ "$(wc -l < "$tmp/err")" = 1 ] || { cat "$tmp/err"; fail "not one line on stderr: $*"; }
    fi
    if [ "$lines" != - ]; then
        [ "$(wc -l < "$tmp/out")" = "$lines" ] || { cat "$tmp/out"; fail "expected $lines lines on stdout: $*"; }
    fi
}
exp=llama-tiny-fortunes

if [ "$case" = s3 ]; then
    : "${DT_S3_BUCKET:?run through tests/storage/seaweed.sh}"
    "$s3get" mkbucket "$DT_S3_BUCKET"
    url=s3://$DT_S3_BUCKET/cli
    "$dtrain" train "${args[@]}" ckpt.dir="$url" > "$tmp/train.log" 2>&1 ||
        { cat "$tmp/train.log"; fail "training failed"; }
    root=$url/$exp/cli/checkpoints
    expect 0 3 "$dtrain" ckpt ls "$root"
    cat "$tmp/out"
    for s in 2 4 6; do grep -qE "^step-00000000$s +committed " "$tmp/out" || fail "step $s not listed"; done
    cp "$tmp/out" "$tmp/ls_root"
    expect 0 3 "$dtrain" ckpt ls "$url/$exp/cli/" # the run "directory"
    cmp -s "$tmp/out" "$tmp/ls_root" || fail "ls of the run differs from ls of its checkpoints"
    expect 0 3 "$dtrain" ckpt ls --verify "$root"
    [ "$(grep -c ' verified$' "$tmp/out")" = 3 ] || fail "not every checkpoint verified"
    expect 0 1 "$dtrain" ckpt verify "$root/step-000000004"
    grep -q "^ok: " "$tmp/out" || fail "verify did not say ok"
    expect 0 - "$dtrain" ckpt show --json "$root/step-000000004"
    "$s3get" get "$url" "$exp/cli/checkpoints/step-000000004/trainer_state.json" "$tmp/state.json"
    cmp -s <(head -c "$(stat -c %s "$tmp/state.json")" "$tmp/out") "$tmp/state.json" ||
        fail "show --json is not the stored trainer_state.json"
    expect 0 - "$dtrain" ckpt show "$root/step-000000004"
    grep -qE "^step +4$" "$tmp/out" || fail "show: no step 4"
    expect 1 0 "$dtrain" ckpt verify "$root/step-000000005"
    grep -q "no such checkpoint" "$tmp/err" || fail "a missing checkpoint is not reported as such"
    expect 1 0 "$dtrain" ckpt ls s3://no-such-bucket-dtrain/x/checkpoints
    echo "ok ($case)"
    exit 0
fi

"$dtrain" train "${args[@]}" > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail "training failed"; }
run="$tmp/runs/$exp/cli"
root="$run/checkpoints"

# ---- usage ----
expect 0 - "$dtrain" ckpt --help
for w in ls verify show; do grep -q "dtrain ckpt $w" "$tmp/out" || fail "--help does not show $w"; done
expect 0 - "$dtrain" ckpt ls --help
expect 2 0 "$dtrain" ckpt
expect 2 0 "$dtrain" ckpt list "$root"
expect 2 0 "$dtrain" ckpt ls
expect 2 0 "$dtrain" ckpt ls "$root" "$root"
expect 2 0 "$dtrain" ckpt verify --json "$root/step-000000002"
expect 2 0 "$dtrain" ckpt ls --bogus "$root"
expect 2 0 "$dtrain" ckpt ls "http://host/x"
expect 2 0 "$dtrain" ckpt ls "s3://bucket-only"
expect 1 0 "$dtrain" ckpt ls "$tmp/missing/checkpoints"
[ -e "$tmp/missing" ] && fail "ls created the missing directory"
expect 1 0 "$dtrain" ckpt verify "$root/step-000000003"
expect 1 0 "$dtrain" ckpt show "$tmp/train.log"

# ---- ls: the same listing whichever way the run is addressed ----
expect 0 3 "$dtrain" ckpt ls "$root"
cat "$tmp/out"
cp "$tmp/out" "$tmp/ls_root"
for s in 2 4 6; do
    l=$(grep -E "^step-00000000$s +committed " "$tmp/ls_root") || fail "step $s not listed committed"
    loss=$(tr -d '\n\t ' < "$root/step-00000000$s/trainer_state.json" |
           sed -nE 's/.*"metrics":\{"loss":([-+0-9.eE]+).*/\1/p')
    grep -qF "loss $(printf %.4f "$loss") " <<< "$l" || fail "step $s: loss $loss not shown: $l"
done
for u in "$run" "file://$root" "file://$run/" "$root/"; do
    expect 0 3 "$dtrain" ckpt ls "$u"
    cmp -s "$tmp/out" "$tmp/ls_root" || { cat "$tmp/out"; fail "ls $u differs from ls $root"; }
done
(cd "$run" && "$dtrain" ckpt ls checkpoints) > "$tmp/out" || fail "ls of a relative path"
cmp -s "$tmp/out" "$tmp/ls_root" || fail "ls of a relative path differs"
(cd "$root" && "$dtrain" ckpt ls .) > "$tmp/out" || fail "ls ."
cmp -s "$tmp/out" "$tmp/ls_root" || fail "ls . differs"
expect 0 1 "$dtrain" ckpt ls "$root/step-000000004"
grep -qE "^step-000000004 +committed " "$tmp/out" || fail "ls of one checkpoint"
expect 0 - "$dtrain" ckpt ls --json "$root"
[ "$(grep -c '"committed":[[:space:]]*true' "$tmp/out")" = 3 ] || fail "ls --json"
mkdir "$tmp/empty"
expect 0 0 "$dtrain" ckpt ls "$tmp/empty"

# ---- verify ----
expect 0 1 "$dtrain" ckpt verify "$root/step-000000006"
grep -q "^ok: .*step 6, 2 files" "$tmp/out" || fail "verify: $(cat "$tmp/out")"
expect 0 1 "$dtrain" ckpt verify "file://$root/step-000000006/"
# a whole checkpoint copied under another step's name: every checksum matches, the step does not
cp -r "$root/step-000000004" "$root/step-000000005"
expect 1 0 "$dtrain" ckpt verify "$root/step-000000005"
grep -q "trainer_state.json is of step 4" "$tmp/err" || fail "a checkpoint of another step verified"
expect 1 4 "$dtrain" ckpt ls --verify "$root"
grep -qE "^step-000000005 +committed .*BAD: " "$tmp/out" || fail "ls --verify does not flag step 5"
rm -r "$root/step-000000005"

# ---- show ----
d="$root/step-000000004"
expect 0 - "$dtrain" ckpt show "$d"
cat "$tmp/out"
st=$(tr -d '\n\t ' < "$d/trainer_state.json")
field() { sed -nE "s/.*\"$1\":\"?([^,\"}]*).*/\1/p" <<< "$st"; }
grep -qE "^step +4$" "$tmp/out" || fail "show: step"
grep -qE "^world size +1$" "$tmp/out" || fail "show: world size"
grep -qE "^ZeRO stage +0$" "$tmp/out" || fail "show: ZeRO stage"
grep -qE "^epoch +$(field epoch)$" "$tmp/out" || fail "show: epoch"
grep -qF "$(grep -o '"data_cursor":[^,]*' "$d/trainer_state.json" | sed -E 's/.*:[[:space:]]*"(.*)"/\1/')" "$tmp/out" ||
    fail "show: data cursor"
grep -qE "^code version +$(field code_version) " "$tmp/out" || fail "show: code version"
grep -qE "^metrics +loss " "$tmp/out" || fail "show: metrics"
for f in model.safetensors optim-00000-of-00001.safetensors; do
    h=$(sed -nE "s/.*\"$f\":\{\"bytes\":[0-9]+,\"xxh3\":\"([0-9a-f]{16})\".*/\1/p" <<< "$st")
    [ -n "$h" ] || fail "no xxh3 of $f in trainer_state.json"
    grep -qE "^  $f +$(stat -c %s "$d/$f") bytes  xxh3 $h$" "$tmp/out" ||
        fail "show: $f's size or checksum"
done
expect 0 - "$dtrain" ckpt show --json "$d"
cmp -s <(head -c "$(stat -c %s "$d/trainer_state.json")" "$tmp/out") "$d/trainer_state.json" ||
    fail "show --json is not trainer_state.json"
echo '{"step": ' > "$tmp/bad.json"
mkdir "$tmp/runs/step-000000009" && cp "$tmp/bad.json" "$tmp/runs/step-000000009/trainer_state.json"
expect 1 0 "$dtrain" ckpt show "$tmp/runs/step-000000009"
grep -q "trainer_state.json: not valid JSON" "$tmp/err" || fail "show of bad JSON"
expect 0 1 "$dtrain" ckpt show --json "$tmp/runs/step-000000009"
echo "ok ($case)"
