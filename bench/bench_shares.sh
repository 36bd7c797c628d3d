#!/usr/bin/env bash
# Uneven batch shares (dist.batch_shares) with one worker half as fast as the other.
#
# Two workers on a 2-core machine, each pinned to its own core with one thread; a busy loop pinned
# to core 1 takes half of that core, so worker 1 runs at about half the speed of worker 0. Timed,
# in tokens per second of the tiny Llama on the fortunes set (the median over the step lines
# after step 10):
#   solo0   worker 0's core alone, one process with its batch
#   solo1   worker 1's (slowed) core alone, one process with the same batch
#   equal   2 ranks, equal shares (data.batch each): the fast one waits at every all-reduce
#   shares  2 ranks, dist.batch_shares=[2,1]: the fast one takes twice the samples
#   auto    2 ranks, dist.batch_shares=auto: equal parts until dist.rebalance_step=10, then the
#           parts the ranks measured (forward + backward time per sample)
# and each job's figure as a share of solo0 + solo1, what two independent workers would do
# together. Equal shares can reach about 2 x solo1 / (solo0 + solo1) = 67%.
#
#   bash bench/bench_shares.sh [BUILD_DIR=build] [DATA_DIR=BUILD_DIR/train-data]
# Environment: STEPS (60), BATCH (24: per worker under equal shares; the global batch is 2 x
# BATCH throughout), SEQ (128). Both OPENBLAS variables unset for every side alike. About 4
# minutes.
set -uo pipefail
build=${1:-build}
data=${2:-$build/train-data}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/header.inc"
bench_header
steps=${STEPS:-60} batch=${BATCH:-24} seq=${SEQ:-128}
dtrain=$build/dtrain
[ -x "$dtrain" ] || { echo "bench_shares.sh: no $dtrain (build first)" >&2; exit 2; }
[ -d "$data/fortunes/train" ] || { echo "bench_shares.sh: no $data/fortunes/train (ctest -R import_fortunes)" >&2; exit 2; }
[ "$(nproc)" -ge 2 ] || { echo "bench_shares.sh: needs 2 CPUs" >&2; exit 2; }
tmp=$(mktemp -d)
hog=
cleanup() {
    [ -n "$hog" ] && kill "$hog" 2> /dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OMP_NUM_THREADS=1 GOMP_SPINCOUNT=1000
args=("$repo/examples/llama-tiny-fortunes.yaml" data.train="$data/fortunes/train" data.val=
      data.seq_len="$seq" train.threads=1 train.steps="$steps" train.log_every=5
      schedule.warmup_steps=0 output.export=false ckpt.resume=never output.dir="$tmp/runs")
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# tokens/s of a log: the median of its step lines after the first 10 steps (start-up)
rate() {
    awk '$1 == "step" { split($2, s, "/"); if (s[1] > 10) for (i = 1; i < NF; i++)
         if ($(i + 1) == "tok/s") print $i }' "$1" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print 0 }'
}

taskset -c 1 sh -c 'while :; do :; done' &
hog=$!
taskset -c 0 "$dtrain" train "${args[@]}" data.batch="$batch" output.run_name=solo0 \
    > "$tmp/solo0.log" 2>&1 || { cat "$tmp/solo0.log"; exit 1; }
taskset -c 1 "$dtrain" train "${args[@]}" data.batch="$batch" output.run_name=solo1 \
    > "$tmp/solo1.log" 2>&1 || { cat "$tmp/solo1.log"; exit 1; }
for mode in equal shares auto; do
    extra=()
    [ "$mode" = shares ] && extra=(dist.batch_shares=2,1)
    [ "$mode" = auto ] && extra=(dist.batch_shares=auto dist.rebalance_step=10)
    "${mpi[@]}" -np 1 taskset -c 0 "$dtrain" train "${args[@]}" data.batch="$batch" \
        output.run_name="$mode" "${extra[@]}" : \
        -np 1 taskset -c 1 "$dtrain" train "${args[@]}" data.batch="$batch" \
        output.run_name="$mode" "${extra[@]}" > "$tmp/$mode.log" 2>&1 ||
        { cat "$tmp/$mode.log"; exit 1; }
done
s0=$(rate "$tmp/solo0.log") s1=$(rate "$tmp/solo1.log")
eq=$(rate "$tmp/equal.log") sh=$(rate "$tmp/shares.log") au=$(rate "$tmp/auto.log")
grep -h 'batch shares' "$tmp/shares.log" "$tmp/auto.log"
awk -v s0="$s0" -v s1="$s1" -v eq="$eq" -v sh="$sh" -v au="$au" 'BEGIN {
    sum = s0 + s1
    printf "tiny Llama, seq %d, 1 thread per worker; worker 1 shares its core with a busy loop\n", '"$seq"'
    printf "  solo0 (fast core)     %8.0f tok/s\n", s0
    printf "  solo1 (slowed core)   %8.0f tok/s  (%.2f of solo0)\n", s1, s1 / s0
    printf "  2 ranks, equal        %8.0f tok/s  %5.1f%% of solo0 + solo1\n", eq, 100 * eq / sum
    printf "  2 ranks, shares [2,1] %8.0f tok/s  %5.1f%% of solo0 + solo1  (%.2fx equal)\n", sh, 100 * sh / sum, sh / eq
    printf "  2 ranks, shares auto  %8.0f tok/s  %5.1f%% of solo0 + solo1  (%.2fx equal)\n", au, 100 * au / sum, au / eq
}'
