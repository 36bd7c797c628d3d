#!/usr/bin/env bash
# Retention over 22 saves: a tiny Llama (1 rank) saves every step with ckpt.keep_last=3,
# keep_best=2 (best_metric loss, min). Retention runs after each commit on what is left, so the
# expected final set is computed by replaying that rule commit by commit (the newest 3 committed
# plus the 2 of lowest loss among those still present; ties to the older) over the exact losses
# of a reference run that keeps every checkpoint (same config and seed: the same losses, bit
# for bit). After the run exactly those step directories exist, all committed and verified, and
# the experiment store marks every other committed one as removed.
#   CASE plain        every save commits
#   CASE failed-save  step-000000010 exists as a FILE before the run, so that save's put fails
#                     (step 10 has the lowest loss of the first 12 steps here, so counting a
#                     failed save as a "best" would show): the failure is logged, training goes
#                     on to the end (exit 0), step 10 is never committed and the file is left as
#                     it was; the replay skips step 10.
#   retention.sh DTRAIN REPO DATA_DIR CASE
set -euo pipefail
dtrain=$1 repo=$2 data=$3 case=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL ($case): $*"
    exit 1
}
steps=22 failed=10
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=64 data.batch=4 train.threads=1 schedule.warmup_steps=2 train.steps="$steps"
      train.log_every=1 ckpt.every_steps=1 ckpt.resume=never output.dir="$tmp/runs"
      output.export=false)
exp="$tmp/runs/llama-tiny-fortunes"

# The reference: every checkpoint kept, for the exact loss of each step.
"$dtrain" train "${args[@]}" ckpt.keep_last=0 output.run_name=ref > "$tmp/ref.log" 2>&1 ||
    { cat "$tmp/ref.log"; fail "the reference run failed"; }
: > "$tmp/losses"
for s in $(seq "$steps"); do
    f="$exp/ref/checkpoints/step-$(printf %09d "$s")/trainer_state.json"
    [ -f "$f" ] || fail "reference step $s not committed"
    loss=$(tr -d '\n\t ' < "$f" | sed -nE 's/.*"metrics":\{"loss":([-+0-9.eE]+).*/\1/p')
    [ -n "$loss" ] || fail "no metrics.loss in $f"
    [ "$case" = failed-save ] && [ "$s" = "$failed" ] && continue
    echo "$s $loss" >> "$tmp/losses"
done

# Replays retention after each commit: keep the newest 3 and the best 2 (lowest loss, strict
# comparison from the oldest: ties go to the older one, as src/ckpt/checkpoint.c).
expected=$(awk -v keep_last=3 -v keep_best=2 '
    { step[NR] = $1; loss[NR] = $2 + 0; alive[NR] = 1
      n = 0; for (i = NR; i >= 1; i--) if (alive[i]) { keep[i] = (n < keep_last); n++ }
      for (k = 0; k < keep_best; k++) {
          b = 0
          for (i = 1; i <= NR; i++)
              if (alive[i] && keep[i] != 2 && (b == 0 || loss[i] < loss[b])) b = i
          if (b) keep[b] = 2
      }
      for (i = 1; i <= NR; i++) if (alive[i] && !keep[i]) alive[i] = 0 }
    END { for (i = 1; i <= NR; i++) if (alive[i]) printf "%d ", step[i] }' "$tmp/losses")
echo "expected after retention: $expected"

root="$exp/run/checkpoints"
if [ "$case" = failed-save ]; then
    mkdir -p "$root"
    echo "not a directory" > "$root/step-$(printf %09d $failed)"
fi
rc=0
"$dtrain" train "${args[@]}" ckpt.keep_last=3 ckpt.keep_best=2 ckpt.best_metric=loss \
    ckpt.best_mode=min output.run_name=run > "$tmp/run.log" 2>&1 || rc=$?
grep -E "^checkpoint step [0-9]+ (committed|not committed)|FAILED|^rank" "$tmp/run.log" |
    sed -E 's/ to \/.*//' || true
[ "$rc" = 0 ] || { tail -20 "$tmp/run.log"; fail "the run exited $rc"; }
[ "$(grep -c "^step .*/$steps " "$tmp/run.log")" = "$steps" ] || fail "not every step trained"
# the losses must be the reference's (the replay relies on it)
for d in "$root"/step-*/; do
    s=$((10#$(basename "$d" | sed 's/step-//')))
    loss=$(tr -d '\n\t ' < "$d/trainer_state.json" | sed -nE 's/.*"metrics":\{"loss":([-+0-9.eE]+).*/\1/p')
    grep -qx "$s $loss" "$tmp/losses" || fail "step $s: loss $loss differs from the reference run"
done
if [ "$case" = failed-save ]; then
    grep -q "checkpoint step $failed FAILED (not committed)" "$tmp/run.log" ||
        fail "the failed save of step $failed was not reported"
    grep -q "^checkpoint step $failed not committed" "$tmp/run.log" ||
        fail "the log does not say step $failed was not committed"
    f="$root/step-$(printf %09d $failed)"
    if [ ! -f "$f" ] || [ "$(cat "$f")" != "not a directory" ]; then
        fail "the file in the way of step $failed was changed"
    fi
    grep -q "^checkpoint step $((failed + 1)) committed" "$tmp/run.log" ||
        fail "the save after the failed one was not committed"
fi
got=$(cd "$root" && for d in step-*/; do printf "%d " "$((10#${d:5:9}))"; done)
echo "present after the run:    $got"
[ "$got" = "$expected" ] || fail "checkpoints present ($got) are not the expected set ($expected)"
"$dtrain" ckpt ls --verify "$root" > "$tmp/ls.txt" 2>&1 || { cat "$tmp/ls.txt"; fail "ckpt ls --verify"; }
cat "$tmp/ls.txt"
grep -q incomplete "$tmp/ls.txt" && fail "an incomplete checkpoint directory is left"
[ "$(grep -c " verified$" "$tmp/ls.txt")" = "$(wc -w <<< "$expected")" ] ||
    fail "not every kept checkpoint verifies"
# The experiment store lists every committed checkpoint once, and marks exactly those retention
# removed (`dtrain runs show`, the dashboard and the API read the same rows).
"$dtrain" runs show llama-tiny-fortunes/run --output-dir "$tmp/runs" > "$tmp/show.txt" 2>&1 ||
    { cat "$tmp/show.txt"; fail "runs show"; }
for s in $(seq "$steps"); do
    [ "$case" = failed-save ] && [ "$s" = "$failed" ] && continue
    line=$(grep -E "^  checkpoint +step $s +" "$tmp/show.txt" || true)
    [ "$(grep -c . <<< "$line")" = 1 ] || fail "runs show lists checkpoint step $s $(grep -c . <<< "$line") times"
    if [[ " $expected" == *" $s "* ]]; then
        [[ "$line" != *"(removed "* ]] || fail "step $s exists but is shown as removed: $line"
    else
        [[ "$line" == *"(removed "* ]] || fail "step $s was removed but is not shown so: $line"
    fi
done
echo "ok: runs show marks the $(grep -c '(removed ' "$tmp/show.txt") removed checkpoints"
echo "ok ($case)"
