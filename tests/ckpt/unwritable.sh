#!/usr/bin/env bash
# A checkpoint location that cannot take a checkpoint never costs the trained model:
#   file      ckpt.dir is a regular file: refused before training (exit 1, no step line), the
#             message names the location, the error and ckpt.require_writable
#   readonly  ckpt.dir is a read-only tmpfs: refused the same way (SKIP 77 when this machine
#             cannot mount one, e.g. without root)
#   train     ckpt.dir is a file, ckpt.require_writable=false, output.export=false: the run
#             warns at start, trains to the end, says at the first failed save (within the next
#             interval, before the next save) that nothing of the run is committed yet, prints a summary of the failed saves, exports the
#             weights anyway, and its last line names the folder they went to (exit 1); the
#             exported model loads (`dtrain generate` writes tokens from it)
#   enospc    ckpt.dir is a 14 MiB tmpfs, room for one checkpoint of about 9.6 MB (SKIP 77
#             without mount): step 2 commits, the saves of steps 4 and 6 fail with "No space
#             left on device" and leave nothing behind (no step folder, no temporary file), the
#             run trains to the end and exports its weights to output.dir, and step 2 still
#             verifies
#   mpi       as `file` with 2 MPI ranks: both refuse, nobody hangs (the ranks agree on the
#             probe)
#   unwritable.sh DTRAIN REPO DATA_DIR CASE [MPIRUN...]
set -euo pipefail
dtrain=$1 repo=$2 data=$3 case=$4
shift 4
tmp=$(mktemp -d)
mnt=
cleanup() {
    [ -n "$mnt" ] && umount "$mnt" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "FAIL ($case): $*"
    exit 1
}
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len=32 data.batch=4 train.threads=1 schedule.warmup_steps=0 train.steps=6
      train.log_every=1 ckpt.every_steps=3 output.dir="$tmp/runs" output.run_name=r)
touch "$tmp/a-file"

refused() { # LOG: exit 1 before any step, with the location, the error and the key named
    local log=$1 rc=$2 where=$3
    [ "$rc" = 1 ] || { cat "$log"; fail "exit $rc, expected 1"; }
    grep -q '^step ' "$log" && { cat "$log"; fail "trained although the location is unusable"; }
    grep -q "checkpoints cannot be written to $where" "$log" || { cat "$log"; fail "no location"; }
    grep -q 'ckpt.require_writable=false' "$log" || { cat "$log"; fail "the key is not named"; }
    echo "ok: refused: $(grep 'cannot be written' "$log" | head -1)"
}

case $case in
file)
    rc=0
    "$dtrain" train "${args[@]}" ckpt.dir="$tmp/a-file" > "$tmp/log" 2>&1 || rc=$?
    refused "$tmp/log" "$rc" "$tmp/a-file"
    grep -q 'Not a directory' "$tmp/log" || fail "the error (Not a directory) is not said"
    ;;
readonly)
    mnt="$tmp/ro"
    mkdir -p "$mnt"
    if ! mount -t tmpfs -o ro,size=1m tmpfs "$mnt" 2> /dev/null; then
        mnt=
        echo "SKIP: cannot mount a read-only tmpfs here"
        exit 77
    fi
    rc=0
    "$dtrain" train "${args[@]}" ckpt.dir="$mnt" > "$tmp/log" 2>&1 || rc=$?
    refused "$tmp/log" "$rc" "$mnt"
    grep -q 'Read-only file system' "$tmp/log" || { cat "$tmp/log"; fail "EROFS is not said"; }
    ;;
