#!/usr/bin/env bash
# SIGKILL while a checkpoint is being written. A 2-rank run (ZeRO stage 1, so both ranks write
# a file) of a Llama made wide enough that a checkpoint is ~330 MB (27.5M parameters: weights
# and two AdamW moments; hundreds of ms to write here) saves every 2 steps. As soon as the log
# says the snapshot of step K started (K >= 4, so step K-2 is committed), every rank is killed
# with SIGKILL: no handler, no flush, the writers die mid-put. Then:
#   - step K has no trainer_state.json; if it has one (or the log says it was committed) the kill
#     came after the commit, and the attempt is repeated on the next checkpoint (resume=auto, at most 3 attempts; the test
#     fails if no kill ever landed before a commit);
#   - `dtrain ckpt ls` shows step K-2 committed and step K incomplete or absent, `--verify`
#     verifies K-2 (an incomplete save is no error), and `dtrain ckpt verify` of step K fails;
#   - `dtrain train ... ckpt.resume=auto` resumes from step K-2 and saves K and K+2 again,
#     committed and verified, with nothing incomplete left.
# Ranks write through `stdbuf -oL` so that the snapshot line reaches the log when it is printed.
#   sigkill.sh DTRAIN REPO DATA_DIR MPIRUN...
set -euo pipefail
dtrain=$1 repo=$2 data=$3
shift 3
tmp=$(mktemp -d)
pid=
cleanup() {
    if [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null; then
        pkill -KILL -P "$pid" 2> /dev/null || true
        kill -KILL "$pid" 2> /dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
sed -e 's/"hidden_size": *[0-9]*/"hidden_size": 512/' \
    -e 's/"intermediate_size": *[0-9]*/"intermediate_size": 1536/' \
    -e 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 8/' \
    -e 's/"num_attention_heads": *[0-9]*/"num_attention_heads": 8/' \
    -e 's/"num_key_value_heads": *[0-9]*/"num_key_value_heads": 8/' \
    "$repo/examples/llama-tiny/config.json" > "$tmp/config.json"
args=("$repo/examples/llama-tiny-fortunes.yaml" model.hf_path="$tmp" data.train="$data/fortunes/train"
      data.val= data.seq_len=16 data.batch=1 schedule.warmup_steps=1 schedule.total_steps=40
      train.threads=1 train.log_every=1 dist.zero_stage=1 ckpt.every_steps=2 ckpt.keep_last=2
      output.dir="$tmp/runs" output.export=false output.run_name=kill)
root="$tmp/runs/llama-tiny-fortunes/kill/checkpoints"
ck() { echo "$root/step-$(printf %09d "$1")"; }

killed=0
for attempt in 1 2 3; do
    resume=auto
    [ "$attempt" = 1 ] && resume=never
    log="$tmp/attempt$attempt.log"
    "$@" -np 2 stdbuf -oL "$dtrain" train "${args[@]}" train.steps=40 ckpt.resume=$resume \
        > "$log" 2>&1 &
    pid=$!
    K=
    for _ in $(seq 3000); do # 60 s at most
        K=$(sed -nE 's/^checkpoint step ([0-9]+) \(every_steps\): snapshot.*/\1/p' "$log" |
            awk '$1 >= 4' | head -1)
        [ -n "$K" ] && break
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.02
    done
    pkill -KILL -P "$pid" 2> /dev/null || true # every rank (children of mpirun)
    for _ in $(seq 200); do kill -0 "$pid" 2> /dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    pid=
    grep -E "^(checkpoint|resumed|warning)" "$log" | sed -E 's/ to \/.*//' || true
    [ -n "$K" ] || { tail -20 "$log"; fail "attempt $attempt: no snapshot of a step >= 4 in the log"; }
    # too late if step K's commit was logged, or its trainer_state.json is there, or a later
    # save started (which waits for K's commit)
    if grep -q "^checkpoint step $K committed" "$log" || [ -f "$(ck "$K")/trainer_state.json" ] ||
        sed -nE 's/^checkpoint step ([0-9]+) .*snapshot.*/\1/p' "$log" | awk -v k="$K" '$1 > k' | grep -q .; then
        echo "attempt $attempt: the kill landed after step $K was committed; trying the next save"
        continue
    fi
    killed=1
    echo "attempt $attempt: killed during the save of step $K (in its directory:" \
        "$(find "$(ck "$K")" -type f -printf '%f ' 2> /dev/null))"
    break
done
[ "$killed" = 1 ] || fail "no SIGKILL landed between a snapshot and its commit in 3 attempts"
prev=$((K - 2))

"$dtrain" ckpt ls "$root" > "$tmp/ls.txt" 2>&1 || { cat "$tmp/ls.txt"; fail "ckpt ls failed"; }
cat "$tmp/ls.txt"
grep -qE "^step-$(printf %09d $prev) +committed " "$tmp/ls.txt" || fail "step $prev not committed"
if grep -qE "^step-$(printf %09d "$K") " "$tmp/ls.txt"; then
    grep -qE "^step-$(printf %09d "$K") +incomplete " "$tmp/ls.txt" ||
        fail "step $K is listed but not as incomplete"
fi
awk -v k="$K" '{ s = $1; sub(/^step-0*/, "", s) } s + 0 > k && $2 == "committed" { bad = 1 }
    END { exit bad }' "$tmp/ls.txt" || fail "a step after $K is listed committed"
"$dtrain" ckpt ls --verify "$root" > "$tmp/lsv.txt" 2>&1 || { cat "$tmp/lsv.txt"; fail "ckpt ls --verify exited non-zero"; }
grep -qE "^step-$(printf %09d $prev) +committed .* verified$" "$tmp/lsv.txt" ||
    fail "step $prev does not verify"
if [ -d "$(ck "$K")" ]; then
    rc=0
    out=$("$dtrain" ckpt verify "$(ck "$K")" 2>&1) || rc=$?
    echo "ckpt verify step $K: rc $rc: $out"
    [ "$rc" = 1 ] || fail "ckpt verify of the killed save exited $rc, expected 1"
fi

# Resume: from step K-2, to step K+2.
"$@" -np 2 "$dtrain" train "${args[@]}" train.steps=$((K + 2)) ckpt.resume=auto \
    > "$tmp/resume.log" 2>&1 || { cat "$tmp/resume.log"; fail "the resumed run failed"; }
grep -E "^(checkpoint|resumed|warning)" "$tmp/resume.log" | sed -E 's/ to \/.*//'
grep -qE "^resumed from .*/step-$(printf %09d $prev): step $prev( |$)" "$tmp/resume.log" ||
    fail "did not resume from step $prev"
"$dtrain" ckpt ls --verify "$root" > "$tmp/ls2.txt" 2>&1 || { cat "$tmp/ls2.txt"; fail "ckpt ls --verify after the resume"; }
cat "$tmp/ls2.txt"
for s in "$K" $((K + 2)); do
    grep -qE "^step-$(printf %09d "$s") +committed .* verified$" "$tmp/ls2.txt" ||
        fail "step $s not committed and verified after the resume"
done
grep -q incomplete "$tmp/ls2.txt" && fail "an incomplete checkpoint is left after the resume"
left=$(find "$root" -name '*.tmp-*' | wc -l)
echo "partial files of killed writers left on disk: $left"
echo "ok"
