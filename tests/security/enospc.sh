#!/usr/bin/env bash
# A full disk (ENOSPC) during a data import, a model export and the experiment store's writes
# (docs/security.md, "Disk full"), on a small tmpfs filled up to a chosen free space:
#   - every failure says "No space left on device" and names the file system
#     ("tmpfs at MOUNT: N of M free");
#   - nothing half-written is left under a final name: an import either makes a dataset that
#     `dtrain data verify` accepts or leaves no output folder (nor a temporary one); an export
#     either writes a model folder that `dtrain generate --model` loads or none; an earlier
#     dataset on the same file system is unchanged;
#   - the experiment store, filled up while a run is writing to it, keeps its earlier runs and
#     rows, stays a valid SQLite file, and the run trains on to the end (tracking is off after
#     one warning).
# Needs root (mount -t tmpfs): otherwise SKIP (77).
#   enospc.sh DTRAIN REPO
set -uo pipefail
dtrain=$1 repo=$2
export OMP_NUM_THREADS=1
tmp=$(mktemp -d)
mnt=$tmp/mnt
mkdir "$mnt"
cleanup() {
    [ -n "${bg:-}" ] && kill "$bg" 2>/dev/null && wait "$bg" 2>/dev/null
    mountpoint -q "$mnt" && umount "$mnt"
    rm -rf "$tmp"
}
trap cleanup EXIT
if ! mount -t tmpfs -o size=8m,mode=0755 tmpfs "$mnt" 2>/dev/null; then
    echo "SKIP: cannot mount a tmpfs (needs root)"
    exit 77
fi
real_mnt=$(realpath "$mnt")
fail=0
bad() { echo "FAIL: $*"; fail=1; }
ok() { echo "ok: $*"; }

