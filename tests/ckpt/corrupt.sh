#!/usr/bin/env bash
# A damaged newest checkpoint is found and skipped. A tiny Llama (1 rank) saves steps 2, 4, 6, 8;
# step 8 is then damaged one way (KIND):
#   flipped-byte     one bit of model.safetensors flipped
#   truncated-optim  the optimizer file cut short by 4 KiB
#   missing-file     the optimizer file deleted
#   missing-state    trainer_state.json deleted (the save looks unfinished)
#   bad-json         trainer_state.json cut to its first 200 bytes (not JSON)
# Then:
#   - `dtrain ckpt verify` of step 8 exits 1 with one line that names the damaged file, and
#     `dtrain ckpt ls --verify` reports step 8 bad (or incomplete) and steps 2-6 verified;
#   - `dtrain train ... ckpt.resume=auto` (same run, 12 steps) warns naming the file, resumes from
#     step 6, and saves step 8 again bit for bit as the undamaged original (the schedule's length
#     is fixed by schedule.total_steps, so both runs follow the same schedule);
#   - checkpoints 2, 4 and 6 are untouched (byte for byte) and 2-12 all verify at the end.
#   corrupt.sh DTRAIN REPO DATA_DIR KIND
set -euo pipefail
dtrain=$1 repo=$2 data=$3 kind=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL ($kind): $*"
    exit 1
}
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=64 data.batch=4 train.threads=1 schedule.warmup_steps=2 schedule.total_steps=12
      train.log_every=1 ckpt.every_steps=2 ckpt.keep_last=0 output.dir="$tmp/runs"
      output.export=false output.run_name="run-$kind")
root="$tmp/runs/llama-tiny-fortunes/run-$kind/checkpoints"
ck() { echo "$root/step-$(printf %09d "$1")"; }

"$dtrain" train "${args[@]}" train.steps=8 ckpt.resume=never > "$tmp/first.log" 2>&1 ||
    { cat "$tmp/first.log"; fail "the first run failed"; }
for s in 2 4 6 8; do
    [ -f "$(ck $s)/trainer_state.json" ] || fail "step $s was not committed by the first run"
done
"$dtrain" ckpt verify "$(ck 8)" > /dev/null || fail "the undamaged step 8 does not verify"
cp -r "$(ck 8)" "$tmp/orig8"
(cd "$root" && sha256sum step-00000000[246]/*) > "$tmp/good.sha"

# ---- the damage ----
optim="optim-00000-of-00001.safetensors"
case $kind in
flipped-byte)
    file=model.safetensors
    f="$(ck 8)/$file"
    off=$(($(stat -c %s "$f") / 2))
    b=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
    # shellcheck disable=SC2059 # the format is the octal escape of the new byte
    printf "$(printf '\\%03o' $((b ^ 1)))" | dd of="$f" bs=1 seek="$off" conv=notrunc status=none
    cmp -s "$f" "$tmp/orig8/$file" && fail "the byte was not flipped"
    ;;
truncated-optim)
    file=$optim
    truncate -s -4096 "$(ck 8)/$file"
    ;;
missing-file)
    file=$optim
    rm "$(ck 8)/$file"
    ;;
missing-state)
    file=trainer_state.json
    rm "$(ck 8)/$file"
    ;;
bad-json)
    file=trainer_state.json
    head -c 200 "$tmp/orig8/$file" > "$(ck 8)/$file"
    ;;
*) fail "unknown damage kind" ;;
esac
echo "damaged step 8: $kind ($file)"

# ---- dtrain ckpt sees it ----
rc=0
out=$("$dtrain" ckpt verify "$(ck 8)" 2>&1) || rc=$?
echo "ckpt verify: rc $rc: $out"
[ "$rc" = 1 ] || fail "ckpt verify exited $rc, expected 1"
[ "$(printf '%s\n' "$out" | wc -l)" = 1 ] || fail "ckpt verify printed more than one line"
grep -qF "$file" <<< "$out" || fail "ckpt verify's line does not name $file"
rc=0
"$dtrain" ckpt ls --verify "$root" > "$tmp/ls.txt" 2>&1 || rc=$?
cat "$tmp/ls.txt"
for s in 2 4 6; do
    grep -qE "^step-00000000$s +committed .* verified$" "$tmp/ls.txt" ||
        fail "ckpt ls --verify does not show step $s committed and verified"
done
if [ "$kind" = missing-state ]; then
    [ "$rc" = 0 ] || fail "ckpt ls --verify exited $rc with only an incomplete save (expected 0)"
    grep -qE "^step-000000008 +incomplete " "$tmp/ls.txt" || fail "step 8 not shown incomplete"
else
    [ "$rc" = 1 ] || fail "ckpt ls --verify exited $rc with a bad checkpoint (expected 1)"
    grep -E "^step-000000008 +committed .*BAD: " "$tmp/ls.txt" | grep -qF "$file" ||
        fail "ckpt ls --verify does not show step 8 BAD naming $file"
fi

# ---- resume skips it ----
"$dtrain" train "${args[@]}" train.steps=12 ckpt.resume=auto > "$tmp/resume.log" 2>&1 ||
    { cat "$tmp/resume.log"; fail "the resumed run failed"; }
grep -E "^(warning|resumed|checkpoint)" "$tmp/resume.log"
grep -E "^warning: .*step-000000008" "$tmp/resume.log" | grep -qF "$file" ||
    fail "no warning naming step-000000008's $file"
grep -qE "^resumed from .*/step-000000006: step 6$" "$tmp/resume.log" ||
    fail "did not resume from step 6"
(cd "$root" && sha256sum --quiet -c "$tmp/good.sha") || fail "good checkpoints 2-6 changed"
for f in model.safetensors $optim; do
    cmp -s "$(ck 8)/$f" "$tmp/orig8/$f" || fail "step 8's $f saved again differs from the original"
done
"$dtrain" ckpt ls --verify "$root" > "$tmp/ls2.txt" 2>&1 || { cat "$tmp/ls2.txt"; fail "ls --verify after the resume"; }
cat "$tmp/ls2.txt"
[ "$(grep -cE '^step-0+[0-9]+ +committed .* verified$' "$tmp/ls2.txt")" = 6 ] ||
    fail "expected steps 2-12 committed and verified"
[ "$(wc -l < "$tmp/ls2.txt")" = 6 ] || fail "unexpected checkpoint directories"
echo "ok ($kind)"