train)
    rc=0
    "$dtrain" train "${args[@]}" ckpt.dir="$tmp/a-file" ckpt.require_writable=false \
        output.export=false > "$tmp/log" 2>&1 || rc=$?
    cat "$tmp/log"
    [ "$rc" = 1 ] || fail "exit $rc, expected 1 (the final checkpoint failed)"
    grep -q '^warning: rank 0: checkpoints cannot be written to .*training anyway' "$tmp/log" ||
        fail "no warning at start"
    grep -q '^step      6/6' "$tmp/log" || fail "did not train to the end"
    first=$(grep -n 'checkpoint step 3 FAILED' "$tmp/log" | head -1 | cut -d: -f1)
    # found by the per-step exchange after the background write: within the next interval,
    # long before the run's end
    step6=$(grep -n '^step      6/6' "$tmp/log" | cut -d: -f1)
    [ -n "$first" ] && [ "$first" -lt "$step6" ] || fail "the first failed save is not reported within the next interval"
    grep 'checkpoint step 3 FAILED' "$tmp/log" | grep -q 'no checkpoint of this run is committed yet (1 of 1 saves failed)' ||
        fail "the first failure does not say that nothing is committed"
    grep -q '^checkpoints: 2 of 2 saves of this run FAILED (the newest committed: none)' "$tmp/log" ||
        fail "no summary of the failed saves"
    model="$tmp/runs/llama-tiny-fortunes/r/model"
    last=$(tail -n 1 "$tmp/log")
    case $last in
    *"the trained weights (step 6) were exported to $model instead"*) ;;
    *) fail "the last line does not say where the weights went: $last" ;;
    esac
    [ -s "$model/model.safetensors" ] && [ -s "$model/config.json" ] || fail "no model in $model"
    "$dtrain" generate --model "$model" --prompt "The" --max-new 4 > "$tmp/gen" 2>&1 ||
        { cat "$tmp/gen"; fail "the exported model does not load"; }
    echo "ok: trained, the weights exported to $model and loadable"
    ;;
enospc)
    mnt="$tmp/small"
    mkdir -p "$mnt"
    if ! mount -t tmpfs -o size=14m tmpfs "$mnt" 2> /dev/null; then
        mnt=
        echo "SKIP: cannot mount a tmpfs here"
        exit 77
    fi
    rc=0
    "$dtrain" train "${args[@]}" ckpt.dir="$mnt" ckpt.every_steps=2 ckpt.keep_last=1 \
        > "$tmp/log" 2>&1 || rc=$?
    cat "$tmp/log"
    [ "$rc" = 1 ] || fail "exit $rc, expected 1 (the final checkpoint failed)"
    root="$mnt/llama-tiny-fortunes/r/checkpoints"
    grep -q 'checkpoint step 2 committed' "$tmp/log" || fail "step 2 was not committed"
    for s in 4 6; do
        grep "checkpoint step $s FAILED" "$tmp/log" | grep -q 'No space left on device (tmpfs at ' ||
            fail "the save of step $s does not say the disk is full"
        [ ! -e "$root/step-00000000$s" ] || { ls -la "$root/step-00000000$s"; fail "step $s left files behind"; }
    done
    [ -z "$(find "$mnt" -name '*.tmp-*')" ] || fail "temporary files left: $(find "$mnt" -name '*.tmp-*')"
    "$dtrain" ckpt verify "$root/step-000000002" || fail "step 2 does not verify"
    [ -s "$tmp/runs/llama-tiny-fortunes/r/model/model.safetensors" ] || fail "no exported model"
    tail -n 1 "$tmp/log" | grep -q 'were exported to .* instead' || fail "the last line does not say where"
    echo "ok: the full disk kept step 2, left nothing half-written, and the weights were exported"
    ;;
mpi)
    [ $# -gt 0 ] || { echo "SKIP: no mpirun"; exit 77; }
    rc=0
    timeout 120 "$@" -np 2 "$dtrain" train "${args[@]}" ckpt.dir="$tmp/a-file" \
        > "$tmp/log" 2>&1 || rc=$?
    [ "$rc" != 124 ] || { cat "$tmp/log"; fail "the ranks hung"; }
    [ "$rc" != 0 ] || { cat "$tmp/log"; fail "exit 0"; }
    grep -q '^step ' "$tmp/log" && { cat "$tmp/log"; fail "trained"; }
    grep -q 'checkpoints cannot be written to' "$tmp/log" || { cat "$tmp/log"; fail "no message"; }
    echo "ok: 2 ranks refused (exit $rc)"
    ;;
*) fail "unknown case" ;;
esac
