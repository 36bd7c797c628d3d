#!/usr/bin/env bash
# The GPU check: build the device library and its tests on a machine with an NVIDIA GPU, run
# them, and record the GPU, the results and the kernel timings (docs/gpu.md).
#
#   scripts/gpu-check.sh [OUT_DIR]        (default: $OUT, else ./gpu-check-out)
#
# Made for a machine with no network: nothing is downloaded. It needs nvcc, CMake, ninja and a C
# compiler, and the Debian libraries dtrain's CPU side links (oneDNN, OpenBLAS, cJSON, PCRE2,
# xxHash, libyaml, zlib, libcurl, OpenSSL, SQLite, libmicrohttpd, TurboJPEG, libpng, libwebp):
# either installed, or unpacked under DT_DEPS_PREFIX (a folder with usr/include, usr/lib/...).
# It builds only the device tests and the library (not the CLI or the other tests), for sm_90
# only, then runs ctest -L gpu, then compares the GEMM speed with PyTorch's on the same GPU when
# python3 has torch. Every step's output goes to OUT_DIR; the summary is OUT_DIR/summary.txt.
# Exit status: 0 when every GPU test passed (none skipped), 1 otherwise.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${OUT:-$PWD/gpu-check-out}}
mkdir -p "$out"
build=${DT_GPU_BUILD:-$repo/build-gpu}
jobs=$(nproc 2>/dev/null || echo 4)
sum=$out/summary.txt
: >"$sum"
say() { echo "$*" | tee -a "$sum"; }
t0=$(date +%s)

say "gpu-check: $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi >"$out/nvidia-smi.txt" 2>&1
  say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -1)"
else
  say "gpu: nvidia-smi not found"
fi
nvcc_bin=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null | head -1)
if [[ -z "$nvcc_bin" ]]; then
  say "FAIL: nvcc not found (PATH or /usr/local/cuda/bin)"
  exit 1
fi
say "nvcc: $("$nvcc_bin" --version | tail -1)"

# Libraries from a carried prefix (unpacked .deb files), if given.
cm_extra=()
if [[ -n "${DT_DEPS_PREFIX:-}" ]]; then
  p=$DT_DEPS_PREFIX
  cm_extra+=("-DCMAKE_PREFIX_PATH=$p/usr;$p/usr/lib/x86_64-linux-gnu"
             "-DCMAKE_INCLUDE_PATH=$p/usr/include;$p/usr/include/x86_64-linux-gnu"
             "-DCMAKE_LIBRARY_PATH=$p/usr/lib/x86_64-linux-gnu;$p/usr/lib")
  export LD_LIBRARY_PATH=$p/usr/lib/x86_64-linux-gnu:$p/usr/lib/x86_64-linux-gnu/openblas-openmp:${LD_LIBRARY_PATH:-}
  export PKG_CONFIG_PATH=$p/usr/lib/x86_64-linux-gnu/pkgconfig:$p/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}
  say "dependencies from DT_DEPS_PREFIX=$p"
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)

# Configure: Release, CUDA on, sm_90 machine code only (the PTX is not needed to run here).
tc=$(date +%s)
if ! cmake -S "$repo" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DDT_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DCMAKE_CUDA_ARCHITECTURES=90-real "${cm_extra[@]}" \
    >"$out/configure.log" 2>&1; then
  say "FAIL: configure (see configure.log); the first missing piece:"
  grep -m3 -E "Could NOT find|not found|NOTFOUND|Error" "$out/configure.log" | tee -a "$sum"
  say "hint: install the Debian packages of scripts/install-deps.sh, or carry them unpacked and set DT_DEPS_PREFIX"
  exit 1
fi
targets=(device_cpu cuda_device cuda_optim cuda_nn cuda_gemm)
if ! cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  say "FAIL: build (see build.log):"
  grep -m5 -E "error|FAILED" "$out/build.log" | tee -a "$sum"
  exit 1
fi
say "configure + build: $(($(date +%s) - tc)) s"

# The device tests (label gpu) and the CPU device test; skipped counts as a failure here.
(cd "$build" && ctest -R '^(device_cpu|cuda_device|cuda_optim|cuda_nn|cuda_gemm)$' \
   --output-on-failure --timeout 300) >"$out/ctest.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|Skipped|Failed" "$out/ctest.log" | tee -a "$sum"
for t in cuda_device cuda_optim cuda_nn cuda_gemm; do
  "$build/tests/$t" >"$out/$t.log" 2>&1
done
gemm=$(grep -m1 "^GEMM" "$out/cuda_gemm.log" || true)
say "dtrain cuBLASLt: ${gemm:-no timing (see cuda_gemm.log)}"
grep -m1 "pinned upload" "$out/cuda_device.log" | tee -a "$sum"

# PyTorch on the same GPU, same sizes, for the ratio.
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  python3 - >"$out/torch_gemm.log" 2>&1 <<'PY'
import os, torch
n = int(os.environ.get("DT_GEMM_BENCH_N", "8192"))
torch.backends.cuda.matmul.allow_tf32 = True
for name, dt in (("bf16", torch.bfloat16), ("tf32", torch.float32)):
    a = torch.full((n, n), 0.0078, device="cuda", dtype=dt); b = a.clone()
    for _ in range(3): a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(10): a @ b
    e.record(); torch.cuda.synchronize()
    print(f"torch {name} {2 * n**3 * 10 / (s.elapsed_time(e) * 1e-3) / 1e12:.1f} TFLOP/s")
PY
  tb=$(awk '/torch bf16/{print $3}' "$out/torch_gemm.log")
  tt=$(awk '/torch tf32/{print $3}' "$out/torch_gemm.log")
  db=$(echo "$gemm" | sed -n 's/.*bf16 \([0-9.]*\).*/\1/p')
  dtf=$(echo "$gemm" | sed -n 's/.*tf32 \([0-9.]*\).*/\1/p')
  say "torch: bf16 ${tb:-?} TFLOP/s, tf32 ${tt:-?} TFLOP/s"
  if [[ -n "$tb" && -n "$db" && -n "$tt" && -n "$dtf" ]]; then
    say "ratio dtrain/torch: bf16 $(awk "BEGIN{printf \"%.2f\", $db/$tb}"), tf32 $(awk "BEGIN{printf \"%.2f\", $dtf/$tt}") (H200 dense bf16 peak: 989 TFLOP/s)"
  fi
else
  say "torch: not available with CUDA; no ratio"
fi
say "total: $(($(date +%s) - t0)) s"
if [[ $rc -ne 0 ]] || grep -q "Skipped" "$out/ctest.log"; then
  say "RESULT: FAIL"
  exit 1
fi
say "RESULT: PASS"
