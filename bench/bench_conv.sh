#!/bin/sh
# conv2d forward and forward+backward at ResNet shapes: dtrain (bench_conv) against PyTorch
# (bench/conv_peer.py, Debian's PyTorch 1.13 under /usr/bin/python3), in one run and the same
# environment: both OPENBLAS variables unset (add --tuned for DESIGN.md's tuned environment:
# malloc settings too). Prints side-by-side median ms and the ratio ours/PyTorch (< 1: faster).
#
# usage: bench/bench_conv.sh [--build DIR] [--batch N] [--threads T] [--reps R] [--tuned]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
batch=32 threads=2 reps=10 tuned=0
while [ $# -gt 0 ]; do
    case "$1" in
    --build) build=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --tuned) tuned=1; shift ;;
    *) echo "usage: $0 [--build DIR] [--batch N] [--threads T] [--reps R] [--tuned]" >&2; exit 2 ;;
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
run "$bin" --batch "$batch" --threads "$threads" --reps "$reps" >"$tmp/ours"
run /usr/bin/python3 "$here/conv_peer.py" --batch "$batch" --threads "$threads" --reps "$reps" >"$tmp/peer"

env=$([ "$tuned" = 1 ] && echo tuned || echo "OPENBLAS vars unset")
echo "conv2d NCHW f32, batch $batch, $threads threads, median of $reps ($env); ms"
awk 'NR == FNR { f[$1] = $2; fb[$1] = $3; next }
     FNR == 1 { printf "%-18s %9s %9s %6s   %9s %9s %6s\n", "shape", "fwd", "torch", "ratio",
                       "fwd+bwd", "torch", "ratio" }
     ($1 in f) { printf "%-18s %9.3f %9.3f %6.2f   %9.3f %9.3f %6.2f\n", $1, f[$1], $2, f[$1] / $2,
                        fb[$1], $3, fb[$1] / $3; sf += f[$1]; st += $2; sfb += fb[$1]; stb += $3 }
     END { printf "%-18s %9.3f %9.3f %6.2f   %9.3f %9.3f %6.2f\n", "total", sf, st, sf / st,
                  sfb, stb, sfb / stb }' "$tmp/ours" "$tmp/peer"
