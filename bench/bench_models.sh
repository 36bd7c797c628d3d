#!/usr/bin/env bash
# Training-step throughput, dtrain beside PyTorch on the same model, threads and environment,
# in one run. Peers: Debian's PyTorch 1.13 (/usr/bin/python3) and the newest PyTorch from PyPI
# (the reference venv, scripts/setup-venv.sh). Environment: "tuned", for every side alike:
# both OPENBLAS variables unset, glibc malloc kept from returning memory.
#   bash bench/bench_models.sh [BUILD_DIR] [quick]
set -uo pipefail
. "$(dirname "$0")/header.inc"
bench_header
build=${1:-build}
quick=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
venv_py=${DT_VENV:-$HOME/.cache/dtrain/venv}/bin/python
tuned=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE MALLOC_MMAP_MAX_=0
       MALLOC_TRIM_THRESHOLD_=100000000000 GLIBC_TUNABLES=glibc.malloc.hugetlb=1 DT_THREADS=2)
steps=5
[[ -n "$quick" ]] && steps=2

rate() { grep -oE '(img|tok)_per_s=[0-9.]+' | head -1 | cut -d= -f2; }

row() { # name, our args..., -- peer script + args
  local name=$1; shift
  local ours=() peer=()
  while [[ $1 != -- ]]; do ours+=("$1"); shift; done; shift
  peer=("$@")
  local o t13 tnew
  o=$("${tuned[@]}" "$build/bench/bench_models" "${ours[@]}" 2>&1 | tee -a /tmp/bench_models.log | rate)
  t13=$("${tuned[@]}" /usr/bin/python3 "${peer[@]}" 2>&1 | tee -a /tmp/bench_models.log | rate)
  tnew=$("${tuned[@]}" "$venv_py" "${peer[@]}" 2>&1 | tee -a /tmp/bench_models.log | rate)
  local best=$t13
  if [[ -n "$tnew" && ( -z "$best" || $(echo "$tnew > $best" | bc) == 1 ) ]]; then best=$tnew; fi
  local ratio="n/a"
  [[ -n "$o" && -n "$best" ]] && ratio=$(echo "scale=2; $o / $best" | bc)
  printf "| %-44s | %10s | %12s | %12s | %6s |\n" "$name" "${o:-fail}" "${t13:-fail}" "${tnew:-fail}" "$ratio"
}

: > /tmp/bench_models.log
echo "| workload (2 threads, tuned env) | dtrain | PyTorch 1.13 | PyTorch PyPI | dtrain / best |"
echo "|---|---|---|---|---|"
row "ResNet-18 small stem 3x32x32 b64 SGD (img/s)" resnet 18 cifar 32 64 $steps 1 -- \
    "$here/peers/bench_cnn.py" --model resnet18 --stem cifar --hw 32 --batch 64 --threads 2 --steps $steps --warmup 1
row "ResNet-152 stock 3x32x32 b32 SGD (img/s)" resnet 152 stock 32 32 $steps 1 -- \
    "$here/peers/bench_cnn.py" --model resnet152 --stem stock --hw 32 --batch 32 --threads 2 --steps $steps --warmup 1
row "Llama 56M seq256 b8 AdamW (tok/s)" llama 512 8 8 4 1408 32000 256 8 $((steps>3?4:steps)) 1 -- \
    "$here/peers/bench_llama.py" --threads 2 --steps $((steps>3?4:steps)) --warmup 1
echo "(raw lines: /tmp/bench_models.log)"