# free_kib: what is left on the mount; fill_to KIB: a filler file leaves about KIB free
free_kib() { df -k --output=avail "$mnt" | tail -1 | tr -d ' '; }
fill_to() {
    rm -f "$mnt/filler"
    local n=$(($(free_kib) - $1))
    if [ "$n" -gt 0 ]; then
        dd if=/dev/zero of="$mnt/filler" bs=1k count="$n" status=none 2>/dev/null || true
    fi
}
# names_full LOG WHAT: LOG says the file system is full and which it is
names_full() {
    if grep -q "No space left on device" "$1" && grep -q "tmpfs at $real_mnt: " "$1"; then
        return 0
    fi
    bad "$2: the message does not say 'No space left on device (tmpfs at $real_mnt: ...)':"
    cat "$1"
    return 1
}
# Under the sanitizers, a report must not pass for an expected failure (exit status 1)
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:exitcode=99"
# no_temp DIR WHAT: no temporary file or folder is left under DIR (and the logs so far hold
# no sanitizer report)
no_temp() {
    if grep -q "runtime error:\|ERROR: [A-Za-z]*Sanitizer" "$tmp"/*.log; then
        bad "$2: a sanitizer report:"
        grep -h -A5 "runtime error:\|ERROR: [A-Za-z]*Sanitizer" "$tmp"/*.log | head -n 30
    fi
    local left
    left=$(find "$1" -name '*.tmp*' -o -name '*.old-*' 2>/dev/null)
    [ -z "$left" ] || bad "$2: left behind: $left"
}

mkdir "$tmp/src" "$tmp/src2"
head -c 20000 /usr/share/games/fortunes/fortunes >"$tmp/src/a.txt"
head -c 60000 /usr/share/games/fortunes/fortunes >"$tmp/src2/b.txt"
tok=$repo/examples/llama-tiny/tokenizer.json
imp() { "$dtrain" data import text "$1" -o "$2" --doc-sep % --val 0.1 --tokenizer "$tok" -q; }

# ---------------------------------------------------------------- 1. data import
# a good dataset on the mount first: it must come through every failed import beside it
imp "$tmp/src" "$mnt/data/good" >/dev/null || bad "import of the first dataset"
sums() { (cd "$mnt/data/good" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
sums >"$tmp/good.sum"
failed=0 succeeded=0
for keep in 0 4 8 16 24 32 48 64 80 96 112 128 160 192 256 384; do
    fill_to "$keep"
    out=$mnt/data/big-$keep
    if imp "$tmp/src2" "$out" >"$tmp/imp.log" 2>&1; then
        succeeded=$((succeeded + 1))
        "$dtrain" data verify "$out/train" "$out/val" >/dev/null 2>&1 ||
            bad "import with $keep KiB free succeeded but data verify refuses it"
        rm -rf "$out"
    else
        failed=$((failed + 1))
        names_full "$tmp/imp.log" "import with $keep KiB free" || true
        cp "$tmp/imp.log" "$tmp/imp-fail.log"
        [ -e "$out" ] && bad "import with $keep KiB free failed but left $out"
        "$dtrain" data verify "$out/train" >/dev/null 2>&1 &&
            bad "data verify accepts the failed import's $out/train"
    fi
    no_temp "$mnt/data" "import with $keep KiB free"
done
rm -f "$mnt/filler"
[ "$failed" -gt 0 ] || bad "no import failed: the mount is not small enough to test anything"
[ "$succeeded" -gt 0 ] || bad "no import succeeded, even with 384 KiB free"
ok "imports: $failed failed on a full disk (message names tmpfs and free space), $succeeded fitted"
if sums | cmp -s - "$tmp/good.sum" && "$dtrain" data verify "$mnt/data/good/train" \
    "$mnt/data/good/val" >/dev/null 2>&1; then
    ok "the earlier dataset on the full file system is unchanged and verifies"
else
    bad "the earlier dataset changed or no longer verifies"
fi
sed 's/^/  the last failed import said: /' "$tmp/imp-fail.log"

# ---------------------------------------------------------------- 2. model export
# The run folder is on the mount, the checkpoints and the store are not: the export is what
# runs out of space. The free space is set from a run that fits (off the mount): nothing,
# part of the weights, the weights but not the tokenizer, and so on.
train_args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$mnt/data/good/train" data.val=
            data.seq_len=32 data.batch=2 train.steps=4 train.threads=1 train.log_every=2
            ckpt.every_steps=2 schedule.warmup_steps=1)
"$dtrain" train "${train_args[@]}" output.dir="$tmp/ref" output.run_name=ref \
    ckpt.dir="$tmp/ref-ckpt" tracking.uri="$tmp/ref.db" >"$tmp/ref.log" 2>&1 ||
    { bad "the reference run failed"; cat "$tmp/ref.log"; }
refmodel=$tmp/ref/llama-tiny-fortunes/ref/model
kib() { echo $((($(stat -c %s "$1") + 4095) / 4096 * 4)); } # tmpfs pages, in KiB
w=$(kib "$refmodel/model.safetensors") c=$(kib "$refmodel/config.json")
t=$(kib "$refmodel/tokenizer.json")
# besides the export, the run folder holds config.yaml and run.json (and its rewrite): 16 KiB
base=16
# export_run KEEP ARG...: a run with its folder on the mount, about KEEP KiB free; sets run, rc
export_run() {
    local keep=$1
    shift
    i=$((i + 1))
    fill_to "$keep"
    run=$mnt/runs/llama-tiny-fortunes/e$i
    "$dtrain" train "$@" output.dir="$mnt/runs" output.run_name="e$i" ckpt.dir="$tmp/ckpt" \
        tracking.uri="$tmp/track.db" >"$tmp/exp.log" 2>&1
    rc=$?
}
exp_failed=0 exp_ok=0 i=0
for keep in $((base + w / 2)) $((base + w - 4)) $((base + w + c)) $((base + w + c + t / 2)) \
    $((base + w + c + t + 64)); do
    export_run "$keep" "${train_args[@]}"
    if [ "$rc" -gt 1 ]; then bad "export with $keep KiB free: exit $rc (crashed?)"; cat "$tmp/exp.log"; fi
    if [ "$rc" -eq 0 ]; then
        exp_ok=$((exp_ok + 1))
    else
        exp_failed=$((exp_failed + 1))
        names_full "$tmp/exp.log" "export with $keep KiB free" || true
        # the trained weights: the last checkpoint, off the full file system
        ck=$tmp/ckpt/llama-tiny-fortunes/e$i/checkpoints/step-000000004
        [ -s "$ck/model.safetensors" ] && [ -s "$ck/trainer_state.json" ] ||
            bad "export with $keep KiB free: no step-4 checkpoint at $ck"
        tail -n 1 "$tmp/exp.log" | grep -q "the trained weights are in the checkpoint of step 4 under" ||
            bad "export with $keep KiB free: the last line does not say where the weights are"
        echo "  export with $keep KiB free, exit $rc; last line: $(tail -n 1 "$tmp/exp.log")"
        echo "  run.json then says: $(tr -d '\n\t' <"$run/run.json" | grep -o '"status":[^,]*')"
    fi
    # a model folder under its final name is whole: it loads, and a tokenizer there is intact
    if [ -e "$run/model" ]; then
        if ! "$dtrain" generate --model "$run/model" --ids 1,2,3 --max-new 2 >/dev/null \
            2>"$tmp/gen.log"; then
            bad "export with $keep KiB free left $run/model, which generate refuses:"
            cat "$tmp/gen.log"
        fi
        [ ! -e "$run/model/tokenizer.json" ] || cmp -s "$run/model/tokenizer.json" "$tok" ||
            bad "export with $keep KiB free: $run/model/tokenizer.json is not the whole tokenizer"
        [ "$rc" -eq 0 ] || [ -e "$run/model/tokenizer.json" ] ||
            echo "  note: with $keep KiB free the weights are in $run/model but the tokenizer" \
                "copy did not fit (the run is failed)"
    elif [ "$rc" -eq 0 ]; then
        bad "export with $keep KiB free: exit 0 but no $run/model"
    fi
    no_temp "$mnt/runs" "export with $keep KiB free"
    [ -d "$run" ] && rm -rf "$run"
done
rm -f "$mnt/filler"
[ "$exp_failed" -gt 0 ] || bad "no export failed"
[ "$exp_ok" -gt 0 ] || bad "no export succeeded, even with room to spare"
ok "exports: $exp_failed failed on a full disk (message names tmpfs; the checkpoint is kept), $exp_ok fitted"

# A LoRA adapter (on the randomly initialised tiny Llama): the same, against a reference run
# off the mount (one thread, one seed: the same bytes); an adapter folder is whole or absent.
lora_args=("${train_args[@]}" lora.enabled=true lora.rank=8 lora.targets=q_proj,v_proj)
"$dtrain" train "${lora_args[@]}" output.dir="$tmp/ref" output.run_name=lref \
    ckpt.dir="$tmp/ref-ckpt" tracking.uri="$tmp/ref.db" >"$tmp/ref.log" 2>&1 ||
    { bad "the reference LoRA run failed"; cat "$tmp/ref.log"; }
refad=$tmp/ref/llama-tiny-fortunes/lref/adapter
w=$(kib "$refad/adapter_model.safetensors") c=$(kib "$refad/adapter_config.json")
lora_failed=0 lora_ok=0
for keep in $((base + w / 2)) $((base + c + w / 2)) $((base + c + w)) $((base + c + w + 64)); do
    export_run "$keep" "${lora_args[@]}"
    if [ "$rc" -eq 0 ]; then
        lora_ok=$((lora_ok + 1))
    elif [ "$rc" -eq 1 ]; then
        lora_failed=$((lora_failed + 1))
        names_full "$tmp/exp.log" "adapter export with $keep KiB free" || true
        echo "  adapter export with $keep KiB free, exit 1: $(tail -n 1 "$tmp/exp.log")"
    else
        bad "adapter export with $keep KiB free: exit $rc (crashed?)"
        cat "$tmp/exp.log"
    fi
    if [ -n "$(ls -A "$run/adapter" 2>/dev/null)" ]; then
        for f in adapter_model.safetensors adapter_config.json; do
            cmp -s "$run/adapter/$f" "$refad/$f" ||
                bad "adapter export with $keep KiB free (exit $rc): $run/adapter/$f is not whole"
        done
    elif [ "$rc" -eq 0 ]; then
        bad "adapter export with $keep KiB free: exit 0 but no adapter"
    fi
    no_temp "$mnt/runs" "adapter export with $keep KiB free"
    rm -rf "$run"
done
rm -f "$mnt/filler"
[ "$lora_failed" -gt 0 ] && [ "$lora_ok" -gt 0 ] ||
    bad "adapter exports: $lora_failed failed, $lora_ok fitted (both expected)"
ok "adapter exports: $lora_failed failed on a full disk, $lora_ok fitted; never a partial adapter"

# Not the export: a run folder that cannot even be begun (config.yaml, run.json) fails at once.
fill_to 0
"$dtrain" train "${train_args[@]}" output.dir="$mnt/runs" output.run_name=e0 \
    ckpt.dir="$tmp/ckpt" tracking.uri="$tmp/track.db" >"$tmp/exp.log" 2>&1
rc=$?
[ "$rc" -eq 1 ] || bad "a run folder on a full disk: exit $rc, expected 1"
echo "  a run folder on a full disk: exit $rc; last line: $(tail -n 1 "$tmp/exp.log")"
rm -rf "$mnt/runs" "$mnt/filler"

# ---------------------------------------------------------------- 3. experiment store
# tracking.uri on the mount, with an earlier run in it; the mount fills up while the next run
# is writing metrics. The run must go on to the end (tracking warns once and is off).
rm -rf "$mnt/runs" "$mnt/filler"
db=$mnt/track/dtrain.db
"$dtrain" train "${train_args[@]}" output.dir="$tmp/runs" output.run_name=t0 \
    ckpt.dir="$tmp/ckpt" tracking.uri="$db" >"$tmp/t0.log" 2>&1 ||
    { bad "the first tracked run failed"; cat "$tmp/t0.log"; }
count() { python3 -c "import sqlite3,sys; c=sqlite3.connect('file:'+sys.argv[1]+'?mode=ro', uri=True)
print(c.execute(sys.argv[2]).fetchone()[0])" "$db" "$1"; }
m0=$(count "SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = 't0'")
[ "${m0:-0}" -gt 0 ] || bad "the first tracked run has no metrics in the store"
# the second run: long enough to be filled up under (log every step, flushed every 2 s)
"$dtrain" train "${train_args[@]}" train.steps=400 train.log_every=1 ckpt.every_steps=0 \
    output.dir="$tmp/runs" output.run_name=t1 ckpt.dir="$tmp/ckpt" tracking.uri="$db" \
    >"$tmp/t1.log" 2>&1 &
bg=$!
for _ in $(seq 300); do # until the store has the run's first metrics (30 s at most)
    n=$(count "SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = 't1'" \
        2>/dev/null || echo 0)
    [ "${n:-0}" -gt 0 ] && break
    kill -0 "$bg" 2>/dev/null || break
    sleep 0.1
done
kill -0 "$bg" 2>/dev/null || echo "  note: the run ended before the disk was filled"
fill_to 0
wait "$bg"
rc=$?
bg=
rm -f "$mnt/filler"
if [ "$rc" -ne 0 ]; then
    bad "the run under a full store exited $rc (training must go on)"
    tail -n 5 "$tmp/t1.log"
else
    ok "the run under a full store trained to the end (exit 0)"
fi
grep -q "model written to" "$tmp/t1.log" || bad "the run under a full store exported no model"
if grep -q "warning: tracking:" "$tmp/t1.log"; then
    grep "warning: tracking:" "$tmp/t1.log" | sed 's/^/  /'
    names_full "$tmp/t1.log" "the full store's warning" && ok "the store's warning names tmpfs"
else
    bad "no tracking warning although the store's file system was full"
fi
if [ "$(sqlite3 "$db" 'PRAGMA integrity_check' 2>&1)" = ok ]; then
    ok "the store is a valid SQLite file"
else
    bad "the store fails integrity_check"
fi
m0b=$(count "SELECT count(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = 't0'")
[ "$m0b" = "$m0" ] && ok "the earlier run keeps its $m0 metric rows" ||
    bad "the earlier run had $m0 metric rows, now $m0b"
"$dtrain" runs show t0 --db "$db" >"$tmp/show.log" 2>&1 && grep -q "status      done" "$tmp/show.log" ||
    { bad "runs show t0 does not show the earlier run as done"; cat "$tmp/show.log"; }
name=t1
"$dtrain" runs show t1 --db "$db" >"$tmp/show1.log" 2>&1
echo "  runs show t1 after the full disk: $(grep -m1 '^  status' "$tmp/show1.log")"
no_temp "$mnt/track" "the store"

# full before the run begins: an existing store and a new one; the run trains and exports
fill_to 0
for uri in "$db" "$mnt/track2/new.db"; do
    name=t$((${name#t} + 1))
    "$dtrain" train "${train_args[@]}" output.dir="$tmp/runs" output.run_name="$name" \
        ckpt.dir="$tmp/ckpt" tracking.uri="$uri" >"$tmp/t.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ] && grep -q "model written to" "$tmp/t.log" &&
        names_full "$tmp/t.log" "a store full from the start ($uri)"; then
        ok "a store full from the start ($(basename "$uri")): one warning naming tmpfs, the run trains and exports"
    else
        bad "a store full from the start ($uri): exit $rc"
        cat "$tmp/t.log"
    fi
done
rm -f "$mnt/filler"
"$dtrain" runs ls --db "$db" >"$tmp/ls.log" 2>&1
grep -q " t0 .* done " "$tmp/ls.log" || { bad "runs ls no longer lists t0 as done"; cat "$tmp/ls.log"; }
no_temp "$mnt" "the end"

exit $fail
