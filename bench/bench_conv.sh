#!/bin/sh
# conv2d forward and forward+backward at ResNet shapes: dtrain (bench_conv) against PyTorch
# (bench/conv_peer.py, Debian's PyTorch 1.13 under /usr/bin/python3), in one run and the same
# environment: both OPENBLAS variables unset (add --tuned for the tuned environment of bench_models.sh:
# malloc settings too). Prints side-by-side median ms and the ratio ours/PyTorch (< 1: faster).
# With --rounds K the two sides alternate K times and each figure is the best of the K medians
# (robust against other load on a shared machine).
#
# usage: bench/bench_conv.sh [--build DIR] [--batch N] [--threads T] [--reps R] [--rounds K]
#                            [--tuned]
set -eu
. "$(dirname "$0")/header.inc"
bench_header
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
batch=32 threads=2 reps=10 rounds=1 tuned=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --tuned) tuned=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--batch N] [--threads T] [--reps R] [--rounds K] [--tuned]" >&2
       exit 2 ;;
    esac
done
bin="$build/bench/bench_conv"
[ -x "$bin" ] || bin="$build/bench_conv"
[ -x "$bin" ] || { echo "bench_conv not built under $build (cmake --build $build --target bench_conv)" >&2; exit 2; }

run() {
    if [ "$tuned" = 1 ]; then
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0 \
            MALLOC_TRIM_THRESHOLD_=100000000000 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$@"
    else
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$@"
    fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
: >"$tmp/ours"
: >"$tmp/peer"
i=0
while [ "$i" -lt "$rounds" ]; do
    run "$bin" --batch "$batch" --threads "$threads" --reps "$reps" >>"$tmp/ours"
    run /usr/bin/python3 "$here/conv_peer.py" --batch "$batch" --threads "$threads" \
        --reps "$reps" >>"$tmp/peer"
    i=$((i + 1))
done

env=$([ "$tuned" = 1 ] && echo tuned || echo "OPENBLAS vars unset")
echo "conv2d NCHW f32, batch $batch, $threads threads, median of $reps, best of $rounds rounds ($env); ms"
# best (minimum) of the rounds per shape and column, then side by side in the peer's order
awk 'function min(a, b) { return (a == "" || b < a) ? b : a }
     NR == FNR { f[$1] = min(f[$1], $2); fb[$1] = min(fb[$1], $3); next }
     { if (!($1 in t)) order[n++] = $1; t[$1] = min(t[$1], $2); tb[$1] = min(tb[$1], $3) }
     END {
         printf "%-18s %9s %9s %6s   %9s %9s %6s\n", "shape", "fwd", "torch", "ratio", "fwd+bwd",
                "torch", "ratio"
         for (i = 0; i < n; i++) {
             k = order[i]
             if (!(k in f)) continue
             printf "%-18s %9.3f %9.3f %6.2f   %9.3f %9.3f %6.2f\n", k, f[k], t[k], f[k] / t[k],
                    fb[k], tb[k], fb[k] / tb[k]
             sf += f[k]; st += t[k]; sfb += fb[k]; stb += tb[k]
         }
         printf "%-18s %9.3f %9.3f %6.2f   %9.3f %9.3f %6.2f\n", "total", sf, st, sf / st, sfb,
                stb, sfb / stb
     }' "$tmp/ours" "$tmp/peer"
