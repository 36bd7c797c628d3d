#!/usr/bin/env bash
# A resume with a longer run (src/train/ckpt.c, schedule.on_extend): a tiny Llama trains 10
# steps of a cosine schedule (lr 3e-3 -> min_lr 1e-4, no warmup) and checkpoints step 10; four
# runs resume that checkpoint with train.steps=14:
#   continue (the default)  steps 11-14 run at min_lr: the saved decay had ended (no jump back)
#   stretch                 steps 11-14 run at the rates of a fresh 14-step run's steps 11-14
#   restart                 steps 11-14 run at the rates of a fresh 4-step run's steps 1-4
#   restart, warmup 4       refused: 4 steps left are not more than the warmup (exit 2)
# Each says in one line what the schedule does. The rates are compared as the step lines print
# them (3 significant digits), which tells every mode apart.
#   on_extend.sh DTRAIN REPO DATA_DIR
set -euo pipefail
dtrain=$1 repo=$2 data=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=32 data.batch=4 train.threads=1 train.log_every=1 schedule.kind=cosine
      schedule.warmup_steps=0 schedule.min_lr=1.0e-4 optim.lr=3.0e-3 output.dir="$tmp/runs"
      output.export=false)
run() { # NAME ARGS...: the run's log in $tmp/NAME.log
    local name=$1
    shift
    "$dtrain" train "${args[@]}" output.run_name="$name" "$@" > "$tmp/$name.log" 2>&1 ||
        { cat "$tmp/$name.log"; fail "run $name failed"; }
}
lrs() { # LOG FROM TO: the lr printed for steps FROM..TO, one per line
    awk -v a="$2" -v b="$3" '$1 == "step" { split($2, s, "/"); if (s[1] >= a && s[1] <= b)
        for (i = 1; i < NF; i++) if ($i == "lr") print $(i + 1) }' "$1"
}

run base train.steps=10 ckpt.every_steps=10
ck="$tmp/runs/llama-tiny-fortunes/base/checkpoints/step-000000010"
[ -f "$ck/trainer_state.json" ] || fail "no checkpoint at step 10"
run fresh14 train.steps=14
run fresh4 train.steps=4

run continue train.steps=14 ckpt.resume="$ck"
grep -q 'schedule.on_extend=continue: continued as saved: it ends at step 10' "$tmp/continue.log" ||
    { cat "$tmp/continue.log"; fail "continue: no line saying what the schedule does"; }
got=$(lrs "$tmp/continue.log" 11 14 | sort -u)
[ "$got" = "0.0001" ] || fail "continue: steps 11-14 ran at '$got', not min_lr 0.0001"
echo "ok: continue: steps 11-14 at min_lr"

run stretch train.steps=14 ckpt.resume="$ck" schedule.on_extend=stretch
grep -q 'schedule.on_extend=stretch: stretched over the 14 steps' "$tmp/stretch.log" ||
    fail "stretch: no line"
[ "$(lrs "$tmp/stretch.log" 11 14)" = "$(lrs "$tmp/fresh14.log" 11 14)" ] ||
    fail "stretch: $(lrs "$tmp/stretch.log" 11 14 | xargs) vs a fresh 14-step run's $(lrs "$tmp/fresh14.log" 11 14 | xargs)"
[ "$(lrs "$tmp/stretch.log" 11 11)" != "0.0001" ] || fail "stretch: the rate did not change"
echo "ok: stretch: $(lrs "$tmp/stretch.log" 11 14 | xargs)"

run restart train.steps=14 ckpt.resume="$ck" schedule.on_extend=restart
grep -q 'schedule.on_extend=restart: restarted at step 10' "$tmp/restart.log" ||
    fail "restart: no line"
[ "$(lrs "$tmp/restart.log" 11 14)" = "$(lrs "$tmp/fresh4.log" 1 4)" ] ||
    fail "restart: $(lrs "$tmp/restart.log" 11 14 | xargs) vs a fresh 4-step run's $(lrs "$tmp/fresh4.log" 1 4 | xargs)"
echo "ok: restart: $(lrs "$tmp/restart.log" 11 14 | xargs)"

rc=0
"$dtrain" train "${args[@]}" output.run_name=short train.steps=14 ckpt.resume="$ck" \
    schedule.on_extend=restart schedule.warmup_steps=4 > "$tmp/short.log" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$tmp/short.log"; fail "restart with too few steps: exit $rc, expected 2 (a config error)"; }
grep -q 'schedule.on_extend=restart: 4 steps remain after step 10, not more than schedule.warmup_steps 4' \
    "$tmp/short.log" || { cat "$tmp/short.log"; fail "restart with too few steps: message"; }
echo "ok: restart with 4 steps left and a warmup of 4 refused"
