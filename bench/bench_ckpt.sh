#!/usr/bin/env bash
# Checkpoint benchmark: save and restore throughput of dtrain's checkpoints beside the raw
# sequential write (with fsync) and read bandwidth of the same disk, and the training stall per
# checkpoint as a fraction of a step, for a Llama with ~680 MB of checkpoint state (57M
# parameters: f32 weights + AdamW's two moments). Targets: save and restore >= 80% of raw,
# stall < 5% of a step with asynchronous saving. Two step sizes: a tiny batch (1 x 64 tokens:
# many short steps, so many saves to measure write throughput under training, and the stall as
# a share of an artificially small step) and a realistic one for this model (8 x 256 tokens, a
# step of seconds on 2 threads: the stall as a share of a real step).
#   bash bench/bench_ckpt.sh [BUILD_DIR]
# Environment: DT_BENCH_DIR  directory on the disk to measure (default: a new one under /tmp)
#              DT_BENCH_S3=0 skip the S3 (SeaweedFS) column (default: run it when weed exists)
# Runs as root to drop the page cache before reads (else reads may come from memory: noted).
# About 3-4 minutes on 2 cores. Not a test: it prints numbers and exits 0 unless a run fails.
set -euo pipefail
. "$(dirname "$0")/header.inc"
bench_header
build=$(cd "${1:-build}" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
dtrain=$build/dtrain io=$build/bench/bench_ckpt_io
[[ -x $io ]] || { echo "no $io: cmake --build $build --target bench_ckpt_io" >&2; exit 1; }
tmp=$(mktemp -d "${DT_BENCH_DIR:-/tmp}/dt-bench-ckpt.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
load0=$(cut -d' ' -f1-3 /proc/loadavg)
B=1 T=64    # tiny batches: short steps, large state (the stall is the largest share of a step)
B2=8 T2=256 # a realistic batch for a 57M-parameter model

# --- model and data ----------------------------------------------------------------------
"$dtrain" data import text /usr/share/games/fortunes -o "$tmp/fortunes" --doc-sep % --val 0.05 \
  --tokenizer "$repo/examples/llama-tiny/tokenizer.json" -q >/dev/null
sed -e 's/"hidden_size": *[0-9]*/"hidden_size": 768/' \
    -e 's/"intermediate_size": *[0-9]*/"intermediate_size": 2048/' \
    -e 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 8/' \
    -e 's/"num_attention_heads": *[0-9]*/"num_attention_heads": 12/' \
    -e 's/"num_key_value_heads": *[0-9]*/"num_key_value_heads": 12/' \
    "$repo/examples/llama-tiny/config.json" >"$tmp/config.json"
common=(model.hf_path="$tmp" data.train="$tmp/fortunes/train" data.val= data.seq_len="$T"
        data.batch="$B" train.threads=2 schedule.warmup_steps=1 schedule.total_steps=1000
        output.dir="$tmp/runs" output.export=false ckpt.keep_last=2)
train() { # train RUN_NAME LOG ARGS...
  local name=$1 log=$2
  shift 2
  "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" "${common[@]}" \
    output.run_name="$name" "$@" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
}

# Per-step wall time (s) of steps 2.. from "step k/N ... X tok/s" lines (train.log_every=1):
# "k seconds". The interval after step k's log line holds step k's checkpoint snapshot.
#   step_times LOG [TOKENS_PER_STEP]
step_times() { awk -v bt="${2:-$((B * T))}" '$1 == "step" { split($2, a, "/"); for (i = 1; i < NF; i++)
  if ($(i + 1) == "tok/s" && a[1] > 1) print a[1], bt / $i }' "$1"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# --- save: asynchronous (the default) ------------------------------------------------------
every=30 steps=120
echo "[1/6] training $steps steps, async checkpoint every $every steps" >&2
train async "$tmp/async.log" train.steps=$steps train.log_every=1 ckpt.every_steps=$every
log=$tmp/async.log
params=$(sed -nE 's/.*llama, ([0-9]+) parameters.*/\1/p' "$log")
step_times "$log" >"$tmp/async.steps"
step_s=$(cut -d' ' -f2 "$tmp/async.steps" | median)
# snapshots of saves during training (not the end save) and their commits
grep -E '^checkpoint step [0-9]+ \(every_steps\)' "$log" >"$tmp/snaps" || true
snap_first=$(head -n 1 "$tmp/snaps" | sed -nE 's/.*snapshot in ([0-9.]+) s.*/\1/p')
snap_rest=$(tail -n +2 "$tmp/snaps" | sed -nE 's/.*snapshot in ([0-9.]+) s.*/\1/p' | median)
waited=$(grep -c 'after waiting for the previous save' "$tmp/snaps" || true)
n_ck=$(wc -l <"$tmp/snaps")
save_train=$(sed -nE 's/^checkpoint step ([0-9]+) \(every_steps\).*/\1/p' "$log" | while read -r s; do
  sed -nE "s/^checkpoint step $s committed: .* \(([0-9.]+) MB\/s\).*/\1/p" "$log"; done | median)
save_end=$(sed -nE "s/^checkpoint step $steps committed: .* \(([0-9.]+) MB\/s\).*/\1/p" "$log")
ck_mb=$(sed -nE "s/^checkpoint step $steps committed: ([0-9.]+) MB.*/\1/p" "$log")
ck_dir=$(find "$tmp/runs" -type d -name "step-$(printf %09d $steps)" | head -n 1)
ck_bytes=$(find "$ck_dir" -type f -name '*.safetensors' -printf '%s\n' | awk '{ s += $1 } END { print s }')
# Training time the background writes cost: all step intervals beyond the median (the snapshot
# and steps slowed by the writer thread, which shares the 2 cores), per checkpoint.
lost=$(awk -v m="$step_s" -v n="$n_ck" '{ s += $2 - m } END { print s / n }' "$tmp/async.steps")

# --- save: asynchronous, a realistic step ---------------------------------------------------
steps2=12 every2=4
echo "[2/6] training $steps2 steps of $B2 x $T2 tokens, async checkpoint every $every2 steps" >&2
train real "$tmp/real.log" train.steps=$steps2 train.log_every=1 ckpt.every_steps=$every2 \
  data.batch=$B2 data.seq_len=$T2
step_times "$tmp/real.log" $((B2 * T2)) >"$tmp/real.steps"
step2_s=$(cut -d' ' -f2 "$tmp/real.steps" | median)
grep -E '^checkpoint step [0-9]+ \(every_steps\)' "$tmp/real.log" >"$tmp/snaps2" || true
n_ck2=$(wc -l <"$tmp/snaps2")
snap2_first=$(head -n 1 "$tmp/snaps2" | sed -nE 's/.*snapshot in ([0-9.]+) s.*/\1/p')
snap2_max=$(sed -nE 's/.*snapshot in ([0-9.]+) s.*/\1/p' "$tmp/snaps2" | sort -g | tail -n 1)
save2=$(sed -nE 's/^checkpoint step [0-9]+ committed: .* \(([0-9.]+) MB\/s\).*/\1/p' "$tmp/real.log" | head -n "$n_ck2" | median)
lost2=$(awk -v m="$step2_s" -v n="$n_ck2" '{ s += $2 - m } END { print s / n }' "$tmp/real.steps")

# --- save: synchronous ----------------------------------------------------------------------
echo "[3/6] training 24 steps, synchronous checkpoint every 8 steps" >&2
train sync "$tmp/sync.log" train.steps=24 train.log_every=1 ckpt.every_steps=8 ckpt.async=false
step_times "$tmp/sync.log" >"$tmp/sync.steps"
sync_stall=$(awk -v m="$step_s" '$1 == 9 || $1 == 17 { s += $2 - m; n++ } END { print s / n }' "$tmp/sync.steps")
save_sync=$(sed -nE 's/^checkpoint step (8|16) committed: .* \(([0-9.]+) MB\/s\).*/\2/p' "$tmp/sync.log" | median)

# --- raw disk and dt_store alone ----------------------------------------------------------
echo "[4/6] raw disk and dt_store, $ck_bytes bytes" >&2
"$io" raw "$tmp" "$ck_bytes" 3 >"$tmp/raw.out"
"$io" store "$tmp/store" "$ck_bytes" 2 >"$tmp/store.out"
val() { local v; v=$(sed -nE "s/^$1 ([0-9.]+)$/\1/p" "$2"); echo "${v:-0}"; } # 0: not measured
raw_w=$(val raw_write_mbps "$tmp/raw.out") raw_r=$(val raw_read_mbps "$tmp/raw.out")
raw_wd=$(val raw_write_direct_mbps "$tmp/raw.out")
cache=$(val cache_dropped "$tmp/raw.out")

# --- restore ------------------------------------------------------------------------------
echo "[5/6] restore: the resume read path, and a resumed training against a fresh one" >&2
"$io" restore "$tmp/runs" "llama-tiny-fortunes/async/checkpoints" >"$tmp/restore"
# The trainer's own restore time: a run that resumes from step $steps and trains one step,
# minus one that starts fresh and trains one step (same start-up, init, step); best of 5 each,
# alternating. Only the checkpoint's files are evicted from the page cache (dd iflag=nocache),
# so both runs find the program and its libraries cached alike.
#
# This VM's disk reads at two speeds (about 3 GB/s, and about 0.57 GB/s once some budget of recent
# I/O is spent: a throttle outside the guest; a 2 MiB read then takes a steady 3.7 ms), and which
# one a read gets depends on what ran before it. So each round also reads the checkpoint's own
# files raw (dd, 16 MiB reads, evicted first) right before the resumed run: the trainer's restore
# is compared with the raw read of the same bytes under the same conditions, per round.
evict() { for f in "$ck_dir"/*; do dd if="$f" iflag=nocache count=0 status=none; done; }
wall() { local t0 t1; evict; t0=$(date +%s.%N); train "$@"; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
raw_ck() { local t0 t1; evict; t0=$(date +%s.%N)
  for f in "$ck_dir"/*; do dd if="$f" of=/dev/null bs=16M status=none; done
  t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
for _ in 1 2 3 4 5; do
  raw_ck >>"$tmp/t_rawck"
  wall fresh "$tmp/fresh.log" train.steps=1 ckpt.resume=never >>"$tmp/t_fresh"
  wall async "$tmp/resume.log" train.steps=$((steps + 1)) ckpt.resume=auto >>"$tmp/t_resume"
  grep -q "^resumed from .*step $steps" "$tmp/resume.log" || { cat "$tmp/resume.log" >&2; exit 1; }
  # the trainer's own timing of its resume (choose + read + verify + copy), where it logs one
  sed -nE 's/^checkpoint .* loaded: [0-9.]+ MB read and verified in ([0-9.]+) s.*/\1/p' \
    "$tmp/resume.log" >>"$tmp/t_load"
done
t_load=$(sort -g "$tmp/t_load" | head -n 1) t_rawck=$(sort -g "$tmp/t_rawck" | head -n 1)
# per round: raw read of the checkpoint / the trainer's logged restore (the round's own pair)
pairs=$(paste "$tmp/t_rawck" "$tmp/t_load" | awk '{ printf "%s%.0f%%", (NR > 1 ? " " : ""), 100 * $1 / $2 }')
t_fresh=$(sort -g "$tmp/t_fresh" | head -n 1) t_resume=$(sort -g "$tmp/t_resume" | head -n 1)
restore_s=$(echo "$t_resume - $t_fresh" | bc -l)

# --- S3 (SeaweedFS on 127.0.0.1), optional -------------------------------------------------
s3=""
if [[ ${DT_BENCH_S3:-1} != 0 ]]; then
  echo "[6/6] S3: SeaweedFS on 127.0.0.1" >&2
  export dtrain repo tmp io ck_bytes B T
  if bash "$repo/tests/storage/seaweed.sh" run -- bash -c '
      set -euo pipefail
      "$io" mkbucket dtrain-bench
      common=(model.hf_path="$tmp" data.train="$tmp/fortunes/train" data.val= data.seq_len="$T"
              data.batch="$B" train.threads=2 schedule.warmup_steps=1 schedule.total_steps=1000
              output.dir="$tmp/runs" output.export=false ckpt.keep_last=2
              ckpt.dir=s3://dtrain-bench/ckpt)
      "$dtrain" train "$repo/examples/llama-tiny-fortunes.yaml" "${common[@]}" output.run_name=s3 \
        train.steps=20 train.log_every=1 ckpt.every_steps=10 >"$tmp/s3.log" 2>&1 || { cat "$tmp/s3.log"; exit 1; }
      "$io" store s3://dtrain-bench/store "$ck_bytes" 1 >"$tmp/s3.store"
      "$io" restore s3://dtrain-bench/ckpt llama-tiny-fortunes/s3/checkpoints >"$tmp/s3.restore"
    ' >"$tmp/s3.out" 2>&1; then
    s3_train=$(sed -nE 's/^checkpoint step 10 committed: .* \(([0-9.]+) MB\/s\).*/\1/p' "$tmp/s3.log")
    s3_end=$(sed -nE 's/^checkpoint step 20 committed: .* \(([0-9.]+) MB\/s\).*/\1/p' "$tmp/s3.log")
    s3=ok
  else
    rc=$?
    if [[ $rc == 77 ]]; then
      echo "  (skipped: no weed binary)" >&2
    else
      echo "  S3 part failed (rc $rc):" >&2
      tail -n 20 "$tmp/s3.out" >&2
    fi
  fi
fi

# --- report -------------------------------------------------------------------------------
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f%%", 100 * a / b; else printf "-" }'; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
r=$tmp/restore
echo
echo "checkpoint benchmark: Llama $(awk -v p="$params" 'BEGIN { printf "%.1fM", p / 1e6 }') parameters, $ck_mb MB per checkpoint (weights + AdamW moments, f32), 1 rank, train.threads=2, batch $B x $T tokens"
echo "load average at start: $load0, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the cores skews every number)"
echo "disk: $(df -PT "$tmp" | awk 'NR == 2 { print $1, $2 }') at $tmp; $(nproc) cores; page cache $([[ $cache == 1 ]] && echo "dropped before every read" || echo "NOT dropped (no root): reads may come from memory")"
echo
printf "%-58s %8s %8s\n" "" "MB/s" "of raw"
printf "%-58s %8.0f %8s\n" "raw write, 16 MiB writes + fsync (dd conv=fsync)" "$raw_w" ""
printf "%-58s %8.0f %8s\n" "raw write, O_DIRECT + fsync" "$raw_wd" "$(pct "$raw_wd" "$raw_w")"
printf "%-58s %8.0f %8s\n" "dt_store_put alone (xxh3 + put + fsync)" "$(val store_put_mbps "$tmp/store.out")" "$(pct "$(val store_put_mbps "$tmp/store.out")" "$raw_w")"
printf "%-58s %8.0f %8s\n" "dtrain save, async, while training (median of $n_ck)" "$save_train" "$(pct "$save_train" "$raw_w")"
printf "%-58s %8.0f %8s\n" "dtrain save, training blocked (ckpt.async=false)" "$save_sync" "$(pct "$save_sync" "$raw_w")"
printf "%-58s %8.0f %8s\n" "dtrain save, end of training (nothing else running)" "$save_end" "$(pct "$save_end" "$raw_w")"
printf "%-58s %8.0f %8s\n" "raw read, 16 MiB reads into one buffer" "$raw_r" ""
printf "%-58s %8.0f %8s\n" "dt_store_get alone (+ xxh3)" "$(val store_get_mbps "$tmp/store.out")" "$(pct "$(val store_get_mbps "$tmp/store.out")" "$raw_r")"
printf "%-58s %8.0f %8s\n" "dt_store_get_stream alone (+ xxh3 + copy per chunk)" "$(val store_stream_mbps "$tmp/store.out")" "$(pct "$(val store_stream_mbps "$tmp/store.out")" "$raw_r")"
printf "%-58s %8.0f %8s\n" "dtrain restore, trainer (resumed run - fresh run, wall)" "$(mbps "$ck_bytes" "$restore_s")" "$(pct "$(mbps "$ck_bytes" "$restore_s")" "$raw_r")"
if [[ -n $t_load ]]; then
  printf "%-58s %8.0f %8s\n" "dtrain restore, trainer (its log: choose + read + copy)" "$(mbps "$ck_bytes" "$t_load")" "$(pct "$(mbps "$ck_bytes" "$t_load")" "$raw_r")"
fi
printf "%-58s %8.0f\n" "raw read of the checkpoint's own files (dd, best of 5)" "$(mbps "$ck_bytes" "$t_rawck")"
printf "%-58s %8.0f %8s\n" "dtrain restore, trainer (its log) vs that raw read" "$(mbps "$ck_bytes" "$t_load")" "$(pct "$(mbps "$ck_bytes" "$t_load")" "$(mbps "$ck_bytes" "$t_rawck")")"
printf "  per round (raw read of the checkpoint / trainer's restore, same round): %s\n" "$pairs"
printf "%-58s %8.0f %8s\n" "  its read path: stat all + stream (xxh3 + copy per chunk)" "$(val restore_mbps "$r")" "$(pct "$(val restore_mbps "$r")" "$raw_r")"
printf "%-58s %8.0f %8s\n" "  the former read path: get whole file, xxh3, copy" "$(val restore_whole_mbps "$r")" "$(pct "$(val restore_whole_mbps "$r")" "$raw_r")"
if [[ $s3 == ok ]]; then
  printf "%-58s %8.0f\n" "S3 (SeaweedFS, localhost): dt_store_put alone" "$(val store_put_mbps "$tmp/s3.store")"
  printf "%-58s %8.0f\n" "S3: dtrain save, async, while training" "$s3_train"
  printf "%-58s %8.0f\n" "S3: dtrain save, end of training" "$s3_end"
  printf "%-58s %8.0f\n" "S3: dt_store_get alone (+ xxh3)" "$(val store_get_mbps "$tmp/s3.store")"
  printf "%-58s %8.0f\n" "S3: restore read path (stream)" "$(val restore_mbps "$tmp/s3.restore")"
fi
echo
printf "step time (median, async run)                    %.3f s\n" "$step_s"
printf "stall per checkpoint, async: snapshot            %.3f s = %s of a step (first save: %.3f s = %s)\n" \
  "$snap_rest" "$(pct "$snap_rest" "$step_s")" "$snap_first" "$(pct "$snap_first" "$step_s")"
[[ $waited == 0 ]] || echo "  ($waited saves waited for the previous one: ckpt.every_steps is shorter than a write)"
printf "training time lost per checkpoint, async         %.3f s = %.1f steps (snapshot + steps slowed by the writer)\n" "$lost" "$(echo "$lost / $step_s" | bc -l)"
printf "realistic step ($B2 x $T2 tokens), median         %.3f s; async save while training %.0f MB/s (%s of raw)\n" \
  "$step2_s" "$save2" "$(pct "$save2" "$raw_w")"
printf "  stall per checkpoint, async: snapshot          %.3f s = %s of a step (largest of $n_ck2; first save %.3f s)\n" \
  "$snap2_max" "$(pct "$snap2_max" "$step2_s")" "$snap2_first"
printf "  training time lost per checkpoint, async       %.3f s = %s of a step (snapshot + steps slowed by the writer)\n" \
  "$lost2" "$(pct "$lost2" "$step2_s")"
printf "stall per checkpoint, ckpt.async=false           %.3f s = %.1f steps\n" "$sync_stall" "$(echo "$sync_stall / $step_s" | bc -l)"
printf "restore (resume), trainer                        %.3f s (resumed run %.2f s - fresh run %.2f s); read path %s s choose + %s s load; former whole-file pass %s s\n" \
  "$restore_s" "$t_resume" "$t_fresh" "$(val restore_find_s "$r")" "$(val restore_load_s "$r")" "$(val restore_whole_s "$r")"
printf "CPU per GB written: raw buffered %.2f s, raw O_DIRECT %.2f s, dt_store_put %.2f s (taken from training by an async save)\n" \
  "$(val raw_write_cpu_s_per_gb "$tmp/raw.out")" "$(val raw_write_direct_cpu_s_per_gb "$tmp/raw.out")" "$(val store_put_cpu_s_per_gb "$tmp/store.out")"
echo "targets: save and restore >= 80% of raw; async stall < 5% of a step"
