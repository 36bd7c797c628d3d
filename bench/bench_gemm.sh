#!/bin/sh
# Runs bench_gemm with 2 threads twice: in the environment as it is (here OPENBLAS_CORETYPE=
# Haswell forces OpenBLAS's AVX2 kernels) and with both OPENBLAS variables unset (OpenBLAS
# picks its AVX-512 kernel).
# Usage: bench/bench_gemm.sh [BUILD_DIR=build] [all|quick] [SECONDS per figure, default 0.5]
set -e
. "$(dirname "$0")/header.inc"
bench_header
BUILD=${1:-build}
BIN="$BUILD/bench/bench_gemm"
[ -x "$BIN" ] || { echo "bench_gemm.sh: $BIN not found; build first (cmake --build $BUILD)" >&2; exit 2; }
echo "=== environment as-is"
"$BIN" 2 $2 $3
echo
echo "=== OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$BIN" 2 $2 $3
